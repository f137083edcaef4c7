#pragma once
// The pinned host allocator's hook for transfers that stay queued (pinned_allocator.cu).
#include <cuda_runtime.h>

namespace tessera::cuda {

// Records that work queued on stream (of the current device) reads or writes the pinned block
// holding ptr: once freed, the block is not handed out again until that work is done. Memory the
// pinned allocator did not give is ignored.
void record_pinned_use(const void* ptr, cudaStream_t stream);

}  // namespace tessera::cuda
