#pragma once
// The registry of public ops: name, family, accepted dtypes, whether it is differentiable and how
// autocast treats its inputs. Each op's source file registers its entries next to the
// implementation; docs/ops.md, the test-coverage checks and OpScope's look-ups use it.
#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/core/dispatcher.h"

namespace tessera {

// What autocast does to an op's floating inputs (PyTorch's autocast op lists).
enum class CastPolicy : uint8_t {
  kNone,            // run in the inputs' dtypes
  kLowerPrecision,  // cast float32 inputs to the autocast dtype (matmul, linear, sdpa, ...)
  kFloat32,         // cast lower-precision inputs to float32 (norms, softmax, losses, sums)
  // As kFloat32, except that a lone 16-bit floating input (the other inputs integer or absent)
  // is not copied: the op's kernel widens it as it reads and the op returns float32, the same
  // values a float32 copy would give (cross_entropy: no float32 copy of [N, vocab] logits, and
  // its gradient is rounded once, straight into the input's dtype).
  kFloat32Widening,
  kPromote,         // cast floating inputs to the widest floating dtype among them
};

struct OpInfo {
  std::string_view name;
  std::string_view family;  // elementwise, reduction, linalg, shape, indexing, nn, creation, ...
  uint32_t dtypes;          // bit set of DType (see core/dtype_dispatch.h)
  bool differentiable;
  CastPolicy cast = CastPolicy::kNone;
};

const std::vector<OpInfo>& op_registry();
bool register_ops(std::initializer_list<OpInfo> ops);
// The registered op called name; InternalError when there is none (a public op must register).
const OpInfo& find_op(std::string_view name);

}  // namespace tessera

#define TESSERA_REGISTER_OPS(...)                                                          \
  [[maybe_unused]] static const bool TESSERA_KERNEL_CONCAT(tessera_ops_registered_, __LINE__) = \
      ::tessera::register_ops({__VA_ARGS__})
