// Elementwise, comparison, in-place, reduction and matrix ops, each bound as tessera.<op> and as
// a Tensor method with torch's argument names (dim, keepdim, alpha, ...).
#include "bind.h"

namespace tessera::python {

namespace {

using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);

Shape dims_or_all(const std::optional<IntList>& dim) { return dim ? dim->values : Shape{}; }

void bind_elementwise(py::module_& m, py::class_<Tensor>& cls) {
  const std::pair<const char*, Unary> unary[] = {{"neg", &tessera::neg},
                                                 {"negative", &tessera::neg},
                                                 {"abs", &tessera::abs},
                                                 {"sign", &tessera::sign},
                                                 {"square", &tessera::square},
                                                 {"exp", &tessera::exp},
                                                 {"log", &tessera::log},
                                                 {"log1p", &tessera::log1p},
                                                 {"sqrt", &tessera::sqrt},
                                                 {"rsqrt", &tessera::rsqrt},
                                                 {"reciprocal", &tessera::reciprocal},
                                                 {"sin", &tessera::sin},
                                                 {"cos", &tessera::cos},
                                                 {"tanh", &tessera::tanh},
                                                 {"sigmoid", &tessera::sigmoid},
                                                 {"relu", &tessera::relu},
                                                 {"silu", &tessera::silu},
                                                 {"erf", &tessera::erf},
                                                 {"logical_not", &tessera::logical_not},
                                                 {"isnan", &tessera::isnan},
                                                 {"isinf", &tessera::isinf},
                                                 {"isfinite", &tessera::isfinite},
                                                 {"bitwise_not", &tessera::bitwise_not},
                                                 {"clone", &tessera::clone},
                                                 {"contiguous", &tessera::contiguous}};
  for (const auto& [name, fn] : unary) def_op(m, cls, name, fn);

  // Binary ops take a tensor or a Python number on either side.
  const std::pair<const char*, Binary> binary[] = {{"mul", &tessera::mul},
                                                   {"multiply", &tessera::mul},
                                                   {"div", &tessera::div},
                                                   {"divide", &tessera::div},
                                                   {"true_divide", &tessera::div},
                                                   {"maximum", &tessera::maximum},
                                                   {"minimum", &tessera::minimum},
                                                   {"eq", &tessera::eq},
                                                   {"ne", &tessera::ne},
                                                   {"lt", &tessera::lt},
                                                   {"le", &tessera::le},
                                                   {"gt", &tessera::gt},
                                                   {"ge", &tessera::ge},
                                                   {"logical_and", &tessera::logical_and},
                                                   {"logical_or", &tessera::logical_or},
                                                   {"logical_xor", &tessera::logical_xor},
                                                   {"bitwise_and", &tessera::bitwise_and},
                                                   {"bitwise_or", &tessera::bitwise_or},
                                                   {"bitwise_xor", &tessera::bitwise_xor}};
  for (const auto& [name, fn] : binary) {
    const char* op = name;
    Binary f = fn;
    def_op(
        m, cls, name,
        [f, op](const Operand& a, const Operand& b) {
          auto [x, y] = operands(a, b, op);
          return f(x, y);
        },
        py::arg("other"));
  }
  def_op(
      m, cls, "add",
      [](const Operand& a, const Operand& b, const Scalar& alpha) {
        auto [x, y] = operands(a, b, "add");
        return add(x, y, alpha);
      },
      py::arg("other"), py::kw_only(), py::arg("alpha") = 1);
  def_op(
      m, cls, "sub",
      [](const Operand& a, const Operand& b, const Scalar& alpha) {
        auto [x, y] = operands(a, b, "sub");
        return sub(x, y, alpha);
      },
      py::arg("other"), py::kw_only(), py::arg("alpha") = 1);
  def_op(
      m, cls, "pow",
      [](const Operand& a, const Operand& b) {
        if (a.tensor.defined() && b.scalar) return pow(a.tensor, *b.scalar);
        auto [x, y] = operands(a, b, "pow");
        return pow(x, y);
      },
      py::arg("exponent"));
  def_op(
      m, cls, "lerp",
      [](const Tensor& a, const Tensor& b, const Operand& w) {
        return w.scalar ? lerp(a, b, *w.scalar) : lerp(a, b, w.tensor);
      },
      py::arg("end"), py::arg("weight"));
  def_function(
      m, "where",
      [](const Tensor& cond, const Operand& a, const Operand& b) {
        auto [x, y] = operands(a, b, "where");
        return where(cond, x, y);
      },
      py::arg("condition"), py::arg("input"), py::arg("other"));
  cls.def(
      "where",
      [](const Tensor& self, const Tensor& cond, const Operand& other) {
        return where(cond, self, other.on(self));
      },
      py::arg("condition"), py::arg("other"));
  def_op(
      m, cls, "gelu", [](const Tensor& x, const std::string& a) { return gelu(x, a); },
      py::arg("approximate") = "none");
  def_op(m, cls, "softplus", &tessera::softplus, py::arg("beta") = 1.0,
         py::arg("threshold") = 20.0);
  for (const char* name : {"clamp", "clip"})
    def_op(m, cls, name, &tessera::clamp, py::arg("min") = py::none(), py::arg("max") = py::none());
  def_op(
      m, cls, "allclose",
      [](const Tensor& a, const Tensor& b, double rtol, double atol) {
        return allclose(a, b, rtol, atol);
      },
      py::arg("other"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8);
  def_op(
      m, cls, "cast", [](const Tensor& x, py::handle dtype) { return cast(x, to_dtype(dtype)); },
      py::arg("dtype"));
}

void bind_inplace(py::class_<Tensor>& cls) {
  def_inplace(
      cls, "add_",
      [](Tensor& t, const Operand& o, const Scalar& alpha) { add_(t, o.on(t), alpha); },
      py::arg("other"), py::kw_only(), py::arg("alpha") = 1);
  def_inplace(
      cls, "sub_",
      [](Tensor& t, const Operand& o, const Scalar& alpha) { sub_(t, o.on(t), alpha); },
      py::arg("other"), py::kw_only(), py::arg("alpha") = 1);
  def_inplace(
      cls, "mul_", [](Tensor& t, const Operand& o) { mul_(t, o.on(t)); }, py::arg("other"));
  def_inplace(
      cls, "div_", [](Tensor& t, const Operand& o) { div_(t, o.on(t)); }, py::arg("other"));
  def_inplace(cls, "zero_", [](Tensor& t) { zero_(t); });
  def_inplace(
      cls, "fill_",
      [](Tensor& t, const Operand& v) {
        if (v.scalar)
          fill_(t, *v.scalar);
        else
          copy_(t, v.tensor);  // torch accepts a 0-d tensor value
      },
      py::arg("value"));
  def_inplace(
      cls, "copy_", [](Tensor& t, const Tensor& src) { copy_(t, src); }, py::arg("src"));
  def_inplace(
      cls, "clamp_",
      [](Tensor& t, std::optional<Scalar> lo, std::optional<Scalar> hi) { clamp_(t, lo, hi); },
      py::arg("min") = py::none(), py::arg("max") = py::none());
}

void bind_reductions(py::module_& m, py::class_<Tensor>& cls) {
  def_op(
      m, cls, "sum",
      [](const Tensor& x, std::optional<IntList> dim, bool keepdim, py::object dtype) {
        std::optional<DType> d;
        if (!dtype.is_none()) d = to_dtype(dtype);
        return sum(x, dims_or_all(dim), keepdim, d);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false, py::kw_only(),
      py::arg("dtype") = py::none());
  using Reduce = Tensor (*)(const Tensor&, const Shape&, bool);
  const std::pair<const char*, Reduce> reduce[] = {
      {"mean", &tessera::mean}, {"prod", &tessera::prod}, {"amax", &tessera::amax},
      {"amin", &tessera::amin}, {"all", &tessera::all},   {"any", &tessera::any}};
  for (const auto& [name, fn] : reduce) {
    Reduce f = fn;
    def_op(
        m, cls, name,
        [f](const Tensor& x, std::optional<IntList> dim, bool keepdim) {
          return f(x, dims_or_all(dim), keepdim);
        },
        py::arg("dim") = py::none(), py::arg("keepdim") = false);
  }
  // max/min: over everything, (values, indices) along dim, or elementwise with a tensor.
  using Extreme = std::tuple<Tensor, Tensor> (*)(const Tensor&, int64_t, bool);
  const std::tuple<const char*, Unary, Extreme, Binary> extremes[] = {
      {"max", &tessera::max, &tessera::max, &tessera::maximum},
      {"min", &tessera::min, &tessera::min, &tessera::minimum}};
  for (const auto& [name, all, along, elementwise] : extremes) {
    Unary a = all;
    Extreme e = along;
    Binary b = elementwise;
    const char* n = name;
    def_op(
        m, cls, name,
        [a, e, b, n](const Tensor& x, py::object dim, bool keepdim) -> py::object {
          if (dim.is_none()) return py::cast(a(x));
          if (py::isinstance<Tensor>(dim)) return py::cast(b(x, dim.cast<Tensor>()));
          auto [values, indices] = e(x, dim.cast<int64_t>(), keepdim);
          return namedtuple(n, "values indices")(values, indices);
        },
        py::arg("dim") = py::none(), py::arg("keepdim") = false);
  }
  for (const auto& [name, fn] :
       {std::pair{"argmax", &tessera::argmax}, std::pair{"argmin", &tessera::argmin}})
    def_op(m, cls, name, fn, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_op(
      m, cls, "sort",
      [](const Tensor& x, int64_t dim, bool descending, bool stable) {
        auto [values, indices] = tessera::sort(x, dim, descending, stable);
        return namedtuple("sort", "values indices")(values, indices);
      },
      py::arg("dim") = -1, py::arg("descending") = false, py::kw_only(), py::arg("stable") = false);
  def_op(m, cls, "argsort", &tessera::argsort, py::arg("dim") = -1, py::arg("descending") = false,
         py::kw_only(), py::arg("stable") = false);
  def_op(
      m, cls, "topk",
      [](const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
        auto [values, indices] = tessera::topk(x, k, dim, largest, sorted);
        return namedtuple("topk", "values indices")(values, indices);
      },
      py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true, py::arg("sorted") = true);
  using Moment = Tensor (*)(const Tensor&, const Shape&, int64_t, bool);
  for (const auto& [name, fn] : {std::pair<const char*, Moment>{"var", &tessera::var},
                                 std::pair<const char*, Moment>{"std", &tessera::std}}) {
    Moment f = fn;
    def_op(
        m, cls, name,
        [f](const Tensor& x, std::optional<IntList> dim, bool unbiased, bool keepdim,
            std::optional<int64_t> correction) {
          return f(x, dims_or_all(dim), correction.value_or(unbiased ? 1 : 0), keepdim);
        },
        py::arg("dim") = py::none(), py::arg("unbiased") = true, py::arg("keepdim") = false,
        py::kw_only(), py::arg("correction") = py::none());
  }
  def_op(
      m, cls, "norm",
      [](const Tensor& x, py::object p, std::optional<IntList> dim, bool keepdim) {
        double order = 2.0;
        if (py::isinstance<py::str>(p)) {
          TESSERA_CHECK(p.cast<std::string>() == "fro", ValueError,
                        "[norm] expected p as a number or 'fro', got '", p.cast<std::string>(),
                        "'");
        } else if (!p.is_none()) {
          order = p.cast<double>();
        }
        return norm(x, order, dims_or_all(dim), keepdim);
      },
      py::arg("p") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  def_op(
      m, cls, "logsumexp",
      [](const Tensor& x, const IntList& dim, bool keepdim) {
        return logsumexp(x, dim.values, keepdim);
      },
      py::arg("dim"), py::arg("keepdim") = false);
  def_op(m, cls, "cumsum", &tessera::cumsum, py::arg("dim"));
  def_op(
      m, cls, "sum_to",
      [](const Tensor& x, const IntList& shape) { return sum_to(x, shape.values); },
      py::arg("shape"));
  cls.def("sum_to_size", [](const Tensor& x, const py::args& size) {
    return sum_to(x, shape_from_args(size, "sum_to_size"));
  });
}

void bind_linalg(py::module_& m, py::class_<Tensor>& cls) {
  def_op(m, cls, "matmul", &tessera::matmul, py::arg("other"));
  def_op(m, cls, "mm", &tessera::mm, py::arg("mat2"));
  def_op(m, cls, "bmm", &tessera::bmm, py::arg("mat2"));
  def_op(m, cls, "outer", &tessera::outer, py::arg("vec2"));
  def_op(m, cls, "addmm", &tessera::addmm, py::arg("mat1"), py::arg("mat2"), py::kw_only(),
         py::arg("beta") = 1, py::arg("alpha") = 1);
  def_op(m, cls, "baddbmm", &tessera::baddbmm, py::arg("batch1"), py::arg("batch2"), py::kw_only(),
         py::arg("beta") = 1, py::arg("alpha") = 1);
}

}  // namespace

void init_ops(py::module_& m) {
  auto cls = tensor_class(m);
  bind_elementwise(m, cls);
  bind_inplace(cls);
  bind_reductions(m, cls);
  bind_linalg(m, cls);
}

}  // namespace tessera::python
