#include "testing/reference.h"


namespace tessera::testing {

std::vector<double> values(const Tensor& t) {
  autograd::NoGradGuard ng;
  Tensor c = t.detach().to(kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

Tensor from_values(const std::vector<double>& vals, const Shape& shape, DType dtype) {
  autograd::NoGradGuard ng;
  return tensor(vals, shape).to(dtype);
}

Tensor map1(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> v = values(x);
  for (double& e : v) e = f(e);
  return from_values(v, x.sizes(), is_floating(x.dtype()) ? x.dtype() : kFloat32);
}

Tensor map2(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), "map2");
  std::vector<double> va = values(a.detach().expand(shape)), vb = values(b.detach().expand(shape));
  for (size_t i = 0; i < va.size(); ++i) va[i] = f(va[i], vb[i]);
  return from_values(va, shape, result_type(a, b));
}

Shape unravel(int64_t i, const Shape& shape) {
  Shape c(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    c[d] = i % shape[d];
    i /= shape[d];
  }
  return c;
}

int64_t ravel(const Shape& coords, const Shape& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + coords[d];
  return i;
}

Tensor build(const Shape& shape, DType dtype, const std::function<double(const Shape&)>& f) {
  std::vector<double> out(shape_numel(shape));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) out[i] = f(unravel(i, shape));
  return from_values(out, shape, dtype);
}

}  // namespace tessera::testing
