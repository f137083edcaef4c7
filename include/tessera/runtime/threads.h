#pragma once
// The number of CPU threads the kernels use (OpenMP, which oneDNN and OpenBLAS share here), as
// torch.set_num_threads / torch.get_num_threads. The setting is the calling thread's: set it
// on the thread that runs the ops.
namespace tessera {

// ValueError unless n >= 1.
void set_num_threads(int n);
int get_num_threads();

}  // namespace tessera
