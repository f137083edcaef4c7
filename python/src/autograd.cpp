// tessera._C.autograd: the engine entry points (backward, grad), graph nodes as seen from
// tensor.grad_fn, and the thread-local modes the Python context managers switch.
#include "bind.h"

namespace tessera::python {

namespace {

// A tensor or a sequence of tensors (None entries become undefined tensors).
TensorList tensor_list(py::handle h) {
  if (h.is_none()) return {};
  if (py::isinstance<Tensor>(h)) return {h.cast<Tensor>()};
  TensorList out;
  for (py::handle item : py::reinterpret_borrow<py::iterable>(h))
    out.push_back(item.is_none() ? Tensor() : item.cast<Tensor>());
  return out;
}

// Holds InferenceMode between __enter__ and __exit__.
struct InferenceModeScope {
  std::optional<autograd::InferenceMode> guard;
};

// Holds DetectAnomalyGuard between __enter__ and __exit__.
struct AnomalyScope {
  std::optional<autograd::DetectAnomalyGuard> guard;
};

}  // namespace

void init_autograd(py::module_& m) {
  py::module_ a = m.def_submodule("autograd", "Gradients: grad, backward, graph nodes and modes.");
  py::class_<autograd::Node, std::shared_ptr<autograd::Node>>(a, "Node",
                                                              "The backward of one forward op.")
      .def("name", &autograd::Node::name)
      .def("__repr__", [](const autograd::Node& n) { return "<" + n.name() + ">"; })
      .def_property_readonly("next_functions", [](const autograd::Node& n) {
        py::list out;
        for (const autograd::Edge& e : n.next_edges())
          out.append(py::make_tuple(e.fn ? py::cast(e.fn) : py::none(), e.input_nr));
        return py::tuple(out);
      });

  a.def(
      "grad",
      [](py::handle outputs, py::handle inputs, py::handle grad_outputs,
         std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
        TensorList g =
            autograd::grad(tensor_list(outputs), tensor_list(inputs), tensor_list(grad_outputs),
                           retain_graph, create_graph, allow_unused);
        py::list out;
        for (const Tensor& t : g) out.append(tensor_or_none(t));
        return py::tuple(out);
      },
      py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = py::none(),
      py::arg("retain_graph") = py::none(), py::arg("create_graph") = false,
      py::arg("allow_unused") = false,
      "d(sum(outputs * grad_outputs))/d(input) for each input, as a tuple (None if unused).");
  a.def(
      "backward",
      [](py::handle tensors, py::handle grad_tensors, std::optional<bool> retain_graph,
         bool create_graph) {
        autograd::backward(tensor_list(tensors), tensor_list(grad_tensors),
                           retain_graph.value_or(create_graph), create_graph);
      },
      py::arg("tensors"), py::arg("grad_tensors") = py::none(),
      py::arg("retain_graph") = py::none(), py::arg("create_graph") = false,
      "Accumulates the gradients of tensors into the leaves' .grad.");

  a.def("is_grad_enabled", &autograd::GradMode::is_enabled);
  a.def("_set_grad_enabled", &autograd::GradMode::set_enabled, py::arg("mode"));
  a.def("is_inference_mode_enabled", &autograd::InferenceMode::is_enabled);
  a.def("is_anomaly_enabled", &autograd::AnomalyMode::is_enabled);
  a.def("_set_anomaly_enabled", &autograd::AnomalyMode::set_enabled, py::arg("mode"));
  py::class_<InferenceModeScope>(a, "_InferenceModeScope")
      .def(py::init<>())
      .def("__enter__", [](InferenceModeScope& s) { s.guard.emplace(); })
      .def("__exit__", [](InferenceModeScope& s, py::args) { s.guard.reset(); });
  py::class_<AnomalyScope>(a, "_AnomalyScope")
      .def(py::init<>())
      .def("__enter__", [](AnomalyScope& s) { s.guard.emplace(); })
      .def("__exit__", [](AnomalyScope& s, py::args) { s.guard.reset(); });
}

}  // namespace tessera::python
