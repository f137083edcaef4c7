// tessera._C.runtime: autocast guards, the profiler and record_function ranges as objects the
// Python context managers (tessera.autocast, tessera.profiler.profile) open and close, plus
// activation checkpointing and the GradScaler.
#include <optional>

#include "bind.h"
#include "tessera/autograd/checkpoint.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/runtime/autocast.h"
#include "tessera/runtime/profiler.h"

namespace tessera::python {

namespace {

// A guard whose lifetime Python's with-statement decides (enter/exit rather than scope).
template <class Guard>
struct Scoped {
  std::optional<Guard> guard;
  void exit() { guard.reset(); }
};

py::dict summary_dict(const profiler::EventSummary& s) {
  py::dict d;
  d["name"] = s.name;
  d["kind"] = std::string(profiler::kind_name(s.kind));
  d["input_shapes"] = s.input_shapes;
  d["count"] = s.calls;
  d["cpu_time_total_us"] = static_cast<double>(s.total_ns) / 1e3;
  d["self_cpu_time_total_us"] = static_cast<double>(s.self_ns) / 1e3;
  d["cpu_memory_usage"] = s.allocated_bytes;
  d["self_cpu_memory_usage"] = s.self_allocated_bytes;
  d["peak_memory"] = s.peak_bytes;
  d["cuda_time_total_us"] = static_cast<double>(s.device_ns) / 1e3;
  d["self_cuda_time_total_us"] = static_cast<double>(s.self_device_ns) / 1e3;
  return d;
}

}  // namespace

void init_runtime(py::module_& m) {
  py::module_ rt = m.def_submodule("runtime", "Autocast, profiler and checkpointing.");

  using AutocastScope = Scoped<AutocastGuard>;
  py::class_<AutocastScope>(rt, "AutocastScope")
      .def(py::init<>())
      .def(
          "enter",
          [](AutocastScope& s, py::handle device, py::handle dtype, bool enabled) {
            s.guard.emplace(to_device(device).type, to_dtype(dtype), enabled);
          },
          py::arg("device"), py::arg("dtype"), py::arg("enabled") = true)
      .def("exit", &AutocastScope::exit);
  rt.def(
      "is_autocast_enabled",
      [](py::handle device) { return autocast_enabled(to_device(device).type); },
      py::arg("device") = "cpu");
  rt.def(
      "get_autocast_dtype",
      [](py::handle device) { return dtype_object(autocast_dtype(to_device(device).type)); },
      py::arg("device") = "cpu");

  py::class_<profiler::Profile>(rt, "Profile")
      .def(
          "table",
          [](const profiler::Profile& p, const std::string& sort_by, int row_limit,
             bool group_by_input_shape) {
            return p.table(profiler::parse_sort_by(sort_by), row_limit, group_by_input_shape);
          },
          py::arg("sort_by") = "self", py::arg("row_limit") = -1,
          py::arg("group_by_input_shape") = false)
      .def(
          "key_averages",
          [](const profiler::Profile& p, bool group_by_input_shape, const std::string& sort_by) {
            py::list rows;
            for (const auto& s :
                 p.key_averages(group_by_input_shape, profiler::parse_sort_by(sort_by)))
              rows.append(summary_dict(s));
            return rows;
          },
          py::arg("group_by_input_shape") = false, py::arg("sort_by") = "self")
      .def("has_device_time", &profiler::Profile::has_device_time)
      .def("chrome_trace", &profiler::Profile::chrome_trace)
      .def("export_chrome_trace", &profiler::Profile::export_chrome_trace, py::arg("path"));

  using ProfilerScope = Scoped<profiler::Profiler>;
  py::class_<ProfilerScope>(rt, "ProfilerScope")
      .def(py::init<>())
      .def(
          "enter",
          [](ProfilerScope& s, bool device_time) {
            s.guard.emplace(profiler::ProfilerOptions{.device_time = device_time});
          },
          py::arg("device_time") = false)
      .def("exit", [](ProfilerScope& s) {
        profiler::Profile p = s.guard ? s.guard->stop() : profiler::Profile();
        s.guard.reset();
        return p;
      });

  using RecordScope = Scoped<profiler::RecordFunction>;
  py::class_<RecordScope>(rt, "RecordScope")
      .def(py::init<>())
      .def("enter", [](RecordScope& s, const std::string& name) { s.guard.emplace(name); })
      .def("exit", &RecordScope::exit);

  rt.def(
      "checkpoint",
      [](py::function fn, const TensorList& inputs) {
        return autograd::checkpoint(
            [fn](const TensorList& in) {
              py::gil_scoped_acquire gil;
              py::object out = fn(*py::cast(in));
              if (py::isinstance<Tensor>(out)) return TensorList{out.cast<Tensor>()};
              return out.cast<TensorList>();
            },
            inputs);
      },
      py::arg("fn"), py::arg("inputs"));

  py::class_<optim::GradScaler>(rt, "GradScaler")
      .def(py::init([](double init_scale, double growth_factor, double backoff_factor,
                       int64_t growth_interval, bool enabled) {
             return optim::GradScaler(
                 {init_scale, growth_factor, backoff_factor, growth_interval, enabled});
           }),
           py::arg("init_scale") = 65536.0, py::arg("growth_factor") = 2.0,
           py::arg("backoff_factor") = 0.5, py::arg("growth_interval") = 2000,
           py::arg("enabled") = true)
      .def("scale", &optim::GradScaler::scale, py::arg("loss"))
      .def("unscale_", &optim::GradScaler::unscale_, py::arg("optimizer"))
      .def("step", &optim::GradScaler::step, py::arg("optimizer"))
      .def("update", &optim::GradScaler::update)
      .def("get_scale", &optim::GradScaler::get_scale)
      .def("is_enabled", &optim::GradScaler::is_enabled)
      .def("found_inf", &optim::GradScaler::found_inf)
      .def("get_growth_tracker", &optim::GradScaler::growth_tracker);
}

}  // namespace tessera::python
