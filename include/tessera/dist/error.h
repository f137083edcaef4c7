#pragma once
// The error every distributed failure turns into: a deadline that passed, ranks that called
// different collectives, an MPI call that failed. Lives here, not in core/error.h, so that adding
// it does not rebuild the whole library.
#include "tessera/core/error.h"

namespace tessera {

// A collective or point-to-point operation failed or could not complete in time. The message
// names the operation, the group and the rank. The process is usually beyond repair after it:
// the trainer or CLI reports it and then calls dist::abort().
class DistributedError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

}  // namespace tessera
