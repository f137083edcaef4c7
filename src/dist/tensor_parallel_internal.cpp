#include "dist/tensor_parallel_internal.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/index.h"
#include "tessera/ops/reduce.h"

namespace tessera::dist::detail {

void check_group(std::string_view op, const GroupPtr& group) {
  TESSERA_CHECK(group != nullptr, ValueError, "[", op, "] expected a process group, got null");
}

int64_t normalize_dim(std::string_view op, int64_t dim, int64_t ndim) {
  TESSERA_CHECK(dim >= -ndim && dim < ndim, IndexError, "[", op, "] expected dim in [", -ndim, ", ",
                ndim, ") for a ", ndim, "-d tensor, got ", dim);
  return dim < 0 ? dim + ndim : dim;
}

void check_ids(std::string_view op, const Tensor& ids, int64_t n, const char* what,
               std::optional<int64_t> ignore) {
  TESSERA_CHECK(ids.defined(), ValueError, "[", op, "] expected ", what, ", got undefined");
  TESSERA_CHECK(ids.dtype() == kInt64, TypeError, "[", op, "] expected int64 ", what, ", got ",
                ids.dtype());
  if (ids.numel() == 0) return;
  autograd::NoGradGuard ng;
  Tensor bad = logical_or(ids < 0, ids >= n);
  if (ignore) bad = logical_and(bad, ids != *ignore);
  if (!any(bad).item<bool>()) return;
  const int64_t first = masked_select(ids, bad).select(0, 0).item<int64_t>();
  throw IndexError(::tessera::detail::str("[", op, "] expected ", what, " in [0, ", n, ")",
                                          ignore ? " or ignore_index" : "", ", got ", first));
}

}  // namespace tessera::dist::detail
