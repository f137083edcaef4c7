#include "optim/grad_lists.h"

#include <algorithm>

namespace tessera::optim::detail {

TensorList defined_grads(const TensorList& params) {
  TensorList grads;
  for (const Tensor& p : params) {
    if (Tensor g = p.grad(); g.defined()) grads.push_back(g.detach());
  }
  return grads;
}

std::vector<TensorList> group_by_dtype(const TensorList& tensors) {
  std::vector<TensorList> groups;
  if (tensors.empty()) return groups;
  const Device device = tensors[0].device();
  for (const Tensor& t : tensors) {
    if (t.device() != device || !t.is_contiguous() || !is_floating(t.dtype())) return {};
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const TensorList& l) { return l[0].dtype() == t.dtype(); });
    if (it == groups.end())
      groups.push_back({t});
    else
      it->push_back(t);
  }
  return groups;
}

}  // namespace tessera::optim::detail
