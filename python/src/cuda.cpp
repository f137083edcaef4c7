// tessera._C.cuda: the CUDA runtime as torch.cuda names it (availability, devices,
// synchronisation, the caching allocator's figures). In a build without the CUDA backend,
// is_available() is False and the rest raise NotImplementedError.
#include "bind.h"
#include "tessera/runtime/cuda.h"

namespace tessera::python {

void init_cuda(py::module_& m) {
  py::module_ c = m.def_submodule("cuda", "CUDA devices and the caching allocator.");
  c.def("is_available", &cuda::is_available);
  c.def("device_count", &cuda::device_count);
  c.def("current_device", &cuda::current_device);
  c.def("set_device", &cuda::set_device, py::arg("device"));
  c.def("synchronize", &cuda::synchronize);
  c.def("empty_cache", &cuda::empty_cache);
  c.def("reset_peak_memory_stats", &cuda::reset_peak_memory_stats);
  c.def("memory_allocated", [] { return cuda::memory_stats().live_bytes; });
  c.def("max_memory_allocated", [] { return cuda::memory_stats().peak_bytes; });
  c.def("memory_reserved",
        [] { return cuda::memory_stats().live_bytes + cuda::memory_stats().cached_bytes; });
  c.def("set_allow_tf32", &cuda::set_allow_tf32, py::arg("allow"));
}

}  // namespace tessera::python
