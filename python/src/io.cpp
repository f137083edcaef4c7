// tessera._C.io: safetensors files, underneath tessera.save / tessera.load.
#include "bind.h"
#include "tessera/io/safetensors.h"

namespace tessera::python {

namespace {

nn::TensorDict tensors_of(const py::dict& d) {
  nn::TensorDict out;
  for (auto [k, v] : d) out.insert(py::str(k), to_tensor(v));
  return out;
}

io::Metadata metadata_of(const py::dict& d) {
  io::Metadata out;
  for (auto [k, v] : d) out.insert(py::str(k), py::str(v));
  return out;
}

// (tensors, metadata) as two dicts, in file order.
py::tuple to_python(const io::SafetensorsFile& f) {
  py::dict tensors, metadata;
  for (const auto& [k, v] : f.tensors) tensors[py::str(k)] = v;
  for (const auto& [k, v] : f.metadata) metadata[py::str(k)] = v;
  return py::make_tuple(tensors, metadata);
}

}  // namespace

void init_io(py::module_& m) {
  py::module_ io = m.def_submodule("io", "safetensors files (tessera.save / tessera.load).");
  io.def(
      "save_safetensors",
      [](const std::string& path, const py::dict& tensors, const py::dict& metadata) {
        io::save_safetensors(path, tensors_of(tensors), metadata_of(metadata));
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = py::dict(),
      "Writes the tensors and string metadata to path atomically.");
  io.def(
      "serialize_safetensors",
      [](const py::dict& tensors, const py::dict& metadata) {
        return py::bytes(io::serialize_safetensors(tensors_of(tensors), metadata_of(metadata)));
      },
      py::arg("tensors"), py::arg("metadata") = py::dict());
  io.def(
      "load_safetensors",
      [](const std::string& path) { return to_python(io::load_safetensors(path)); },
      py::arg("path"), "(tensors, metadata) of a file, tensors mapped copy-on-write.");
  io.def(
      "parse_safetensors",
      [](const py::bytes& bytes) { return to_python(io::parse_safetensors(std::string(bytes))); },
      py::arg("data"));
}

}  // namespace tessera::python
