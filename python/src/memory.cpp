// tessera.memory: the allocators' counters for every device type, as torch.cuda's memory
// functions report them for CUDA (tessera.cuda keeps those names for CUDA alone).
#include "bind.h"

namespace tessera::python {

namespace {

Allocator& allocator_of(const std::string& device) {
  Allocator* a = get_allocator(Device(device).type);
  TESSERA_CHECK(a != nullptr, NotImplementedError, "[memory_stats] expected an allocator for ",
                device, ", got none (is the backend built?)");
  return *a;
}

}  // namespace

void init_memory(py::module_& m) {
  py::module_ mem = m.def_submodule("memory", "Allocator counters and cache control per device.");
  mem.def(
      "memory_stats",
      [](const std::string& device) {
        AllocatorStats s = allocator_of(device).stats();
        py::dict out;  // torch.cuda.memory_stats' key names
        out["allocated_bytes.all.current"] = s.live_bytes;
        out["allocated_bytes.all.peak"] = s.peak_bytes;
        out["allocated_bytes.all.allocated"] = s.allocated_bytes;
        out["allocation.all.allocated"] = s.num_allocs;
        out["reserved_bytes.all.current"] = s.live_bytes + s.cached_bytes;
        out["inactive_split_bytes.all.current"] = s.cached_bytes;
        return out;
      },
      py::arg("device") = "cpu");
  mem.def(
      "reset_peak_memory_stats", [](const std::string& d) { allocator_of(d).reset_peak(); },
      py::arg("device") = "cpu");
  mem.def(
      "empty_cache", [](const std::string& d) { allocator_of(d).empty_cache(); },
      py::arg("device") = "cpu", "Returns the cached free blocks of the device to the system.");
}

}  // namespace tessera::python
