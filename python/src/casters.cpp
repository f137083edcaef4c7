// Argument conversion shared by every binding file: Python numbers, tensor-or-number operands,
// int lists, dtype/device values and creation keyword arguments.
#include <map>

#include "bind.h"

namespace tessera::python {

namespace {

// numpy.generic (the numpy scalar types), or None when numpy is missing.
py::handle numpy_generic() {
  static py::object* generic = [] {
    try {
      return new py::object(py::module_::import("numpy").attr("generic"));
    } catch (const py::error_already_set&) {
      return new py::object(py::none());
    }
  }();
  return *generic;
}

std::string type_name_of(py::handle h) { return py::str(py::type::handle_of(h).attr("__name__")); }

}  // namespace

std::pair<Tensor, Tensor> operands(const Operand& a, const Operand& b, const char* op) {
  TESSERA_CHECK(a.tensor.defined() || b.tensor.defined(), TypeError, "[", op,
                "] expected at least one tensor operand, got two numbers");
  Tensor like = a.tensor.defined() ? a.tensor : b.tensor;
  return {a.on(like), b.on(like)};
}

Shape shape_from_args(const py::args& args, const char* op) {
  if (args.size() == 1 && !PyLong_Check(args[0].ptr())) {
    pybind11::detail::make_caster<IntList> c;
    TESSERA_CHECK(c.load(args[0], true), TypeError, "[", op,
                  "] expected a shape as ints or one sequence of ints, got ",
                  type_name_of(args[0]));
    return pybind11::detail::cast_op<IntList&>(c).values;
  }
  Shape out;
  for (py::handle a : args) {
    TESSERA_CHECK(PyIndex_Check(a.ptr()) && !py::isinstance<Tensor>(a), TypeError, "[", op,
                  "] expected a shape as ints or one sequence of ints, got ", type_name_of(a));
    out.push_back(py::cast<int64_t>(a));
  }
  return out;
}

DType to_dtype(py::handle h) {
  if (py::isinstance<DType>(h)) return h.cast<DType>();
  if (py::isinstance<py::str>(h)) return dtype_from_string(h.cast<std::string>());
  // Python types, as torch: float -> float64, int -> int64, bool -> bool.
  if (h.ptr() == reinterpret_cast<PyObject*>(&PyFloat_Type)) return kFloat64;
  if (h.ptr() == reinterpret_cast<PyObject*>(&PyLong_Type)) return kInt64;
  if (h.ptr() == reinterpret_cast<PyObject*>(&PyBool_Type)) return kBool;
  // torch.float32 prints as "torch.float32"; numpy dtypes and scalar types have a .name.
  std::string s = py::str(h);
  if (s.rfind("torch.", 0) == 0) return dtype_from_string(s.substr(6));
  try {
    py::object np_dtype = py::module_::import("numpy").attr("dtype")(h);
    return dtype_from_string(np_dtype.attr("name").cast<std::string>());
  } catch (const py::error_already_set&) {
  }
  throw TypeError(detail::str("[dtype] expected a tessera dtype or its name, got ", s));
}

Device to_device(py::handle h) {
  if (py::isinstance<Device>(h)) return h.cast<Device>();
  if (PyLong_Check(h.ptr())) return Device(DeviceType::CUDA, h.cast<int>());
  // Strings and torch.device both print as "cpu" / "cuda:0".
  return Device(std::string(py::str(h)));
}

TensorOptions options_from_kwargs(const py::kwargs& kwargs, const char* op, DType default_dtype,
                                  Device default_device) {
  TensorOptions o = TensorOptions(default_dtype).with_device(default_device);
  for (auto [key, value] : kwargs) {
    std::string k = py::str(key);
    if (k == "dtype") {
      if (!value.is_none()) o.dtype = to_dtype(value);
    } else if (k == "device") {
      if (!value.is_none()) o.device = to_device(value);
    } else if (k == "requires_grad") {
      o.requires_grad = value.cast<bool>();
    } else {
      throw TypeError(detail::str("[", op, "] got an unexpected keyword argument '", k, "'"));
    }
  }
  return o;
}

py::object namedtuple(const char* name, const char* fields) {
  static auto* cache = new std::map<std::string, py::object>();
  auto it = cache->find(name);
  if (it == cache->end())
    it = cache->emplace(name, py::module_::import("collections").attr("namedtuple")(name, fields))
             .first;
  return it->second;
}

py::object size_object(const Shape& shape) {
  static auto* size_type = new py::object(py::module_::import("tessera._size").attr("Size"));
  return (*size_type)(py::tuple(py::cast(shape)));
}

}  // namespace tessera::python

namespace pybind11::detail {

using tessera::Scalar;
using tessera::python::IntList;
using tessera::python::Operand;

bool type_caster<Scalar>::load(handle src, bool convert) {
  PyObject* o = src.ptr();
  if (PyBool_Check(o)) {
    value = Scalar(o == Py_True);
    return true;
  }
  if (PyLong_Check(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    value = Scalar(static_cast<int64_t>(v));
    return true;
  }
  if (PyFloat_Check(o)) {
    value = Scalar(PyFloat_AsDouble(o));
    return true;
  }
  // numpy scalars (np.float32(1.5), np.int64(2), np.bool_(True)) load as their Python value.
  handle generic = tessera::python::numpy_generic();
  if (convert && !generic.is_none() && isinstance(src, generic))
    return load(src.attr("item")(), false);
  return false;
}

handle type_caster<Scalar>::cast(const Scalar& s, return_value_policy, handle) {
  if (s.is_bool()) return pybind11::bool_(s.to<bool>()).release();
  if (s.is_integral()) return pybind11::int_(s.to_int()).release();
  return pybind11::float_(s.to_double()).release();
}

bool type_caster<Operand>::load(handle src, bool convert) {
  if (src.is_none()) return false;
  make_caster<tessera::Tensor> tensor;
  if (tensor.load(src, convert)) {
    value = Operand{cast_op<tessera::Tensor&>(tensor), std::nullopt};
    return true;
  }
  make_caster<Scalar> scalar;
  if (scalar.load(src, convert)) {
    value = Operand{tessera::Tensor(), cast_op<Scalar&>(scalar)};
    return true;
  }
  return false;
}

handle type_caster<Operand>::cast(const Operand& v, return_value_policy policy, handle parent) {
  if (v.tensor.defined()) return make_caster<tessera::Tensor>::cast(v.tensor, policy, parent);
  return make_caster<Scalar>::cast(*v.scalar, policy, parent);
}

bool type_caster<IntList>::load(handle src, bool convert) {
  auto as_int = [](handle h, int64_t& out) {
    if (!PyIndex_Check(h.ptr()) || isinstance<tessera::Tensor>(h)) return false;
    out = h.cast<int64_t>();
    return true;
  };
  value.values.clear();
  int64_t v = 0;
  if (as_int(src, v)) {
    value.values.push_back(v);
    return true;
  }
  if (!PyTuple_Check(src.ptr()) && !PyList_Check(src.ptr())) {
    // Other sequences (torch.Size is a tuple; numpy int arrays) when converting.
    if (!convert || !isinstance<sequence>(src) || isinstance<str>(src) ||
        isinstance<tessera::Tensor>(src))
      return false;
  }
  for (handle item : reinterpret_borrow<sequence>(src)) {
    if (!as_int(item, v)) return false;
    value.values.push_back(v);
  }
  return true;
}

handle type_caster<IntList>::cast(const IntList& v, return_value_policy, handle) {
  return pybind11::tuple(pybind11::cast(v.values)).release();
}

}  // namespace pybind11::detail
