// CUDA runtime queries. Kernels arrive with the CUDA backend issue; until then the cuda preset
// builds this runtime layer so the toolchain and flags stay exercised by CI.
#include "backend/cuda/cuda_check.h"

namespace tessera::cuda {

int device_count() {
  int n = 0;
  cudaError_t status = cudaGetDeviceCount(&n);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();  // clear the sticky error: no GPU is a normal state
    return 0;
  }
  TESSERA_CUDA_CHECK(status);
  return n;
}

}  // namespace tessera::cuda
