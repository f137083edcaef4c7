// Transfers between the host and CUDA devices (and between devices) on the current stream.
// From pageable host memory cudaMemcpyAsync returns once the data is staged, so the source may
// be reused at once; from pinned memory the DMA reads it later, so a blocking copy waits for the
// stream. A copy to the host waits so the caller can read the result, unless it is async (pinned
// host memory, torch's non_blocking=True): then the caller synchronises before reading. A queued
// copy is recorded against its pinned block, which the allocator does not hand out again before the
// copy is done (pinned_allocator.cu).
#include "backend/common/elementwise_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/pinned_allocator.h"
#include "tessera/runtime/cuda.h"

namespace tessera::cuda {
namespace {

void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                 bool host_pinned, bool async) {
  if (nbytes == 0) return;
  const Device gpu = dst_device.is_cuda() ? dst_device : src_device;
  DeviceGuard guard(gpu.index);
  cudaStream_t stream = current_stream();
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
    TESSERA_CUDA_CHECK(
        cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, stream));
  } else {
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
  }
  if (async)
    record_pinned_use(dst_device.is_cpu() ? dst : src, stream);
  else if (dst_device.is_cpu() || host_pinned)
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

TESSERA_REGISTER_KERNEL(device_copy_kernel, DeviceType::CUDA, &device_copy);

}  // namespace
}  // namespace tessera::cuda
