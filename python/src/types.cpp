// tessera.dtype (one singleton object per DType, with torch's aliases) and tessera.device.
#include <array>

#include "bind.h"

namespace tessera::python {

namespace {
std::array<py::object*, kNumDTypes> dtype_objects{};
}  // namespace

py::object dtype_object(DType dtype) { return *dtype_objects[static_cast<int>(dtype)]; }

void init_types(py::module_& m) {
  py::class_<DType>(m, "dtype", "An element type: tessera.float32, tessera.bfloat16, ...")
      .def("__repr__", [](DType d) { return "tessera." + std::string(dtype_name(d)); })
      .def("__str__", [](DType d) { return "tessera." + std::string(dtype_name(d)); })
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); })
      .def_property_readonly("itemsize", [](DType d) { return itemsize(d); })
      .def_property_readonly("name", [](DType d) { return std::string(dtype_name(d)); })
      .def("__eq__",
           [](DType a, py::handle b) { return py::isinstance<DType>(b) && a == b.cast<DType>(); })
      .def("__hash__", [](DType d) { return static_cast<int>(d); })
      // Pickled by reference to the module attribute, so unpickling gives the singleton.
      .def("__reduce__", [](DType d) { return std::string(dtype_name(d)); });
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType d = static_cast<DType>(i);
    dtype_objects[i] = new py::object(py::cast(d));  // lives as long as the interpreter
    m.attr(std::string(dtype_name(d)).c_str()) = dtype_object(d);
  }
  // torch's aliases.
  const std::pair<const char*, DType> aliases[] = {{"float", kFloat32}, {"double", kFloat64},
                                                   {"half", kFloat16},  {"long", kInt64},
                                                   {"int", kInt32},     {"short", kInt16}};
  for (const auto& [name, d] : aliases) m.attr(name) = dtype_object(d);

  py::class_<Device>(m, "device", "A device: tessera.device('cpu'), tessera.device('cuda:0').")
      .def(py::init([](py::handle spec) { return to_device(spec); }), py::arg("type"))
      .def(py::init([](const std::string& type, int index) {
             return Device(type + ":" + std::to_string(index));
           }),
           py::arg("type"), py::arg("index"))
      .def_property_readonly("type", [](const Device& d) { return d.is_cpu() ? "cpu" : "cuda"; })
      .def_property_readonly("index",
                             [](const Device& d) -> py::object {
                               if (d.is_cpu()) return py::none();
                               return py::int_(d.index);
                             })
      .def("__repr__",
           [](const Device& d) {
             return d.is_cpu() ? std::string("device(type='cpu')")
                               : "device(type='cuda', index=" + std::to_string(d.index) + ")";
           })
      .def("__str__", &Device::str)
      .def("__eq__",
           [](const Device& a, py::handle b) {
             try {
               return a == to_device(b);
             } catch (const std::exception&) {
               return false;
             }
           })
      .def("__hash__", [](const Device& d) { return static_cast<int>(d.type) * 1024 + d.index; });
  m.def(
      "device_count", [](const std::string& type) { return device_count(Device(type).type); },
      py::arg("type") = "cuda", "Devices of a type this build can use (0 cuda without a GPU).");
}

}  // namespace tessera::python
