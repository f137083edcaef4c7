// Memory exchange with numpy and DLPack (torch.from_dlpack / tessera.from_dlpack), zero-copy in
// both directions: a foreign buffer is wrapped in a Storage whose deleter releases the owner,
// and an exported tensor keeps its storage alive until the consumer lets go. Also the copying
// constructors tessera.tensor / as_tensor.
#include <pybind11/numpy.h>

#include "bind.h"
#include "dlpack.h"

namespace tessera::python {

namespace {

// Bytes spanned by a strided view starting at element 0 (strides in elements, all >= 0).
size_t extent_bytes(const Shape& sizes, const Shape& strides, DType dtype) {
  int64_t last = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    last += (sizes[d] - 1) * strides[d];
  }
  return static_cast<size_t>(last + 1) * itemsize(dtype);
}

// Checked before the memory's owner is taken over: a refusal after that leaked the owner (the
// array's reference, the capsule's deleter).
void check_strides(const Shape& strides, const char* op) {
  for (int64_t s : strides)
    TESSERA_CHECK(s >= 0, ValueError, "[", op, "] expected non-negative strides, got ", strides,
                  " (copy the array first, e.g. np.ascontiguousarray)");
}

// A tensor over memory owned by someone else (strides checked); release() runs when the storage
// dies.
Tensor wrap_memory(void* data, const Shape& sizes, const Shape& strides, DType dtype, Device device,
                   std::function<void(void*)> release) {
  auto storage = std::make_shared<StorageImpl>(data, extent_bytes(sizes, strides, dtype), device,
                                               std::move(release));
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), sizes, strides, 0, dtype));
}

// Drops a Python reference from a storage deleter, which may run on any thread.
std::function<void(void*)> release_python_object(py::handle owner) {
  owner.inc_ref();
  PyObject* obj = owner.ptr();
  return [obj](void*) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    Py_DECREF(obj);
  };
}

// ---- numpy ----

Tensor from_numpy(py::handle obj) {
  TESSERA_CHECK(py::isinstance<py::array>(obj), TypeError,
                "[from_numpy] expected a numpy.ndarray, got ",
                std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  py::array arr = py::reinterpret_borrow<py::array>(obj);
  const char order = arr.dtype().byteorder();
  TESSERA_CHECK(order == '=' || order == '|' || order == '<', TypeError,
                "[from_numpy] expected native byte order, got a big-endian array");
  DType dtype = to_dtype(arr.dtype());
  const int64_t item = static_cast<int64_t>(itemsize(dtype));
  Shape sizes(arr.shape(), arr.shape() + arr.ndim()), strides;
  for (py::ssize_t d = 0; d < arr.ndim(); ++d) {
    const int64_t s = arr.strides()[d];
    TESSERA_CHECK(s % item == 0, ValueError, "[from_numpy] expected strides that are multiples of ",
                  item, " bytes, got ", s);
    strides.push_back(s / item);
  }
  check_strides(strides, "from_numpy");
  return wrap_memory(const_cast<void*>(arr.data()), sizes, strides, dtype, kCPU,
                     release_python_object(arr));
}

py::array to_numpy(const Tensor& t) {
  TESSERA_CHECK(!t.requires_grad(), RuntimeError,
                "[numpy] expected a tensor that does not require grad, got one that does (use "
                "t.detach().numpy())");
  TESSERA_CHECK(t.device().is_cpu(), TypeError, "[numpy] expected a cpu tensor, got ",
                t.device().str(), " (use t.cpu())");
  TESSERA_CHECK(t.dtype() != kBFloat16, TypeError,
                "[numpy] expected a dtype numpy has, got bfloat16 (use t.float())");
  std::vector<py::ssize_t> shape(t.sizes().begin(), t.sizes().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(s * static_cast<int64_t>(t.element_size()));
  // The array's base owns the storage itself, not the tensor: the tensor's memory may be
  // swapped later (x.data = y, an out= write that resizes) while the array still reads it.
  py::capsule owner(new Storage(t.impl()->storage()),
                    [](void* p) { delete static_cast<Storage*>(p); });
  return py::array(py::dtype(std::string(dtype_name(t.dtype()))), shape, strides, t.data_ptr(),
                   owner);
}

// ---- DLPack ----

dlpack::DataType to_dl_dtype(DType d) {
  const uint8_t bits = static_cast<uint8_t>(itemsize(d) * 8);
  if (d == kBool) return {dlpack::kDLBool, bits, 1};
  if (d == kBFloat16) return {dlpack::kDLBfloat, bits, 1};
  if (is_floating(d)) return {dlpack::kDLFloat, bits, 1};
  return {d == kUInt8 ? dlpack::kDLUInt : dlpack::kDLInt, bits, 1};
}

DType from_dl_dtype(dlpack::DataType t) {
  TESSERA_CHECK(t.lanes == 1, TypeError, "[from_dlpack] expected scalar lanes, got ", t.lanes);
  switch (t.code) {
    case dlpack::kDLBool:
      if (t.bits == 8) return kBool;
      break;
    case dlpack::kDLUInt:
      if (t.bits == 8) return kUInt8;
      break;
    case dlpack::kDLInt:
      if (t.bits == 8) return kInt8;
      if (t.bits == 16) return kInt16;
      if (t.bits == 32) return kInt32;
      if (t.bits == 64) return kInt64;
      break;
    case dlpack::kDLFloat:
      if (t.bits == 16) return kFloat16;
      if (t.bits == 32) return kFloat32;
      if (t.bits == 64) return kFloat64;
      break;
    case dlpack::kDLBfloat:
      if (t.bits == 16) return kBFloat16;
      break;
  }
  throw TypeError(detail::str("[from_dlpack] expected a dtype tessera has, got DLPack code ",
                              int(t.code), " with ", int(t.bits), " bits"));
}

// What an exported capsule owns: a handle to the tensor and the shape arrays DLPack points at.
struct Export {
  Tensor tensor;
  Shape shape, strides;
  dlpack::ManagedTensor managed{};
};

py::capsule to_dlpack(const Tensor& t) {
  TESSERA_CHECK(!t.requires_grad(), RuntimeError,
                "[__dlpack__] expected a tensor that does not require grad, got one that does "
                "(use t.detach())");
  auto* ex = new Export{t, t.sizes(), t.strides()};
  dlpack::Tensor& dl = ex->managed.dl_tensor;
  dl.data = t.data_ptr();
  dl.device = {t.device().is_cpu() ? dlpack::kDLCPU : dlpack::kDLCUDA,
               t.device().is_cpu() ? 0 : int32_t{t.device().index}};
  dl.ndim = static_cast<int32_t>(t.dim());
  dl.dtype = to_dl_dtype(t.dtype());
  dl.shape = ex->shape.data();
  dl.strides = ex->strides.data();
  dl.byte_offset = 0;
  ex->managed.manager_ctx = ex;
  ex->managed.deleter = [](dlpack::ManagedTensor* self) {
    delete static_cast<Export*>(self->manager_ctx);
  };
  // An unconsumed capsule frees the export itself; a consumer renames it and calls the deleter.
  PyObject* cap = PyCapsule_New(&ex->managed, dlpack::kCapsuleName, [](PyObject* capsule) {
    if (!PyCapsule_IsValid(capsule, dlpack::kCapsuleName)) return;
    auto* m =
        static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule, dlpack::kCapsuleName));
    m->deleter(m);
  });
  if (!cap) {
    delete ex;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

Tensor from_dlpack(py::object obj) {
  if (!PyCapsule_CheckExact(obj.ptr())) {
    TESSERA_CHECK(py::hasattr(obj, "__dlpack__"), TypeError,
                  "[from_dlpack] expected an object with __dlpack__ or a DLPack capsule, got ",
                  std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    obj = obj.attr("__dlpack__")();
  }
  auto* managed =
      static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(obj.ptr(), dlpack::kCapsuleName));
  if (!managed) {
    PyErr_Clear();
    throw ValueError(
        "[from_dlpack] expected an unconsumed \"dltensor\" capsule, got one that "
        "was already used");
  }
  const dlpack::Tensor& dl = managed->dl_tensor;
  DType dtype = from_dl_dtype(dl.dtype);
  Device device;
  if (dl.device.device_type == dlpack::kDLCUDA)
    device = Device(DeviceType::CUDA, dl.device.device_id);
  else
    TESSERA_CHECK(
        dl.device.device_type == dlpack::kDLCPU || dl.device.device_type == dlpack::kDLCUDAHost,
        TypeError, "[from_dlpack] expected cpu or cuda memory, got DLPack device type ",
        int(dl.device.device_type));
  Shape sizes(dl.shape, dl.shape + dl.ndim);
  Shape strides = dl.strides ? Shape(dl.strides, dl.strides + dl.ndim) : contiguous_strides(sizes);
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  check_strides(strides, "from_dlpack");
  // From here on the memory is ours: the producer's deleter runs when the storage dies.
  PyCapsule_SetName(obj.ptr(), dlpack::kUsedCapsuleName);
  return wrap_memory(
      data, sizes, strides, dtype, device,
      [managed](void*) {
        if (managed->deleter) managed->deleter(managed);
      });
}

// ---- copying constructors ----

// Values of a Python number / nested sequence as a numpy array with torch's default dtypes
// (Python floats become float32, ints int64); with a dtype to be converted to, floats stay
// float64, so a float64 tensor gets the exact values (torch converts from the Python double).
py::array python_values(py::handle data, std::optional<DType> converted_to = std::nullopt) {
  py::module_ np = py::module_::import("numpy");
  py::array arr = np.attr("asarray")(data);
  std::string kind(1, arr.dtype().kind());
  if (kind == "f") return np.attr("asarray")(arr, converted_to ? "float64" : "float32");
  if (kind == "i" || kind == "u") return np.attr("asarray")(arr, "int64");
  TESSERA_CHECK(kind == "b", TypeError,
                "[tensor] expected numbers or nested sequences of numbers, got values of numpy "
                "kind '",
                kind, "'");
  return arr;
}

Tensor make_tensor(py::handle data, std::optional<py::handle> dtype,
                   std::optional<py::handle> device, bool requires_grad) {
  const std::optional<DType> want =
      dtype && !dtype->is_none() ? std::optional<DType>(to_dtype(*dtype)) : std::nullopt;
  Tensor t;
  if (py::isinstance<Tensor>(data))
    t = data.cast<Tensor>().detach();
  else if (py::isinstance<py::array>(data))
    t = from_numpy(data);
  else if (py::hasattr(data, "__dlpack__"))
    t = to_tensor(data);
  else
    t = from_numpy(python_values(data, want));
  autograd::NoGradGuard ng;
  t = t.clone();
  if (want) t = t.to(*want);
  if (device && !device->is_none()) t = t.to(to_device(*device));
  if (requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor to_tensor(py::handle h, std::optional<DType> dtype) {
  Tensor t;
  if (py::isinstance<Tensor>(h)) {
    t = h.cast<Tensor>();
  } else if (py::isinstance<py::array>(h)) {
    t = from_numpy(h);
  } else if (py::hasattr(h, "__dlpack__")) {
    // torch refuses to export tensors that require grad; their values are what we want.
    py::object obj = py::reinterpret_borrow<py::object>(h);
    if (py::hasattr(obj, "detach")) obj = obj.attr("detach")();
    t = from_dlpack(obj);
  } else {
    t = from_numpy(python_values(h, dtype));
  }
  return dtype && *dtype != t.dtype() ? t.to(*dtype) : t;
}

void init_interop(py::module_& m) {
  auto cls = tensor_class(m);
  m.def("from_numpy", &from_numpy, py::arg("ndarray"),
        "A tensor sharing the array's memory (no copy).");
  m.def("from_dlpack", &from_dlpack, py::arg("ext_tensor"),
        "A tensor sharing the memory of an object with __dlpack__ (torch, numpy) or of a "
        "DLPack capsule.");
  m.def("to_dlpack", &to_dlpack, py::arg("tensor"), "A DLPack capsule sharing t's memory.");
  m.def("tensor", &make_tensor, py::arg("data"), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("device") = py::none(), py::arg("requires_grad") = false,
        "A new tensor copying data (a tensor, array, number or nested sequence).");
  m.def(
      "as_tensor",
      [](py::handle data, py::object dtype) {
        return to_tensor(data, dtype.is_none() ? std::nullopt : std::optional(to_dtype(dtype)));
      },
      py::arg("data"), py::arg("dtype") = py::none(),
      "data as a tensor, sharing memory where possible (tensors, numpy arrays, DLPack).");
  cls.def(
         "numpy",
         [](const Tensor& t, bool force) { return to_numpy(force ? t.detach().to(kCPU) : t); },
         py::arg("force") = false, "An ndarray sharing this tensor's memory.")
      .def(
          "__array__",
          [](const Tensor& t, py::object dtype) -> py::object {
            py::array a = to_numpy(t.detach().to(kCPU));
            if (dtype.is_none()) return a;
            return a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none())
      .def(
          "__dlpack__", [](const Tensor& t, py::object /*stream*/) { return to_dlpack(t); },
          py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const Tensor& t) {
        if (t.device().is_cpu()) return py::make_tuple(int(dlpack::kDLCPU), 0);
        return py::make_tuple(int(dlpack::kDLCUDA), int(t.device().index));
      });
}

}  // namespace tessera::python
