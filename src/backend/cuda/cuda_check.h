#pragma once
// Every CUDA runtime call goes through TESSERA_CUDA_CHECK, which throws RuntimeError with the
// call site and CUDA's own message instead of aborting.
#include <cuda_runtime.h>

#include "tessera/core/error.h"

#define TESSERA_CUDA_CHECK(expr)                                                          \
  do {                                                                                    \
    cudaError_t tessera_cuda_status = (expr);                                             \
    if (tessera_cuda_status != cudaSuccess)                                               \
      throw ::tessera::RuntimeError(::tessera::detail::str(                               \
          "[cuda] ", #expr, " failed at " __FILE__ ":", __LINE__, ": ",                   \
          cudaGetErrorString(tessera_cuda_status)));                                      \
  } while (0)
