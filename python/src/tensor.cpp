// tessera.Tensor: metadata, Python protocols (operators, bool/len/iter/format), conversions and
// the autograd-facing attributes. Op methods are added by the ops_*.cpp files.
#include <cstring>

#include "bind.h"

namespace tessera::python {

py::class_<Tensor> tensor_class(py::module_& m) {
  return py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
}

namespace {

// Nested Python lists of the values of a contiguous cpu tensor (a number for 0-d).
py::object to_list(const char* data, DType dtype, const Shape& sizes, size_t dim) {
  if (dim == sizes.size()) {
    return dispatch(dtype, "tolist", [&]<class T>() -> py::object {
      T v;
      std::memcpy(&v, data, sizeof(T));
      if constexpr (std::is_same_v<T, bool>)
        return py::bool_(v);
      else if constexpr (std::is_integral_v<T>)
        return py::int_(static_cast<int64_t>(v));
      else
        return py::float_(static_cast<double>(v));
    });
  }
  int64_t inner = static_cast<int64_t>(itemsize(dtype));
  for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
  py::list out;
  for (int64_t i = 0; i < sizes[dim]; ++i)
    out.append(to_list(data + i * inner, dtype, sizes, dim + 1));
  return out;
}

Tensor on_cpu(const Tensor& t, const char* op) {
  autograd::NoGradGuard ng;
  TESSERA_CHECK(t.defined(), RuntimeError, "[", op, "] expected a defined tensor");
  return t.detach().to(kCPU).contiguous();
}

// Tensor.to(...) arguments: dtypes, devices, strings and tensors in any order, as torch.
Tensor convert(const Tensor& t, const py::args& args, const py::kwargs& kwargs) {
  std::optional<DType> dtype;
  std::optional<Device> device;
  bool non_blocking = false;
  auto take = [&](py::handle a) {
    if (py::isinstance<Tensor>(a)) {
      const Tensor& other = a.cast<const Tensor&>();
      dtype = other.dtype();
      device = other.device();
    } else if (py::isinstance<DType>(a)) {
      dtype = a.cast<DType>();
    } else if (py::isinstance<Device>(a) || PyLong_Check(a.ptr())) {
      device = to_device(a);
    } else if (py::isinstance<py::str>(a)) {
      std::string s = a.cast<std::string>();
      if (s.rfind("cpu", 0) == 0 || s.rfind("cuda", 0) == 0)
        device = Device(s);
      else
        dtype = dtype_from_string(s);
    } else {
      dtype = to_dtype(a);
    }
  };
  for (py::handle a : args) take(a);
  for (auto [key, value] : kwargs) {
    std::string k = py::str(key);
    if (value.is_none() || k == "copy") continue;
    if (k == "non_blocking")
      non_blocking = value.cast<bool>();
    else if (k == "dtype")
      dtype = to_dtype(value);
    else if (k == "device")
      device = to_device(value);
    else
      throw TypeError(detail::str("[to] got an unexpected keyword argument '", k, "'"));
  }
  Tensor out = t;
  if (device && *device != out.device()) out = out.to(*device, non_blocking);
  if (dtype && *dtype != out.dtype()) out = out.to(*dtype);
  return out;
}

void bind_protocols(py::class_<Tensor>& cls) {
  cls.def("__repr__", &Tensor::str)
      .def("__str__", &Tensor::str)
      .def("__format__",
           [](const Tensor& t, const std::string& spec) -> py::object {
             // f"{loss:.4f}" formats the number of a one-element tensor, as torch.
             if (t.numel() == 1 && t.dim() == 0)
               return py::module_::import("builtins")
                   .attr("format")(py::cast(on_cpu(t, "format").item()), spec);
             return py::str(t.str());
           })
      .def("__bool__",
           [](const Tensor& t) {
             TESSERA_CHECK(t.numel() == 1, RuntimeError,
                           "[bool] expected a tensor with one element, got shape ", t.sizes(),
                           " (the truth value of several values is ambiguous)");
             return on_cpu(t, "bool").item<bool>();
           })
      .def("__len__",
           [](const Tensor& t) {
             TESSERA_CHECK(t.dim() > 0, TypeError,
                           "[len] expected a tensor with dims, got a 0-d tensor");
             return t.size(0);
           })
      .def("__iter__",
           [](const Tensor& t) {
             TESSERA_CHECK(t.dim() > 0, TypeError,
                           "[iter] expected a tensor with dims, got a 0-d tensor");
             py::list rows;
             for (int64_t i = 0; i < t.size(0); ++i) rows.append(t.select(0, i));
             return py::iter(rows);
           })
      .def("__float__", [](const Tensor& t) { return on_cpu(t, "float").item<double>(); })
      .def("__int__", [](const Tensor& t) { return on_cpu(t, "int").item<int64_t>(); })
      .def("__index__",
           [](const Tensor& t) {
             TESSERA_CHECK(is_integral(t.dtype(), true) && t.numel() == 1, TypeError,
                           "[index] expected a one-element integer tensor, got ", t.dtype(),
                           " of shape ", t.sizes());
             return on_cpu(t, "index").item<int64_t>();
           })
      // Identity hashing (as torch): == builds a tensor, so it cannot define equality for sets.
      .def("__hash__", [](py::handle self) { return reinterpret_cast<intptr_t>(self.ptr()); })
      .def("item", [](const Tensor& t) { return on_cpu(t, "item").item(); })
      .def("tolist", [](const Tensor& t) {
        Tensor c = on_cpu(t, "tolist");
        return to_list(static_cast<const char*>(c.data_ptr()), c.dtype(), c.sizes(), 0);
      });
}

void bind_operators(py::class_<Tensor>& cls) {
  using Bin = Tensor (*)(const Tensor&, const Tensor&);
  struct Op {
    const char* name;
    const char* reflected;
    Bin fn;
  };
  const Op ops[] = {
      {"__add__", "__radd__", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"__sub__", "__rsub__", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"__mul__", "__rmul__", &tessera::mul},
      {"__truediv__", "__rtruediv__", &tessera::div},
      {"__matmul__", "__rmatmul__", &tessera::matmul},
      {"__and__", "__rand__", &tessera::bitwise_and},
      {"__or__", "__ror__", &tessera::bitwise_or},
      {"__xor__", "__rxor__", &tessera::bitwise_xor},
      {"__eq__", nullptr, &tessera::eq},
      {"__ne__", nullptr, &tessera::ne},
      {"__lt__", nullptr, &tessera::lt},
      {"__le__", nullptr, &tessera::le},
      {"__gt__", nullptr, &tessera::gt},
      {"__ge__", nullptr, &tessera::ge},
  };
  // is_operator: an unsupported right operand gives NotImplemented (so t == None is False).
  for (const Op& op : ops) {
    Bin fn = op.fn;
    cls.def(
        op.name, [fn](const Tensor& a, const Operand& b) { return fn(a, b.on(a)); },
        py::is_operator());
    if (op.reflected)
      cls.def(
          op.reflected, [fn](const Tensor& a, const Operand& b) { return fn(b.on(a), a); },
          py::is_operator());
  }
  // A number exponent goes to pow(Tensor, Scalar), which refuses integers to negative powers.
  cls.def(
         "__pow__",
         [](const Tensor& a, const Operand& b) {
           return b.scalar ? pow(a, *b.scalar) : pow(a, b.tensor);
         },
         py::is_operator())
      .def(
          "__rpow__", [](const Tensor& a, const Operand& b) { return pow(b.on(a), a); },
          py::is_operator());
  using Inplace = Tensor& (*)(Tensor&, const Tensor&);
  const std::pair<const char*, Inplace> inplace[] = {
      {"__iadd__", [](Tensor& a, const Tensor& b) -> Tensor& { return add_(a, b); }},
      {"__isub__", [](Tensor& a, const Tensor& b) -> Tensor& { return sub_(a, b); }},
      {"__imul__", &tessera::mul_},
      {"__itruediv__", &tessera::div_}};
  for (const auto& [name, fn] : inplace) {
    cls.def(
        name,
        [fn](py::object self, const Operand& b) {
          Tensor& t = self.cast<Tensor&>();
          fn(t, b.on(t));
          return self;
        },
        py::is_operator());
  }
  cls.def("__neg__", [](const Tensor& t) { return neg(t); })
      .def("__pos__", [](py::object self) { return self; })
      .def("__abs__", [](const Tensor& t) { return abs(t); })
      .def("__invert__", [](const Tensor& t) { return bitwise_not(t); });
}

void bind_metadata(py::class_<Tensor>& cls) {
  cls.def_property_readonly("shape", [](const Tensor& t) { return size_object(t.sizes()); })
      .def(
          "size",
          [](const Tensor& t, std::optional<int64_t> dim) -> py::object {
            if (dim) return py::int_(t.size(*dim));
            return size_object(t.sizes());
          },
          py::arg("dim") = py::none())
      .def(
          "stride",
          [](const Tensor& t, std::optional<int64_t> dim) -> py::object {
            if (dim) return py::int_(t.stride(*dim));
            return py::tuple(py::cast(t.strides()));
          },
          py::arg("dim") = py::none())
      .def("dim", &Tensor::dim)
      .def("ndimension", &Tensor::dim)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("nelement", &Tensor::numel)
      .def_property_readonly("dtype", [](const Tensor& t) { return dtype_object(t.dtype()); })
      .def_property_readonly("device", &Tensor::device)
      .def_property_readonly("is_cuda", [](const Tensor& t) { return t.device().is_cuda(); })
      .def_property_readonly("is_cpu", [](const Tensor& t) { return t.device().is_cpu(); })
      .def("element_size", &Tensor::element_size)
      .def("storage_offset", &Tensor::storage_offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", &Tensor::is_floating_point)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); })
      .def_property_readonly("T",
                             [](const Tensor& t) {
                               Shape dims(t.dim());
                               for (int64_t i = 0; i < t.dim(); ++i) dims[i] = t.dim() - 1 - i;
                               return t.permute(dims);
                             })
      .def_property_readonly("mT", &Tensor::mT)
      .def_property_readonly("_version", &Tensor::version);
}

void bind_conversions(py::class_<Tensor>& cls) {
  cls.def("to", &convert, "to(dtype), to(device), to(device, dtype), to(other)")
      .def("type_as", [](const Tensor& t, const Tensor& o) { return t.to(o.dtype()); })
      .def("cpu", [](const Tensor& t) { return t.to(kCPU); })
      .def(
          "cuda",
          [](const Tensor& t, int index, bool non_blocking) {
            return t.to(Device(DeviceType::CUDA, index), non_blocking);
          },
          py::arg("device") = 0, py::arg("non_blocking") = false)
      .def("pin_memory", &Tensor::pin_memory)
      .def("is_pinned", &Tensor::is_pinned);
  const std::pair<const char*, DType> casts[] = {
      {"float", kFloat32}, {"double", kFloat64}, {"half", kFloat16}, {"bfloat16", kBFloat16},
      {"long", kInt64},    {"int", kInt32},      {"short", kInt16},  {"char", kInt8},
      {"byte", kUInt8},    {"bool", kBool}};
  for (const auto& [name, dtype] : casts) {
    DType d = dtype;
    cls.def(name, [d](const Tensor& t) { return t.to(d); });
  }
  // new_*: creation with self's dtype and device unless given.
  auto like = [](const Tensor& t, const py::kwargs& kw, const char* op) {
    return options_from_kwargs(kw, op, t.dtype(), t.device());
  };
  cls.def("new_zeros",
          [like](const Tensor& t, const py::args& size, const py::kwargs& kw) {
            return zeros(shape_from_args(size, "new_zeros"), like(t, kw, "new_zeros"));
          })
      .def("new_ones",
           [like](const Tensor& t, const py::args& size, const py::kwargs& kw) {
             return ones(shape_from_args(size, "new_ones"), like(t, kw, "new_ones"));
           })
      .def("new_empty",
           [like](const Tensor& t, const py::args& size, const py::kwargs& kw) {
             return empty(shape_from_args(size, "new_empty"), like(t, kw, "new_empty"));
           })
      .def(
          "new_full",
          [like](const Tensor& t, const IntList& size, const Scalar& value, const py::kwargs& kw) {
            return full(size.values, value, like(t, kw, "new_full"));
          },
          py::arg("size"), py::arg("fill_value"))
      .def("new_tensor", [](const Tensor& t, py::handle data, const py::kwargs& kw) {
        TensorOptions o = options_from_kwargs(kw, "new_tensor", t.dtype(), t.device());
        Tensor out = to_tensor(data, o.dtype).clone().to(o.device);
        if (o.requires_grad) out.requires_grad_(true);
        return out;
      });
}

// A Python hook's callable, shared by the C++ hook and the handle register_hook returns: remove()
// drops it and the hook does nothing from then on. Read and reset under the GIL; released with
// it (gil_safe), wherever the graph holding the hook is freed.
using HookSlot = std::shared_ptr<std::shared_ptr<py::object>>;

struct TensorHookHandle {
  HookSlot slot;
  void remove() { slot->reset(); }
};

HookSlot hook_slot(py::function fn) {
  return std::make_shared<std::shared_ptr<py::object>>(gil_safe(std::move(fn)));
}

// A Python gradient hook: fn(grad) may return a replacement tensor or None.
TensorHook python_hook(HookSlot slot) {
  return [slot = std::move(slot)](const Tensor& g) -> Tensor {
    py::gil_scoped_acquire gil;
    const std::shared_ptr<py::object> fn = *slot;
    if (!fn) return Tensor();
    py::object r = (*fn)(g);
    return r.is_none() ? Tensor() : r.cast<Tensor>();
  };
}

void bind_autograd(py::class_<Tensor>& cls) {
  cls.def_property("requires_grad", &Tensor::requires_grad,
                   [](Tensor& t, bool on) { t.requires_grad_(on); })
      .def(
          "requires_grad_",
          [](py::object self, bool on) {
            self.cast<Tensor&>().requires_grad_(on);
            return self;
          },
          py::arg("requires_grad") = true)
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property(
          "grad", [](const Tensor& t) { return tensor_or_none(t.grad()); },
          [](const Tensor& t, std::optional<Tensor> g) { t.set_grad(g.value_or(Tensor())); })
      .def_property_readonly("grad_fn",
                             [](const Tensor& t) -> py::object {
                               if (!t.grad_fn()) return py::none();
                               return py::cast(t.grad_fn());
                             })
      .def_property(
          "data", [](const Tensor& t) { return t.variable_data(); },
          [](const Tensor& t, const Tensor& src) {
            // x.data = y re-points x at y's values and keeps x's autograd identity, as torch.
            t.impl()->set_data(src.impl()->storage(), src.sizes(), src.strides(),
                               src.storage_offset(), src.dtype());
          })
      .def(
          "backward",
          [](const Tensor& t, std::optional<Tensor> gradient, std::optional<bool> retain_graph,
             bool create_graph) {
            t.backward(gradient.value_or(Tensor()), retain_graph.value_or(create_graph),
                       create_graph);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = py::none(),
          py::arg("create_graph") = false)
      .def("detach", &Tensor::detach)
      .def("detach_",
           [](py::object self) {
             self.cast<Tensor&>().detach_();
             return self;
           })
      .def("retain_grad", &Tensor::retain_grad)
      .def_property_readonly("retains_grad", &Tensor::retains_grad)
      .def(
          "register_hook",
          [](const Tensor& t, py::function fn) {
            TensorHookHandle handle{hook_slot(std::move(fn))};
            t.register_hook(python_hook(handle.slot));
            return handle;
          },
          py::arg("hook"),
          "hook(grad) -> Tensor or None runs when the gradient is computed; returns a handle "
          "whose remove() unregisters it.")
      .def(
          "register_post_accumulate_grad_hook",
          [](const Tensor& t, py::function fn) {
            TensorHookHandle handle{hook_slot(std::move(fn))};
            t.register_post_accumulate_grad_hook([slot = handle.slot](const Tensor& leaf) {
              py::gil_scoped_acquire gil;
              if (const std::shared_ptr<py::object> fn = *slot) (*fn)(leaf);
            });
            return handle;
          },
          py::arg("hook"));
}

}  // namespace

void init_tensor(py::module_& m) {
  py::class_<Tensor> cls(m, "Tensor",
                         "A strided view of typed memory with autograd (torch.Tensor's "
                         "counterpart). Create tensors with tessera.tensor, zeros, from_numpy...");
  cls.def(py::init([](py::handle data) { return to_tensor(data); }), py::arg("data"));
  // As torch's: numpy defers `array * tensor` to Tensor.__rmul__ instead of converting the
  // tensor through __array__ and returning an ndarray detached from the graph.
  cls.attr("__array_priority__") = 1000;
  bind_protocols(cls);
  bind_operators(cls);
  bind_metadata(cls);
  bind_conversions(cls);
  py::class_<TensorHookHandle>(m, "TensorHookHandle",
                               "What Tensor.register_hook returns: remove() unregisters the hook.")
      .def("remove", &TensorHookHandle::remove)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](TensorHookHandle& h, py::args) { h.remove(); });
  bind_autograd(cls);
  m.def(
      "is_tensor", [](py::handle h) { return py::isinstance<Tensor>(h); }, py::arg("obj"));
}

}  // namespace tessera::python
