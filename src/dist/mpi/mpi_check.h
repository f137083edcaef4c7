#pragma once
// MPI calls go through TESSERA_MPI_CHECK: communicators use MPI_ERRORS_RETURN, and a failed call
// becomes a DistributedError with file:line and MPI's own message.
#include <mpi.h>

#include <string>

#include "tessera/dist/error.h"

namespace tessera::dist::detail {

inline void mpi_check(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw DistributedError(::tessera::detail::str("[mpi] expected MPI_SUCCESS from ", call, " at ",
                                                file, ":", line, ", got: ", std::string(msg, len)));
}

}  // namespace tessera::dist::detail

#define TESSERA_MPI_CHECK(call) \
  ::tessera::dist::detail::mpi_check((call), #call, __FILE__, __LINE__)
