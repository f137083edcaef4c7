// tessera._C.autograd: the engine entry points (backward, grad), graph nodes as seen from
// tensor.grad_fn, and the thread-local modes the Python context managers switch.
#include "bind.h"
#include "tessera/autograd/view_tracking.h"

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

// The ctx of a Python autograd.Function: tensors saved in forward (handed to the graph node when
// forward returns, so saving an output makes no reference cycle) and, while backward runs, the
// node's context to unpack them (version-checked). Other attributes go into its __dict__.
struct FunctionCtx {
  TensorList to_save;
  bool saved_taken = false;
  const autograd::BackwardContext* backward = nullptr;
  size_t n_saved = 0;
  py::tuple needs_input_grad;
};

std::string type_name_of(py::handle h) { return py::str(py::type::handle_of(h).attr("__name__")); }

// The gradients a Function's backward returned, one per tensor input; non-tensor arguments must
// get None. A gradient of a broadcast shape is summed down to its input's shape, as torch does.
TensorList input_grads(py::object r, const std::string& op, size_t n_args,
                       const std::vector<size_t>& tensor_args, const std::vector<Shape>& shapes) {
  py::tuple g = py::isinstance<py::tuple>(r) ? r.cast<py::tuple>() : py::make_tuple(r);
  TESSERA_CHECK(g.size() == n_args, ValueError, "[", op, "] expected backward to return ", n_args,
                " gradients (one per forward argument), got ", g.size());
  TensorList out;
  for (size_t i = 0, k = 0; i < n_args; ++i) {
    const bool is_tensor = k < tensor_args.size() && tensor_args[k] == i;
    TESSERA_CHECK(g[i].is_none() || (is_tensor && py::isinstance<Tensor>(g[i])), TypeError, "[", op,
                  "] expected backward's gradient ", i, " to be ",
                  is_tensor ? "a Tensor or None" : "None (a non-tensor argument)", ", got ",
                  type_name_of(g[i]));
    if (is_tensor) {
      Tensor grad = g[i].is_none() ? Tensor() : g[i].cast<Tensor>();
      if (grad.defined() && grad.sizes() != shapes[k]) grad = sum_to(grad, shapes[k]);
      out.push_back(grad);
      ++k;
    }
  }
  return out;
}

// Function.apply: forward without recording, then one graph node whose backward calls the
// class's Python backward (torch.autograd.Function).
py::object function_apply(py::object cls, py::tuple args) {
  const std::string name = std::string(py::str(cls.attr("__name__"))) + "Backward";
  auto holder = std::make_shared<FunctionCtx>();
  py::object ctx = py::cast(holder);
  TensorList inputs;
  std::vector<size_t> tensor_args;
  py::list needs;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool is_tensor = py::isinstance<Tensor>(args[i]);
    if (is_tensor) {
      inputs.push_back(args[i].cast<Tensor>());
      tensor_args.push_back(i);
    }
    needs.append(is_tensor && autograd::needs_grad({inputs.back()}));
  }
  holder->needs_input_grad = py::tuple(needs);
  py::object out;
  {
    autograd::NoGradGuard no_grad;
    out = cls.attr("forward")(ctx, *args);
  }
  TensorList saved = std::move(holder->to_save);
  holder->to_save.clear();
  holder->saved_taken = true;
  if (!autograd::needs_grad(inputs)) return out;

  const bool single = py::isinstance<Tensor>(out);
  TESSERA_CHECK(single || py::isinstance<py::tuple>(out), TypeError, "[", name,
                "] expected forward to return a Tensor or a tuple, got ", type_name_of(out));
  py::list items = single ? py::list(py::make_tuple(out)) : py::list(out);
  TensorList outputs;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!py::isinstance<Tensor>(items[i])) continue;
    Tensor t = items[i].cast<Tensor>();
    // An input returned as is gets a new handle, so the input's own history stays intact.
    for (const Tensor& in : inputs)
      if (t.is_same(in)) t = t.detach();
    items[i] = py::cast(t);
    outputs.push_back(t);
  }
  holder->n_saved = saved.size();
  auto keep_ctx = gil_safe(ctx);
  auto keep_cls = gil_safe(cls);
  const size_t n_args = args.size();
  std::vector<Shape> shapes;
  for (const Tensor& in : inputs) shapes.push_back(in.sizes());
  autograd::record(name, inputs, outputs, saved,
                   [keep_ctx, keep_cls, name, n_args, tensor_args, shapes](
                       autograd::BackwardContext& bctx, const TensorList& grads) {
                     py::gil_scoped_acquire gil;
                     FunctionCtx& c = keep_ctx->cast<FunctionCtx&>();
                     c.backward = &bctx;
                     struct Reset {
                       FunctionCtx& c;
                       ~Reset() { c.backward = nullptr; }
                     } reset{c};
                     py::object r =
                         keep_cls->attr("backward")(*keep_ctx, *py::tuple(py::cast(grads)));
                     return input_grads(r, name, n_args, tensor_args, shapes);
                   });
  // An output sharing an input's memory (a view, or the input returned as is) is a view autograd
  // cannot follow: writing through it in place is refused, as torch does, since a rebuilt
  // history would bypass the class's backward.
  for (const Tensor& out : outputs)
    for (const Tensor& in : inputs)
      if (out.impl()->storage() == in.impl()->storage()) {
        autograd::track_opaque_view(in, out);
        break;
      }
  return single ? py::object(items[0]) : py::object(py::tuple(items));
}

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

  py::class_<FunctionCtx, std::shared_ptr<FunctionCtx>>(
      a, "FunctionCtx", py::dynamic_attr(), "The ctx of an autograd.Function's forward/backward.")
      .def(
          "save_for_backward",
          [](FunctionCtx& c, const py::args& tensors) {
            TESSERA_CHECK(!c.saved_taken, RuntimeError,
                          "[save_for_backward] expected a call inside forward, got one after it");
            c.to_save.clear();
            for (py::handle t : tensors) {
              TESSERA_CHECK(t.is_none() || py::isinstance<Tensor>(t), TypeError,
                            "[save_for_backward] expected tensors or None, got ", type_name_of(t));
              c.to_save.push_back(t.is_none() ? Tensor() : t.cast<Tensor>());
            }
          },
          "Keeps tensors for backward (read back as ctx.saved_tensors).")
      .def_property_readonly("saved_tensors",
                             [](const FunctionCtx& c) {
                               if (!c.backward) {
                                 py::list out;
                                 for (const Tensor& t : c.to_save) out.append(tensor_or_none(t));
                                 return py::tuple(out);
                               }
                               py::list out;
                               for (size_t i = 0; i < c.n_saved; ++i)
                                 out.append(tensor_or_none(c.backward->saved(i)));
                               return py::tuple(out);
                             })
      .def_readonly("needs_input_grad", &FunctionCtx::needs_input_grad);
  a.def("_function_apply", &function_apply, py::arg("cls"), py::arg("args"));

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
