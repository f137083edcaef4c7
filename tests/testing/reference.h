#pragma once
// Second formulations for reference checks: scalar loops in double over contiguous copies.
#include <functional>

#include "tessera/tessera.h"

namespace tessera::testing {

// f applied to every element (computed in double, returned in x's dtype).
Tensor map1(const Tensor& x, const std::function<double(double)>& f);
// f applied to broadcast pairs (result in the promoted dtype of a and b).
Tensor map2(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f);
// The values of t as doubles, row-major.
std::vector<double> values(const Tensor& t);
// A tensor of shape and dtype holding vals.
Tensor from_values(const std::vector<double>& vals, const Shape& shape, DType dtype);

// Row-major coordinates of linear index i in shape, and back.
Shape unravel(int64_t i, const Shape& shape);
int64_t ravel(const Shape& coords, const Shape& shape);
// Tensor of shape whose element at coordinates c is f(c).
Tensor build(const Shape& shape, DType dtype, const std::function<double(const Shape&)>& f);

}  // namespace tessera::testing
