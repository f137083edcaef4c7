// tessera._C.context: InfiniCore's infinicore.context (current device and stream, sync,
// DeviceEvent) and graph recording (start_graph_recording / stop_graph_recording -> Graph).
#include "tessera/runtime/context.h"
#include "bind.h"
#include "tessera/runtime/graph.h"

namespace tessera::python {

namespace {

std::optional<context::Stream> optional_stream(const py::object& stream) {
  if (stream.is_none()) return std::nullopt;
  return stream.cast<context::Stream>();
}

py::dict stats_dict(const GraphStats& s) {
  using Field = int64_t GraphStats::*;
  static const std::pair<const char*, Field> kFields[] = {
      {"recorded_kernels", &GraphStats::recorded_kernels},
      {"folded_kernels", &GraphStats::folded_kernels},
      {"fused_kernels", &GraphStats::fused_kernels},
      {"fused_passes", &GraphStats::fused_passes},
      {"launches", &GraphStats::launches},
      {"freed_intermediates", &GraphStats::freed_intermediates},
      {"replays", &GraphStats::replays},
      {"last_replay_allocations", &GraphStats::last_replay_allocations}};
  py::dict d;
  for (const auto& [name, field] : kFields) d[name] = s.*field;
  return d;
}

}  // namespace

void init_context(py::module_& m) {
  py::module_ c = m.def_submodule(
      "context", "Current device and stream, synchronisation, DeviceEvent and graph recording.");
  c.def("get_device", &context::get_device, "This thread's current device (cpu until set).");
  c.def(
      "set_device", [](py::handle device) { context::set_device(to_device(device)); },
      py::arg("device"));
  c.def(
      "device_count",
      [](py::object type) {
        return context::device_count(type.is_none() ? context::get_device().type
                                                    : to_device(type).type);
      },
      py::arg("type") = py::none(), "Devices of a type (default: the current device's).");

  py::class_<context::Stream>(c, "Stream",
                              "A queue of work on one device. On the CPU: the in-order host "
                              "stream, whose work is done when each op returns.")
      .def(py::init([](py::object device) {
             return context::Stream(device.is_none() ? context::get_device() : to_device(device));
           }),
           py::arg("device") = py::none())
      .def_property_readonly("device", &context::Stream::device)
      .def("synchronize", &context::Stream::synchronize, py::call_guard<py::gil_scoped_release>())
      .def("__eq__", &context::Stream::operator==)
      .def("__repr__", [](const context::Stream& s) {
        return "<tessera.context.Stream device=" + s.device().str() + ">";
      });
  c.def("get_stream", &context::get_stream, "The current stream of the current device.");
  c.def("sync_stream", &context::sync_stream, py::call_guard<py::gil_scoped_release>());
  c.def("sync_device", &context::sync_device, py::call_guard<py::gil_scoped_release>());

  py::class_<context::DeviceEvent>(c, "DeviceEvent",
                                   "A marker in a stream (torch.cuda.Event semantics).")
      .def(py::init<bool>(), py::arg("enable_timing") = false)
      .def(
          "record",
          [](context::DeviceEvent& e, py::object stream) { e.record(optional_stream(stream)); },
          py::arg("stream") = py::none())
      .def("query", &context::DeviceEvent::query)
      .def("synchronize", &context::DeviceEvent::synchronize,
           py::call_guard<py::gil_scoped_release>())
      .def(
          "wait",
          [](const context::DeviceEvent& e, py::object stream) { e.wait(optional_stream(stream)); },
          py::arg("stream") = py::none())
      .def("elapsed_time", &context::DeviceEvent::elapsed_time, py::arg("end_event"),
           "Milliseconds from this event to end_event.")
      .def_property_readonly("enable_timing", &context::DeviceEvent::enable_timing)
      .def_property_readonly("is_recorded", &context::DeviceEvent::is_recorded)
      .def_property_readonly("device", &context::DeviceEvent::device);

  py::class_<Graph>(c, "Graph",
                    "Recorded kernels. run() replays them: it reads the current contents of the "
                    "tensors made before recording and refreshes the tensors made while "
                    "recording (copy_ new data into the inputs first, as with CUDA graphs).")
      .def("run", &Graph::run, py::call_guard<py::gil_scoped_release>())
      .def("stats", [](const Graph& g) { return stats_dict(g.stats()); })
      .def_property_readonly("steps", &Graph::steps);
  c.def("start_graph_recording", &start_graph_recording,
        "Records this thread's ops (autograd off) until stop_graph_recording().");
  c.def("stop_graph_recording", &stop_graph_recording, "Ends the recording; returns its Graph.");
  c.def("is_graph_recording", &is_graph_recording);
}

}  // namespace tessera::python
