#pragma once
// Checks shared by the tensor-parallel sources (not public API).
#include <optional>
#include <string_view>

#include "tessera/dist/tensor_parallel.h"

namespace tessera::dist::detail {

// ValueError "[op] expected a process group, got null".
void check_group(std::string_view op, const GroupPtr& group);
// dim normalised into [0, ndim); IndexError naming op otherwise.
int64_t normalize_dim(std::string_view op, int64_t dim, int64_t ndim);
// TypeError unless ids is int64; IndexError naming the first id outside [0, n) that is not
// `ignore` (ids are token ids or class targets).
void check_ids(std::string_view op, const Tensor& ids, int64_t n, const char* what,
               std::optional<int64_t> ignore = std::nullopt);

}  // namespace tessera::dist::detail
