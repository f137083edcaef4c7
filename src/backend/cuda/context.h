#pragma once
// What CUDA kernels of the backend need from the runtime: the stream to queue on, the current
// device's properties and its cuBLASLt handle. Host code only (no kernels here).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

int current_device();
// The stream this thread queues work on for the current device (cudaStreamLegacy until a
// StreamGuard sets another).
cudaStream_t current_stream();
void set_current_stream(cudaStream_t stream);
const cudaDeviceProp& device_properties();
// One handle per device, created on first use.
cublasLtHandle_t cublaslt_handle();

// Threads per block and blocks for a grid-stride loop over n items.
inline constexpr int kBlockSize = 256;
inline unsigned grid_size(int64_t n, int block = kBlockSize) {
  const int64_t max_blocks = int64_t{device_properties().multiProcessorCount} * 32;
  int64_t blocks = (n + block - 1) / block;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

}  // namespace tessera::cuda
