#pragma once
// numpy broadcasting of shapes, shared by the op layer and the backends' iterator.
#include <string_view>

#include "tessera/core/tensor_impl.h"

namespace tessera {

// Broadcast of two shapes (numpy rules); throws ValueError naming op when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op = "broadcast_shapes");

}  // namespace tessera
