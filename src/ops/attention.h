#pragma once
// What scaled_dot_product_attention (nn_attention.cpp) borrows from the softmax family.
#include <string_view>

#include "tessera/core/tensor.h"

namespace tessera::detail {

// Softmax along the last dim whose all -inf rows give 0 instead of nan (masked attention);
// differentiable, twice included. Defined in nn_softmax.cpp.
Tensor safe_softmax(const Tensor& x, std::string_view op);

}  // namespace tessera::detail
