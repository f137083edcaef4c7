// Views, shape-combining and indexing ops, creation and random sampling. Methods that torch
// spells with varargs (t.view(2, 3), t.permute(1, 0)) accept both varargs and one sequence.
#include "bind.h"

namespace tessera::python {

namespace {

// Binds tessera.<name>(input, shape) and Tensor.<name>(*shape) for a (Tensor, Shape) op.
void def_shape_op(py::module_& m, py::class_<Tensor>& cls, const char* name, const char* arg,
                  Tensor (*fn)(const Tensor&, const Shape&)) {
  m.def(
      name, [fn](const Tensor& x, const IntList& s) { return fn(x, s.values); }, py::arg("input"),
      py::arg(arg));
  cls.def(name, [fn, name](const Tensor& x, const py::args& s) {
    return fn(x, shape_from_args(s, name));
  });
}

void bind_views(py::module_& m, py::class_<Tensor>& cls) {
  def_shape_op(m, cls, "view", "shape", &tessera::view);
  def_shape_op(m, cls, "reshape", "shape", &tessera::reshape);
  def_shape_op(m, cls, "permute", "dims", &tessera::permute);
  def_shape_op(m, cls, "expand", "size", &tessera::expand);
  def_shape_op(m, cls, "repeat", "repeats", &tessera::repeat);
  def_shape_op(m, cls, "flip", "dims", &tessera::flip);
  cls.def("view_as", [](const Tensor& x, const Tensor& o) { return view(x, o.sizes()); })
      .def("reshape_as", [](const Tensor& x, const Tensor& o) { return reshape(x, o.sizes()); })
      .def("expand_as", [](const Tensor& x, const Tensor& o) { return expand(x, o.sizes()); });
  def_op(m, cls, "transpose", &tessera::transpose, py::arg("dim0"), py::arg("dim1"));
  def_op(m, cls, "swapaxes", &tessera::transpose, py::arg("axis0"), py::arg("axis1"));
  def_op(m, cls, "t", [](const Tensor& x) { return x.t(); });
  def_op(m, cls, "narrow", &tessera::narrow, py::arg("dim"), py::arg("start"), py::arg("length"));
  def_op(m, cls, "slice", &tessera::slice, py::arg("dim") = 0, py::arg("start") = py::none(),
         py::arg("end") = py::none(), py::arg("step") = 1);
  def_op(m, cls, "select", &tessera::select, py::arg("dim"), py::arg("index"));
  def_op(m, cls, "squeeze", &tessera::squeeze, py::arg("dim") = py::none());
  def_op(m, cls, "unsqueeze", &tessera::unsqueeze, py::arg("dim"));
  def_op(m, cls, "flatten", &tessera::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1);
  def_op(
      m, cls, "unflatten",
      [](const Tensor& x, int64_t dim, const IntList& sizes) {
        return unflatten(x, dim, sizes.values);
      },
      py::arg("dim"), py::arg("sizes"));
  def_op(
      m, cls, "as_strided",
      [](const Tensor& x, const IntList& size, const IntList& stride, std::optional<int64_t> off) {
        return as_strided(x, size.values, stride.values, off);
      },
      py::arg("size"), py::arg("stride"), py::arg("storage_offset") = py::none());
  def_op(m, cls, "tril", &tessera::tril, py::arg("diagonal") = 0);
  def_op(m, cls, "triu", &tessera::triu, py::arg("diagonal") = 0);
  def_op(
      m, cls, "roll",
      [](const Tensor& x, const IntList& shifts, std::optional<IntList> dims) {
        if (dims) return roll(x, shifts.values, dims->values);
        // torch: without dims the flattened tensor is rolled.
        return reshape(roll(flatten(x), shifts.values, {0}), x.sizes());
      },
      py::arg("shifts"), py::arg("dims") = py::none());
  for (const char* name : {"cat", "concat"})
    def_function(m, name, &tessera::cat, py::arg("tensors"), py::arg("dim") = 0);
  def_function(m, "stack", &tessera::stack, py::arg("tensors"), py::arg("dim") = 0);
  def_op(
      m, cls, "split",
      [](const Tensor& x, py::handle sizes, int64_t dim) {
        // An int is the size of every piece; a sequence lists the pieces' sizes.
        TensorList parts = PyLong_Check(sizes.ptr()) ? split(x, sizes.cast<int64_t>(), dim)
                                                     : split(x, sizes.cast<IntList>().values, dim);
        return py::tuple(py::cast(parts));
      },
      py::arg("split_size_or_sections"), py::arg("dim") = 0);
  def_op(
      m, cls, "chunk",
      [](const Tensor& x, int64_t chunks, int64_t dim) {
        return py::tuple(py::cast(chunk(x, chunks, dim)));
      },
      py::arg("chunks"), py::arg("dim") = 0);
}

void bind_indexing_ops(py::module_& m, py::class_<Tensor>& cls) {
  def_op(m, cls, "index_select", &tessera::index_select, py::arg("dim"), py::arg("index"));
  def_op(m, cls, "gather", &tessera::gather, py::arg("dim"), py::arg("index"));
  def_op(
      m, cls, "scatter",
      [](const Tensor& x, int64_t dim, const Tensor& index, std::optional<Operand> src,
         std::optional<Scalar> value) {
        TESSERA_CHECK(src.has_value() != value.has_value(), TypeError,
                      "[scatter] expected exactly one of src and value");
        if (value) return scatter(x, dim, index, *value);
        return src->scalar ? scatter(x, dim, index, *src->scalar)
                           : scatter(x, dim, index, src->tensor);
      },
      py::arg("dim"), py::arg("index"), py::arg("src") = py::none(), py::kw_only(),
      py::arg("value") = py::none());
  def_op(m, cls, "scatter_add", &tessera::scatter_add, py::arg("dim"), py::arg("index"),
         py::arg("src"));
  def_op(m, cls, "index_add", &tessera::index_add, py::arg("dim"), py::arg("index"),
         py::arg("source"), py::kw_only(), py::arg("alpha") = 1);
  // A 0-d tensor fill value is read as its number, as torch.
  auto fill_value = [](const Operand& v) { return v.scalar ? *v.scalar : v.tensor.item(); };
  def_op(
      m, cls, "masked_fill",
      [fill_value](const Tensor& x, const Tensor& mask, const Operand& v) {
        return masked_fill(x, mask, fill_value(v));
      },
      py::arg("mask"), py::arg("value"));
  def_inplace(
      cls, "masked_fill_",
      [fill_value](Tensor& x, const Tensor& mask, const Operand& v) {
        masked_fill_(x, mask, fill_value(v));
      },
      py::arg("mask"), py::arg("value"));
  def_op(m, cls, "masked_select", &tessera::masked_select, py::arg("mask"));
  def_op(m, cls, "take_along_dim", &tessera::take_along_dim, py::arg("indices"),
         py::arg("dim") = py::none());
  m.def("one_hot", &tessera::one_hot, py::arg("tensor"), py::arg("num_classes") = -1);
}

// Removes `generator` from creation kwargs (it is not a TensorOptions field).
Generator* take_generator(py::kwargs& kwargs) {
  if (!kwargs.contains("generator")) return nullptr;
  py::object g = kwargs["generator"];
  PyDict_DelItemString(kwargs.ptr(), "generator");
  return g.is_none() ? nullptr : g.cast<Generator*>();
}

void bind_creation(py::module_& m) {
  using Fill = Tensor (*)(const Shape&, TensorOptions);
  const std::pair<const char*, Fill> fills[] = {
      {"zeros", &tessera::zeros}, {"ones", &tessera::ones}, {"empty", &tessera::empty}};
  for (const auto& [name, fn] : fills) {
    Fill f = fn;
    const char* op = name;
    m.def(name, [f, op](const py::args& size, const py::kwargs& kw) {
      return f(shape_from_args(size, op), options_from_kwargs(kw, op));
    });
  }
  m.def(
      "full",
      [](const IntList& size, const Scalar& value, const py::kwargs& kw) {
        // torch infers the dtype from the fill value.
        return full(size.values, value, options_from_kwargs(kw, "full", value.default_dtype()));
      },
      py::arg("size"), py::arg("fill_value"));
  m.def(
      "empty_strided",
      [](const IntList& size, const IntList& stride, const py::kwargs& kw) {
        return empty_strided(size.values, stride.values, options_from_kwargs(kw, "empty_strided"));
      },
      py::arg("size"), py::arg("stride"));
  m.def(
      "scalar_tensor",
      [](const Scalar& s, const py::kwargs& kw) {
        return scalar_tensor(s, options_from_kwargs(kw, "scalar_tensor"));
      },
      py::arg("s"));
  // *_like: the input's dtype and device unless given.
  using Like = Tensor (*)(const Tensor&, std::optional<DType>);
  const std::pair<const char*, Like> likes[] = {{"zeros_like", &tessera::zeros_like},
                                                {"ones_like", &tessera::ones_like},
                                                {"empty_like", &tessera::empty_like},
                                                {"rand_like", &tessera::rand_like},
                                                {"randn_like", &tessera::randn_like}};
  for (const auto& [name, fn] : likes) {
    Like f = fn;
    const char* op = name;
    m.def(
        name,
        [f, op](const Tensor& x, const py::kwargs& kw) {
          TensorOptions o = options_from_kwargs(kw, op, x.dtype(), x.device());
          Tensor out = f(x, o.dtype).to(o.device);
          return o.requires_grad ? out.requires_grad_(true) : out;
        },
        py::arg("input"));
  }
  m.def(
      "full_like",
      [](const Tensor& x, const Scalar& value, const py::kwargs& kw) {
        TensorOptions o = options_from_kwargs(kw, "full_like", x.dtype(), x.device());
        Tensor out = full_like(x, value, o.dtype).to(o.device);
        return o.requires_grad ? out.requires_grad_(true) : out;
      },
      py::arg("input"), py::arg("fill_value"));
  m.def(
      "arange",
      [](const Scalar& start, std::optional<Scalar> end, const Scalar& step, const py::kwargs& kw) {
        std::optional<DType> dtype;
        if (kw.contains("dtype") && !kw["dtype"].is_none()) dtype = to_dtype(kw["dtype"]);
        Tensor t = end ? arange(start, *end, step, dtype) : arange(start, dtype);
        TensorOptions o = options_from_kwargs(kw, "arange", t.dtype());
        t = t.to(o.device);
        return o.requires_grad ? t.requires_grad_(true) : t;
      },
      py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1);
  m.def(
      "linspace",
      [](double start, double end, int64_t steps, const py::kwargs& kw) {
        return linspace(start, end, steps, options_from_kwargs(kw, "linspace"));
      },
      py::arg("start"), py::arg("end"), py::arg("steps"));
  m.def(
      "eye",
      [](int64_t n, std::optional<int64_t> cols, const py::kwargs& kw) {
        return eye(n, cols, options_from_kwargs(kw, "eye"));
      },
      py::arg("n"), py::arg("m") = py::none());
}

void bind_random(py::module_& m, py::class_<Tensor>& cls) {
  py::class_<Generator>(m, "Generator", "A Philox random stream: tessera.Generator(seed).")
      .def(py::init<uint64_t>(), py::arg("seed") = 67280421310721ull)
      .def(
          "manual_seed",
          [](py::object self, uint64_t seed) {
            self.cast<Generator&>().manual_seed(seed);
            return self;
          },
          py::arg("seed"))
      .def("initial_seed", &Generator::seed)
      .def("get_state", &Generator::get_state)
      .def("set_state", &Generator::set_state, py::arg("state"));
  m.def("default_generator", &default_generator, py::return_value_policy::reference);
  using Draw = Tensor (*)(const Shape&, TensorOptions, Generator*);
  const std::pair<const char*, Draw> draws[] = {{"rand", &tessera::rand},
                                                {"randn", &tessera::randn}};
  for (const auto& [name, fn] : draws) {
    Draw f = fn;
    const char* op = name;
    m.def(name, [f, op](const py::args& size, py::kwargs kw) {
      Generator* g = take_generator(kw);
      return f(shape_from_args(size, op), options_from_kwargs(kw, op), g);
    });
  }
  m.def("randint", [](const py::args& args, py::kwargs kw) {
    // randint(high, size) or randint(low, high, size), as torch.
    TESSERA_CHECK(args.size() == 2 || args.size() == 3, TypeError,
                  "[randint] expected (high, size) or (low, high, size), got ", args.size(),
                  " arguments");
    const int64_t low = args.size() == 3 ? args[0].cast<int64_t>() : 0;
    const int64_t high = args[args.size() - 2].cast<int64_t>();
    Generator* g = take_generator(kw);
    return randint(low, high, args[args.size() - 1].cast<IntList>().values,
                   options_from_kwargs(kw, "randint", kInt64), g);
  });
  m.def(
      "randperm",
      [](int64_t n, py::kwargs kw) {
        Generator* g = take_generator(kw);
        TensorOptions o = options_from_kwargs(kw, "randperm", kInt64);
        return randperm(n, g).to(o.dtype);
      },
      py::arg("n"));
  def_op(
      m, cls, "bernoulli",
      [](const Tensor& x, std::optional<double> p, Generator* g) {
        return p ? bernoulli(x, *p, g) : bernoulli(x, g);
      },
      py::arg("p") = py::none(), py::kw_only(), py::arg("generator") = py::none());
  def_op(
      m, cls, "multinomial",
      [](const Tensor& x, int64_t num_samples, bool replacement, Generator* g) {
        return multinomial(x, num_samples, replacement, g);
      },
      py::arg("num_samples"), py::arg("replacement") = false, py::kw_only(),
      py::arg("generator") = py::none());
  def_inplace(
      cls, "normal_",
      [](Tensor& t, double mean, double stdev, Generator* g) { normal_(t, mean, stdev, g); },
      py::arg("mean") = 0.0, py::arg("std") = 1.0, py::kw_only(),
      py::arg("generator") = py::none());
  def_inplace(
      cls, "uniform_",
      [](Tensor& t, double lo, double hi, Generator* g) { uniform_(t, lo, hi, g); },
      py::arg("from") = 0.0, py::arg("to") = 1.0, py::kw_only(), py::arg("generator") = py::none());
}

}  // namespace

void init_ops_shape(py::module_& m) {
  auto cls = tensor_class(m);
  bind_views(m, cls);
  bind_indexing_ops(m, cls);
  bind_creation(m);
  bind_random(m, cls);
}

}  // namespace tessera::python
