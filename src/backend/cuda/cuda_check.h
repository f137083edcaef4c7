#pragma once
// Every CUDA runtime and cuBLAS(Lt) call goes through a check macro that throws RuntimeError with
// the call site and the library's own message instead of aborting; kernel launches are checked
// with TESSERA_CUDA_CHECK_LAUNCH().
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "tessera/core/error.h"

#define TESSERA_CUDA_CHECK(expr)                                                               \
  do {                                                                                         \
    cudaError_t tessera_cuda_status = (expr);                                                  \
    if (tessera_cuda_status != cudaSuccess)                                                    \
      throw ::tessera::RuntimeError(                                                           \
          ::tessera::detail::str("[cuda] ", #expr, " failed at " __FILE__ ":", __LINE__, ": ", \
                                 cudaGetErrorString(tessera_cuda_status)));                    \
  } while (0)

#define TESSERA_CUDA_CHECK_LAUNCH() TESSERA_CUDA_CHECK(cudaGetLastError())

#define TESSERA_CUBLAS_CHECK(expr)                                                               \
  do {                                                                                           \
    cublasStatus_t tessera_cublas_status = (expr);                                               \
    if (tessera_cublas_status != CUBLAS_STATUS_SUCCESS)                                          \
      throw ::tessera::RuntimeError(                                                             \
          ::tessera::detail::str("[cublas] ", #expr, " failed at " __FILE__ ":", __LINE__, ": ", \
                                 cublasLtGetStatusString(tessera_cublas_status)));               \
  } while (0)

namespace tessera::cuda {

// Whether the work queued before event has run: cudaEventQuery, without leaving
// cudaErrorNotReady behind as the last error for the next launch check to report.
inline bool event_completed(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  TESSERA_CUDA_CHECK(status);
  return true;
}

}  // namespace tessera::cuda
