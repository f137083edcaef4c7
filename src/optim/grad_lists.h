#pragma once
// Gradients as the list kernels of backend/common/optim_kernels.h take them: one floating dtype
// on one device per call, so clipping and unscaling cost a launch per dtype, not per tensor.
#include <vector>

#include "tessera/core/dispatcher.h"
#include "tessera/core/tensor.h"

namespace tessera::optim::detail {

// The defined gradients of params, detached.
TensorList defined_grads(const TensorList& params);

// tensors grouped by dtype when all are contiguous, floating and on one device; else empty.
std::vector<TensorList> group_by_dtype(const TensorList& tensors);

// group_by_dtype when the tensors' device registers every one of Kernels; else empty, and the
// caller falls back to per-tensor ops.
template <class... Kernels>
std::vector<TensorList> list_kernel_groups(const TensorList& tensors) {
  if (tensors.empty()) return {};
  const DeviceType type = tensors[0].device().type;
  if (!(has_kernel<Kernels>(type) && ...)) return {};
  return group_by_dtype(tensors);
}

}  // namespace tessera::optim::detail
