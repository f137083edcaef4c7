// tessera._C.nn: Module (subclassable from Python, registering Parameters and Modules assigned as
// attributes, like torch), Parameter, the standard layers and containers, and nn.init.
//
// A Python subclass instance is a C++ PyModule (a UnaryModule whose forward calls the Python
// forward), so it can sit inside a C++ Sequential. Python objects assigned as attributes are also
// kept in the instance __dict__: attribute access returns the same object and a child's Python
// half lives as long as its parent.
#include "bind.h"
#include "tessera/nn/init.h"

namespace tessera::python {

namespace {

// tessera.nn.Parameter: a Tensor subclass that Module.__setattr__ registers as a parameter.
struct Parameter : Tensor {
  explicit Parameter(Tensor t) : Tensor(std::move(t)) {}
};

// The Python object of a module (the existing one when Python created it).
py::object module_object(nn::Module& m) { return py::cast(m.shared_from_this()); }

class PyModule : public nn::UnaryModule {
 public:
  Tensor forward(const Tensor& x) override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const nn::Module*>(this), "forward");
    TESSERA_CHECK(f, NotImplementedError, "[", type_name(),
                  "] expected the Module subclass to define forward()");
    return f(x).cast<Tensor>();
  }
  std::string type_name() const override {
    py::gil_scoped_acquire gil;
    py::handle self = py::detail::get_object_handle(static_cast<const nn::Module*>(this),
                                                    py::detail::get_type_info(typeid(nn::Module)));
    return self ? std::string(py::str(py::type::handle_of(self).attr("__name__"))) : "Module";
  }
  std::string extra_repr() const override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const nn::Module*>(this), "extra_repr");
    return f ? f().cast<std::string>() : "";
  }
};

// Registers parameters/modules assigned as attributes (torch's Module.__setattr__).
void module_setattr(py::object self, py::str name, py::object value) {
  const std::string key = name;
  // Before Module.__init__ the C++ object does not exist yet (pybind11 only allocated it).
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  if (!inst->get_value_and_holder().holder_constructed())
    throw py::attribute_error("[Module] cannot assign '" + key +
                              "' before Module.__init__() (call super().__init__() first)");
  nn::Module& m = self.cast<nn::Module&>();
  const bool is_param = m.named_parameters(false).contains(key);
  if (py::isinstance<Tensor>(value) && (is_param || py::isinstance<Parameter>(value))) {
    Tensor t = value.cast<Tensor>();
    if (is_param)
      m.replace_parameter(key, t);  // weight tying, re-initialisation
    else
      m.register_parameter(key, t, t.requires_grad());
  } else if (py::isinstance<Tensor>(value) && m.named_buffers(false).contains(key)) {
    m.replace_buffer(key, value.cast<Tensor>());  // state_dict() and to() follow the new one
  } else if (py::isinstance<nn::Module>(value)) {
    auto child = value.cast<std::shared_ptr<nn::Module>>();
    if (m.named_children().contains(key))
      m.replace_module(key, child);
    else
      m.register_module(key, child);
  }
  if (PyObject_GenericSetAttr(self.ptr(), name.ptr(), value.ptr()) != 0)
    throw py::error_already_set();
}

// Registered entries that were not assigned as attributes (e.g. register_buffer).
py::object module_getattr(nn::Module& m, const std::string& name) {
  if (const Tensor* t = m.named_parameters(false).find(name)) return py::cast(*t);
  if (const Tensor* t = m.named_buffers(false).find(name)) return py::cast(*t);
  if (const auto* child = m.named_children().find(name)) return py::cast(*child);
  throw py::attribute_error("'" + m.type_name() + "' object has no attribute '" + name + "'");
}

py::list named_list(const nn::TensorDict& d) {
  py::list out;
  for (const auto& [k, v] : d) out.append(py::make_tuple(k, v));
  return out;
}

py::object load_state(nn::Module& m, const py::dict& state, bool strict) {
  nn::TensorDict tensors;
  for (auto [k, v] : state) tensors.insert(py::str(k), to_tensor(v));
  nn::LoadStateDictReport r = m.load_state_dict(tensors, strict);
  return namedtuple("IncompatibleKeys", "missing_keys unexpected_keys")(
      py::cast(r.missing_keys), py::cast(r.unexpected_keys));
}

using ModuleClass = py::class_<nn::Module, PyModule, std::shared_ptr<nn::Module>>;

// A Python hook inside a module's C++ hook list. Called from C++ (a module run by a C++
// container) it sees the inputs as a tuple of tensors; Module.__call__ recognises it (target<>())
// and passes the Python arguments and output as they are, as torch does.
struct PyForwardPreHook {
  std::shared_ptr<py::object> fn;
  std::optional<TensorList> operator()(nn::Module& m, const TensorList& inputs) const {
    py::gil_scoped_acquire gil;
    py::object r = (*fn)(module_object(m), py::tuple(py::cast(inputs)));
    if (r.is_none()) return std::nullopt;
    if (py::isinstance<Tensor>(r)) return TensorList{r.cast<Tensor>()};
    return r.cast<TensorList>();
  }
};

struct PyForwardHook {
  std::shared_ptr<py::object> fn;
  std::optional<Tensor> operator()(nn::Module& m, const TensorList& inputs,
                                   const Tensor& output) const {
    py::gil_scoped_acquire gil;
    py::object r = (*fn)(module_object(m), py::tuple(py::cast(inputs)), output);
    if (r.is_none()) return std::nullopt;
    return r.cast<Tensor>();
  }
};

// The positional arguments as tensors, for a hook registered from C++.
TensorList tensor_args(const py::tuple& args, const nn::Module& m) {
  TensorList out;
  for (py::handle a : args) {
    TESSERA_CHECK(py::isinstance<Tensor>(a), TypeError, "[", m.type_name(),
                  "] a C++ forward hook expects tensor arguments, got ",
                  std::string(py::str(py::type::handle_of(a).attr("__name__"))));
    out.push_back(a.cast<Tensor>());
  }
  return out;
}

// Module.__call__: forward with the pre-hooks before it and the forward hooks after it. A
// pre-hook returning a value replaces the arguments (a non-tuple becomes a 1-tuple), a forward
// hook returning a value replaces the output.
py::object module_call(py::object self, py::args args, py::kwargs kwargs) {
  nn::Module& m = self.cast<nn::Module&>();
  py::object forward = self.attr("forward");
  if (!m.has_forward_hooks()) return forward(*args, **kwargs);
  py::tuple in = args;
  for (const nn::ForwardPreHook& hook : m.forward_pre_hooks()) {
    if (const auto* py_hook = hook.target<PyForwardPreHook>()) {
      py::object r = (*py_hook->fn)(self, in);
      if (!r.is_none()) in = py::isinstance<py::tuple>(r) ? r : py::make_tuple(r);
    } else if (std::optional<TensorList> r = hook(m, tensor_args(in, m))) {
      in = py::tuple(py::cast(*r));
    }
  }
  py::object out = forward(*in, **kwargs);
  for (const nn::ForwardHook& hook : m.forward_hooks()) {
    if (const auto* py_hook = hook.target<PyForwardHook>()) {
      py::object r = (*py_hook->fn)(self, in, out);
      if (!r.is_none()) out = r;
    } else {
      TESSERA_CHECK(py::isinstance<Tensor>(out), TypeError, "[", m.type_name(),
                    "] a C++ forward hook expects a tensor output, got ",
                    std::string(py::str(py::type::handle_of(out).attr("__name__"))));
      if (std::optional<Tensor> r = hook(m, tensor_args(in, m), out.cast<Tensor>()))
        out = py::cast(*r);
    }
  }
  return out;
}

std::shared_ptr<py::object> checked_hook(py::object fn, const char* op) {
  TESSERA_CHECK(PyCallable_Check(fn.ptr()), TypeError, "[", op, "] expected a callable, got ",
                std::string(py::str(py::type::handle_of(fn).attr("__name__"))));
  return gil_safe(std::move(fn));
}

void bind_hooks(ModuleClass& cls, py::module_& nn_m) {
  py::class_<nn::HookHandle>(nn_m, "RemovableHandle", "remove() unregisters the hook.")
      .def("remove", &nn::HookHandle::remove)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](nn::HookHandle& h, py::args) { h.remove(); });
  cls.def(
         "register_forward_pre_hook",
         [](nn::Module& m, py::object hook) {
           return m.register_forward_pre_hook(
               PyForwardPreHook{checked_hook(hook, "register_forward_pre_hook")});
         },
         py::arg("hook"), "hook(module, args) runs before forward; a returned value replaces args.")
      .def(
          "register_forward_hook",
          [](nn::Module& m, py::object hook) {
            return m.register_forward_hook(
                PyForwardHook{checked_hook(hook, "register_forward_hook")});
          },
          py::arg("hook"),
          "hook(module, args, output) runs after forward; a returned value replaces output.");
}

void bind_module(py::module_& nn_m) {
  ModuleClass cls(nn_m, "Module", py::dynamic_attr(),
                  "Base of layers and models; subclass it and assign Parameters/Modules as "
                  "attributes.");
  cls.def(py::init<>())
      .def("__setattr__", &module_setattr)
      .def("__getattr__", &module_getattr)
      .def("__call__", &module_call)
      .def("forward",
           [](nn::Module& m, py::args, py::kwargs) -> py::object {
             throw NotImplementedError(detail::str(
                 "[", m.type_name(), "] expected the Module subclass to define forward()"));
           })
      .def("extra_repr", &nn::Module::extra_repr)
      .def("__repr__", &nn::Module::repr)
      .def(
          "register_parameter",
          [](py::object self, const std::string& name, py::object param) {
            TESSERA_CHECK(py::isinstance<Parameter>(param), TypeError, "[register_parameter] ",
                          "expected a tessera.nn.Parameter for '", name, "', got ",
                          std::string(py::str(py::type::handle_of(param).attr("__name__"))));
            module_setattr(self, py::str(name), param);
          },
          py::arg("name"), py::arg("param"))
      .def(
          "register_buffer",
          [](nn::Module& m, const std::string& name, const Tensor& t, bool persistent) {
            m.register_buffer(name, t, persistent);
          },
          py::arg("name"), py::arg("tensor"), py::arg("persistent") = true)
      .def(
          "register_module",
          [](py::object self, const std::string& name, py::object module) {
            module_setattr(self, py::str(name), module);
          },
          py::arg("name"), py::arg("module"))
      .def(
          "add_module",
          [](py::object self, const std::string& name, py::object module) {
            module_setattr(self, py::str(name), module);
          },
          py::arg("name"), py::arg("module"))
      .def("parameters", &nn::Module::parameters, py::arg("recurse") = true)
      .def(
          "named_parameters",
          [](const nn::Module& m, bool recurse) { return named_list(m.named_parameters(recurse)); },
          py::arg("recurse") = true)
      .def("buffers", &nn::Module::buffers, py::arg("recurse") = true)
      .def(
          "named_buffers",
          [](const nn::Module& m, bool recurse) { return named_list(m.named_buffers(recurse)); },
          py::arg("recurse") = true)
      .def("children", &nn::Module::children)
      .def("named_children",
           [](const nn::Module& m) {
             py::list out;
             for (const auto& [k, v] : m.named_children()) out.append(py::make_tuple(k, v));
             return out;
           })
      .def("modules", &nn::Module::modules)
      .def("named_modules",
           [](nn::Module& m) {
             py::list out;
             for (const auto& [k, v] : m.named_modules()) out.append(py::make_tuple(k, v));
             return out;
           })
      .def("state_dict", [](const nn::Module& m) { return tensor_dict(m.state_dict()); })
      .def("load_state_dict", &load_state, py::arg("state_dict"), py::arg("strict") = true,
           "Copies tensors (tessera, torch via DLPack, numpy) into this module's parameters.")
      .def(
          "train",
          [](py::object self, bool on) {
            self.cast<nn::Module&>().train(on);
            return self;
          },
          py::arg("mode") = true)
      .def("eval",
           [](py::object self) {
             self.cast<nn::Module&>().eval();
             return self;
           })
      .def_property("training", &nn::Module::is_training,
                    [](nn::Module& m, bool on) { m.train(on); })
      .def("zero_grad", &nn::Module::zero_grad, py::arg("set_to_none") = true)
      .def("num_parameters", &nn::Module::num_parameters, py::arg("trainable_only") = false)
      .def(
          "apply",
          [](py::object self, py::function fn) {
            self.cast<nn::Module&>().apply([&](nn::Module& mod) { fn(module_object(mod)); });
            return self;
          },
          py::arg("fn"))
      .def("to", [](py::object self, py::args args, py::kwargs kwargs) {
        nn::Module& m = self.cast<nn::Module&>();
        auto take = [&](py::handle a) {
          if (py::isinstance<DType>(a))
            m.to(a.cast<DType>());
          else if (py::isinstance<py::str>(a) && a.cast<std::string>().rfind("c", 0) != 0)
            m.to(dtype_from_string(a.cast<std::string>()));
          else
            m.to(to_device(a));
        };
        for (py::handle a : args) take(a);
        for (auto [k, v] : kwargs) {
          const std::string key = py::str(k);
          if (key == "non_blocking" || key == "copy") continue;  // flags, not targets
          TESSERA_CHECK(key == "device" || key == "dtype", TypeError,
                        "[Module.to] expected keywords device, dtype, non_blocking or copy, got '",
                        key, "'");
          if (!v.is_none()) take(v);
        }
        return self;
      });
  const std::pair<const char*, DType> casts[] = {
      {"float", kFloat32}, {"double", kFloat64}, {"half", kFloat16}, {"bfloat16", kBFloat16}};
  for (const auto& [name, dtype] : casts) {
    DType d = dtype;
    cls.def(name, [d](py::object self) {
      self.cast<nn::Module&>().to(d);
      return self;
    });
  }

  bind_hooks(cls, nn_m);

  py::class_<Parameter, Tensor>(nn_m, "Parameter",
                                "A Tensor that a Module registers when assigned as an attribute.")
      .def(py::init([](py::object data, bool requires_grad) {
             Tensor t = data.is_none() ? empty({0}) : to_tensor(data);
             Parameter p(t.detach());
             p.requires_grad_(requires_grad);
             return p;
           }),
           py::arg("data") = py::none(), py::arg("requires_grad") = true)
      .def("__repr__", [](const Parameter& p) { return "Parameter containing:\n" + p.str(); });
}

// A tensor member shown as None when undefined.
template <class Cls, class C>
void tensor_member(Cls& cls, const char* name, Tensor C::*member) {
  cls.def_property(
      name, [member](const C& c) { return tensor_or_none(c.*member); },
      [member](C& c, std::optional<Tensor> t) { c.*member = t.value_or(Tensor()); });
}

template <class Layer, class... Args>
auto layer_class(py::module_& nn_m, const char* name, const char* doc) {
  py::class_<Layer, nn::Module, std::shared_ptr<Layer>> cls(nn_m, name, py::dynamic_attr(), doc);
  cls.def(
      "forward", [](Layer& l, const Tensor& x) { return l.forward(x); }, py::arg("input"));
  return cls;
}

void bind_layers(py::module_& nn_m) {
  auto linear = layer_class<nn::Linear>(nn_m, "Linear", "y = x @ weight.T + bias.");
  linear
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_features"), py::arg("out_features"),
           py::arg("bias") = true)
      .def_readonly("in_features", &nn::Linear::in_features)
      .def_readonly("out_features", &nn::Linear::out_features);
  tensor_member(linear, "weight", &nn::Linear::weight);
  tensor_member(linear, "bias", &nn::Linear::bias);

  auto embedding = layer_class<nn::Embedding>(nn_m, "Embedding", "Rows of weight by index.");
  embedding
      .def(py::init<int64_t, int64_t, std::optional<int64_t>>(), py::arg("num_embeddings"),
           py::arg("embedding_dim"), py::arg("padding_idx") = py::none())
      .def_readonly("num_embeddings", &nn::Embedding::num_embeddings)
      .def_readonly("embedding_dim", &nn::Embedding::embedding_dim)
      .def_readonly("padding_idx", &nn::Embedding::padding_idx);
  tensor_member(embedding, "weight", &nn::Embedding::weight);

  auto layer_norm = layer_class<nn::LayerNorm>(nn_m, "LayerNorm", "Normalises trailing dims.");
  layer_norm
      .def(py::init([](const IntList& shape, double eps, bool affine, bool bias) {
             return std::make_shared<nn::LayerNorm>(shape.values, eps, affine, bias);
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true,
           py::arg("bias") = true)
      .def_property_readonly(
          "normalized_shape",
          [](const nn::LayerNorm& l) { return py::tuple(py::cast(l.normalized_shape)); })
      .def_readwrite("eps", &nn::LayerNorm::eps);
  tensor_member(layer_norm, "weight", &nn::LayerNorm::weight);
  tensor_member(layer_norm, "bias", &nn::LayerNorm::bias);

  auto rms_norm = layer_class<nn::RMSNorm>(nn_m, "RMSNorm", "x / rms(x) * weight.");
  rms_norm
      .def(py::init<int64_t, double, bool>(), py::arg("dim"), py::arg("eps") = 1e-6,
           py::arg("elementwise_affine") = true)
      .def_readwrite("eps", &nn::RMSNorm::eps);
  tensor_member(rms_norm, "weight", &nn::RMSNorm::weight);

  layer_class<nn::Dropout>(nn_m, "Dropout", "Zeroes elements with probability p in training.")
      .def(py::init<double>(), py::arg("p") = 0.5)
      .def_readwrite("p", &nn::Dropout::p);
  layer_class<nn::GELU>(nn_m, "GELU", "gelu(x), approximate 'none' or 'tanh'.")
      .def(py::init<std::string>(), py::arg("approximate") = "none");
  layer_class<nn::SiLU>(nn_m, "SiLU", "x * sigmoid(x).").def(py::init<>());
  layer_class<nn::ReLU>(nn_m, "ReLU", "max(x, 0).").def(py::init<>());
}

void bind_init(py::module_& nn_m) {
  namespace init = nn::init;
  py::module_ m = nn_m.def_submodule("init", "Parameter initialisation (torch.nn.init).");
  auto nonlinearity = [](const std::string& s) {
    const std::pair<const char*, init::Nonlinearity> names[] = {
        {"linear", init::Nonlinearity::Linear},
        {"sigmoid", init::Nonlinearity::Sigmoid},
        {"tanh", init::Nonlinearity::Tanh},
        {"relu", init::Nonlinearity::ReLU},
        {"leaky_relu", init::Nonlinearity::LeakyReLU},
        {"selu", init::Nonlinearity::SELU}};
    for (const auto& [n, v] : names)
      if (s == n) return v;
    throw ValueError("[init] expected a nonlinearity such as 'relu' or 'leaky_relu', got '" + s +
                     "'");
  };
  auto fan_mode = [](const std::string& s) {
    TESSERA_CHECK(s == "fan_in" || s == "fan_out", ValueError,
                  "[init] expected mode 'fan_in' or 'fan_out', got '", s, "'");
    return s == "fan_in" ? init::FanMode::FanIn : init::FanMode::FanOut;
  };
  m.def(
      "calculate_gain",
      [nonlinearity](const std::string& n, std::optional<double> param) {
        return init::calculate_gain(nonlinearity(n), param);
      },
      py::arg("nonlinearity"), py::arg("param") = py::none());
  m.def("normal_", &init::normal_, py::arg("tensor"), py::arg("mean") = 0.0, py::arg("std") = 1.0,
        py::arg("generator") = py::none());
  m.def("uniform_", &init::uniform_, py::arg("tensor"), py::arg("a") = 0.0, py::arg("b") = 1.0,
        py::arg("generator") = py::none());
  m.def("constant_", &init::constant_, py::arg("tensor"), py::arg("val"));
  m.def("zeros_", &init::zeros_, py::arg("tensor"));
  m.def("ones_", &init::ones_, py::arg("tensor"));
  m.def("xavier_uniform_", &init::xavier_uniform_, py::arg("tensor"), py::arg("gain") = 1.0,
        py::arg("generator") = py::none());
  m.def("xavier_normal_", &init::xavier_normal_, py::arg("tensor"), py::arg("gain") = 1.0,
        py::arg("generator") = py::none());
  for (const auto& [name, fn] : {std::pair{"kaiming_uniform_", &init::kaiming_uniform_},
                                 std::pair{"kaiming_normal_", &init::kaiming_normal_}}) {
    auto f = fn;
    m.def(
        name,
        [f, nonlinearity, fan_mode](const Tensor& t, double a, const std::string& mode,
                                    const std::string& n, Generator* g) {
          return f(t, a, fan_mode(mode), nonlinearity(n), g);
        },
        py::arg("tensor"), py::arg("a") = 0.0, py::arg("mode") = "fan_in",
        py::arg("nonlinearity") = "leaky_relu", py::arg("generator") = py::none());
  }
}

}  // namespace

void init_nn(py::module_& m) {
  py::module_ nn_m = m.def_submodule("nn", "Modules, layers and initialisation.");
  bind_module(nn_m);
  bind_layers(nn_m);
  init_nn_containers(nn_m);
  init_nn_lora(nn_m);
  bind_init(nn_m);
}

}  // namespace tessera::python
