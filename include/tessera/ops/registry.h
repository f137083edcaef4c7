#pragma once
// The registry of public ops: name, family, accepted dtypes and whether it is differentiable.
// Each op's source file registers its entries next to the implementation; docs/ops.md and the
// test-coverage checks are generated from it.
#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/core/dispatcher.h"

namespace tessera {

struct OpInfo {
  std::string_view name;
  std::string_view family;  // elementwise, reduction, linalg, shape, indexing, nn, creation, ...
  uint32_t dtypes;          // bit set of DType (see dispatch.h)
  bool differentiable;
};

const std::vector<OpInfo>& op_registry();
bool register_ops(std::initializer_list<OpInfo> ops);

}  // namespace tessera

#define TESSERA_REGISTER_OPS(...)                                                          \
  [[maybe_unused]] static const bool TESSERA_KERNEL_CONCAT(tessera_ops_registered_, __LINE__) = \
      ::tessera::register_ops({__VA_ARGS__})
