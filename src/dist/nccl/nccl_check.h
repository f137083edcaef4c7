#pragma once
// NCCL calls go through TESSERA_NCCL_CHECK: a failed call becomes a DistributedError with
// file:line, NCCL's name for the result and its last error message (ncclGetLastError).
#include <nccl.h>

#include <string>

#include "tessera/dist/error.h"

namespace tessera::dist::detail {

inline void nccl_check(ncclResult_t rc, const char* call, const char* file, int line) {
  if (rc == ncclSuccess) return;
  const char* last = ncclGetLastError(nullptr);  // the argument is unused by NCCL
  throw DistributedError(::tessera::detail::str("[nccl] expected ncclSuccess from ", call, " at ",
                                                file, ":", line, ", got ", ncclGetErrorString(rc),
                                                last && *last ? ": " : "", last ? last : ""));
}

}  // namespace tessera::dist::detail

#define TESSERA_NCCL_CHECK(call) \
  ::tessera::dist::detail::nccl_check((call), #call, __FILE__, __LINE__)
