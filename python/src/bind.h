#pragma once
// Shared pieces of the tessera._C bindings: casters for Python numbers (Scalar), "tensor or
// number" operands and int-or-sequence arguments (shapes, dims), plus helpers that bind one C++
// op both as tessera.<op>(input, ...) and as Tensor.<op>(...).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <utility>

#include "tessera/tessera.h"

namespace tessera::python {

namespace py = pybind11;

// A Python number or a tensor: binary ops take either on both sides, as torch does.
struct Operand {
  Tensor tensor;
  std::optional<Scalar> scalar;
  // The operand as a tensor; a number becomes a wrapped 0-d tensor on `like`'s device, so it
  // promotes like a Python scalar.
  Tensor on(const Tensor& like) const {
    return tensor.defined() ? tensor : wrap_scalar(*scalar, like.defined() ? like.device() : kCPU);
  }
};

// Both operands as tensors; TypeError when neither is a tensor.
std::pair<Tensor, Tensor> operands(const Operand& a, const Operand& b, const char* op);

// An int or a sequence of ints (shapes, dims, repeats).
struct IntList {
  Shape values;
};

// Shape from `view(2, 3)` or `view((2, 3))` style arguments.
Shape shape_from_args(const py::args& args, const char* op);

// dtype / device from a Python value (tessera.dtype, "float32"; tessera.device, "cpu").
DType to_dtype(py::handle h);
Device to_device(py::handle h);
// TensorOptions from creation kwargs (dtype, device, requires_grad) over the defaults given;
// unknown keys raise TypeError.
TensorOptions options_from_kwargs(const py::kwargs& kwargs, const char* op,
                                  DType default_dtype = kFloat32, Device default_device = kCPU);

// Any tensor-like value as a tessera Tensor: a Tensor itself, an object with __dlpack__ (torch,
// numpy >= 1.22, zero-copy), a numpy array (zero-copy) or nested sequences / numbers (copied).
Tensor to_tensor(py::handle h, std::optional<DType> dtype = std::nullopt);

// Optimizer params as torch takes them: an iterable of tensors or of param-group dicts.
std::vector<optim::ParamGroup> param_groups_of(py::handle params);
// A flat StateDict as {"tensors": {...}, "scalars": {...}}, and back.
py::dict flat_state_to_python(const optim::StateDict& s);
optim::StateDict flat_state_from_python(const py::dict& d);
// An optimizer's state dict in torch's layout ({"state": {i: {...}}, "param_groups": [...]}),
// and back (also from the flat C++ layout {"tensors", "scalars"}).
py::dict optimizer_state_to_python(const optim::Optimizer& o);
optim::StateDict optimizer_state_from_python(const optim::Optimizer& o, const py::dict& d);

// A numpy-style namedtuple type (cached), e.g. namedtuple("max", "values indices").
py::object namedtuple(const char* name, const char* fields);

// The tessera.<dtype> singleton for a DType (so `t.dtype is tessera.float32` holds).
py::object dtype_object(DType dtype);
// A tessera.Size (a tuple subclass) holding shape.
py::object size_object(const Shape& shape);

// None for an undefined tensor.
inline py::object tensor_or_none(const Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

// {name: tensor} in the dict's order (state dicts, adapter weights).
inline py::dict tensor_dict(const nn::TensorDict& tensors) {
  py::dict out;
  for (const auto& [k, v] : tensors) out[py::str(k)] = v;
  return out;
}

// A Python object owned from C++ (a hook, an autograd Function's context): it may be released
// on a thread without the GIL, so its deleter takes the GIL.
inline std::shared_ptr<py::object> gil_safe(py::object obj) {
  return std::shared_ptr<py::object>(new py::object(std::move(obj)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

namespace bind_detail {
// Writes an op's result into `out` as torch's out= does (resized to the result's shape when it
// differs, cast to out's dtype when that is a safe cast) and returns out. RuntimeError when
// autograd would have to track the op (out= ops are not differentiable).
void write_out(const Tensor& result, Tensor& out, const char* op);

template <class F>
struct signature : signature<decltype(&F::operator())> {};
template <class R, class... A>
struct signature<R (*)(A...)> {
  using result = R;
  // *args/**kwargs must stay last, so such functions get no out=.
  static constexpr bool variadic =
      (std::is_same_v<std::decay_t<A>, py::kwargs> || ...) ||
      (std::is_same_v<std::decay_t<A>, py::args> || ...);
};
template <class R, class C, class... A>
struct signature<R (C::*)(A...) const> : signature<R (*)(A...)> {};

// f with a trailing `out` argument (None or a Tensor) that returns out itself when given.
template <class F, class R, class... Args>
auto with_out(F f, const char* op, R (*)(Args...)) {
  return [f, op](Args... args, py::object out) -> py::object {
    Tensor result = f(std::forward<Args>(args)...);
    if (out.is_none()) return py::cast(std::move(result));
    write_out(result, out.cast<Tensor&>(), op);
    return out;
  };
}
template <class F, class R, class C, class... Args>
auto with_out(F f, const char* op, R (C::*)(Args...) const) {
  return with_out(f, op, static_cast<R (*)(Args...)>(nullptr));
}
template <class F>
auto with_out(F f, const char* op) {
  if constexpr (std::is_pointer_v<F>) return with_out(f, op, f);
  else return with_out(f, op, &F::operator());
}
}  // namespace bind_detail

// Binds f as a module function; functions returning one tensor also take torch's keyword out=.
template <class F, class... Extra>
void def_function(py::module_& m, const char* name, F f, const Extra&... extra) {
  using Sig = bind_detail::signature<F>;
  if constexpr (std::is_same_v<typename Sig::result, Tensor> && !Sig::variadic) {
    auto g = bind_detail::with_out(f, name);
    if constexpr ((std::is_same_v<Extra, py::kw_only> || ...))
      m.def(name, g, extra..., py::arg("out") = py::none());
    else
      m.def(name, g, extra..., py::kw_only(), py::arg("out") = py::none());
  } else {
    m.def(name, f, extra...);
  }
}

// Binds f as a module function (first argument named `input`, out= as def_function) and as a
// Tensor method.
template <class F, class... Extra>
void def_op(py::module_& m, py::class_<Tensor>& cls, const char* name, F&& f,
            const Extra&... extra) {
  def_function(m, name, std::decay_t<F>(f), py::arg("input"), extra...);
  cls.def(name, std::forward<F>(f), extra...);
}

namespace bind_detail {
template <class F, class R, class C, class... Args>
auto returning_self(F f, R (C::*)(Tensor&, Args...) const) {
  return [f](py::object self, Args... args) -> py::object {
    f(self.cast<Tensor&>(), std::forward<Args>(args)...);
    return self;
  };
}
}  // namespace bind_detail

// In-place Tensor method returning the same Python object (t.add_(x) is t); f is a lambda
// taking (Tensor& self, args...).
template <class F, class... Extra>
void def_inplace(py::class_<Tensor>& cls, const char* name, F f, const Extra&... extra) {
  cls.def(name, bind_detail::returning_self(f, &F::operator()), extra...);
}

// The Tensor class object registered by init_tensor.
py::class_<Tensor> tensor_class(py::module_& m);

void init_types(py::module_& m);
void init_tensor(py::module_& m);
void init_indexing(py::module_& m);
void init_interop(py::module_& m);
void init_io(py::module_& m);
void init_ops(py::module_& m);
void init_ops_shape(py::module_& m);
void init_ops_nn(py::module_& m);
void init_ops_paged(py::module_& m);
void init_autograd(py::module_& m);
void init_nn(py::module_& m);
// Sequential, ModuleList and ModuleDict in tessera._C.nn (after Module is registered).
void init_nn_containers(py::module_& nn_m);
// tessera._C.nn.lora (LoRA fine-tuning and PEFT adapter folders).
void init_nn_lora(py::module_& nn_m);
void init_optim(py::module_& m);
void init_data(py::module_& m);
void init_runtime(py::module_& m);
void init_cuda(py::module_& m);
void init_memory(py::module_& m);
void init_context(py::module_& m);
void init_train(py::module_& m);
void init_distributed(py::module_& m);
void init_llm(py::module_& m);
// The model-parallel part of tessera._C.distributed (d is that submodule).
void init_model_parallel(py::module_& d);

}  // namespace tessera::python

namespace pybind11::detail {

// Python bool/int/float (and numpy scalars) <-> tessera::Scalar.
template <>
struct type_caster<tessera::Scalar> {
  PYBIND11_TYPE_CASTER(tessera::Scalar, const_name("Number"));
  bool load(handle src, bool convert);
  static handle cast(const tessera::Scalar& s, return_value_policy, handle);
};

template <>
struct type_caster<tessera::python::Operand> {
  PYBIND11_TYPE_CASTER(tessera::python::Operand, const_name("Tensor | Number"));
  bool load(handle src, bool convert);
  static handle cast(const tessera::python::Operand& v, return_value_policy, handle);
};

template <>
struct type_caster<tessera::python::IntList> {
  PYBIND11_TYPE_CASTER(tessera::python::IntList, const_name("int | Sequence[int]"));
  bool load(handle src, bool convert);
  static handle cast(const tessera::python::IntList& v, return_value_policy, handle);
};

}  // namespace pybind11::detail
