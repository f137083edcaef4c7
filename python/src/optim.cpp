// tessera._C.optim: SGD, Adam, AdamW with torch's constructor arguments and param-group dicts,
// lr schedulers and gradient clipping. optimizer.param_groups[i]["lr"] reads and writes the
// C++ group's options, so Python-side schedules work as they do with torch.
#include "bind.h"

namespace tessera::python {

namespace {

using optim::Optimizer;
using optim::ParamGroup;

TensorList tensors_of(py::handle h) {
  if (py::isinstance<Tensor>(h)) return {h.cast<Tensor>()};
  TensorList out;
  for (py::handle item : py::reinterpret_borrow<py::iterable>(h))
    out.push_back(item.cast<Tensor>());
  return out;
}

// Option values are numbers; torch's betas=(b1, b2) maps to beta1/beta2, flags to 0/1.
void set_option(optim::Options& options, const std::string& key, py::handle value) {
  if (key == "betas") {
    auto betas = value.cast<std::pair<double, double>>();
    options.insert_or_assign("beta1", betas.first);
    options.insert_or_assign("beta2", betas.second);
  } else if (!value.is_none()) {
    options.insert_or_assign(key, value.cast<double>());
  }
}

ParamGroup group_of(const py::dict& d) {
  TESSERA_CHECK(d.contains("params"), ValueError,
                "[optimizer] expected a param group dict with 'params', got keys ",
                std::string(py::str(py::list(d.attr("keys")()))));
  ParamGroup g{tensors_of(d["params"]), {}};
  for (auto [k, v] : d) {
    std::string key = py::str(k);
    if (key != "params") set_option(g.options, key, v);
  }
  return g;
}

}  // namespace

// torch accepts an iterable of tensors or of param-group dicts.
std::vector<ParamGroup> param_groups_of(py::handle params) {
  if (py::isinstance<Tensor>(params)) return {ParamGroup{{params.cast<Tensor>()}, {}}};
  py::list items(py::reinterpret_borrow<py::iterable>(params));
  if (items.size() > 0 && py::isinstance<py::dict>(items[0])) {
    std::vector<ParamGroup> groups;
    for (py::handle d : items) groups.push_back(group_of(d.cast<py::dict>()));
    return groups;
  }
  return {ParamGroup{tensors_of(items), {}}};
}

namespace {

// optimizer.param_groups[i]: a live view of one C++ group as a dict-like object.
struct GroupView {
  std::shared_ptr<Optimizer> opt;
  size_t index;
  ParamGroup& group() const { return opt->param_groups().at(index); }
};

py::object group_get(const GroupView& v, const std::string& key) {
  ParamGroup& g = v.group();
  if (key == "params") return py::cast(g.params);
  if (key == "betas" && g.options.contains("beta1"))
    return py::make_tuple(g.options.at("beta1"), g.options.at("beta2"));
  const double* value = g.options.find(key);
  if (!value) throw py::key_error(key);
  return py::float_(*value);
}

void bind_optimizers(py::module_& m) {
  py::class_<GroupView>(m, "ParamGroup", "A live view of one optimizer param group.")
      .def("__getitem__", &group_get)
      .def("__setitem__",
           [](const GroupView& v, const std::string& key, py::handle value) {
             ParamGroup& g = v.group();
             TESSERA_CHECK(key == "betas" || g.options.contains(key), ValueError,
                           "[param_groups] expected an option among ", g.options.keys(), ", got '",
                           key, "'");
             set_option(g.options, key, value);
           })
      .def("__contains__",
           [](const GroupView& v, const std::string& key) {
             return key == "params" || v.group().options.contains(key);
           })
      .def("keys",
           [](const GroupView& v) {
             std::vector<std::string> keys{"params"};
             for (const std::string& k : v.group().options.keys()) keys.push_back(k);
             return keys;
           })
      .def(
          "get",
          [](const GroupView& v, const std::string& key, py::object dflt) {
            try {
              return group_get(v, key);
            } catch (const py::key_error&) {
              return dflt;
            }
          },
          py::arg("key"), py::arg("default") = py::none())
      .def("__repr__", [](const GroupView& v) {
        std::string s = "{'params': [" + std::to_string(v.group().params.size()) + " tensors]";
        for (const auto& [k, x] : v.group().options) s += ", '" + k + "': " + std::to_string(x);
        return s + "}";
      });

  py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "Optimizer")
      .def(
          "step",
          [](Optimizer& o, py::object closure) -> py::object {
            py::object loss = py::none();
            if (!closure.is_none()) {
              autograd::GradModeGuard grad(true);
              loss = closure();
            }
            o.step();
            return loss;
          },
          py::arg("closure") = py::none())
      .def("zero_grad", &Optimizer::zero_grad, py::arg("set_to_none") = true)
      .def_property_readonly("param_groups",
                             [](const std::shared_ptr<Optimizer>& o) {
                               py::list out;
                               for (size_t i = 0; i < o->param_groups().size(); ++i)
                                 out.append(GroupView{o, i});
                               return out;
                             })
      .def("_initial_lrs", &Optimizer::initial_lrs,
           "Each group's lr before any scheduler (torch's group['initial_lr']).")
      .def("_set_initial_lrs", &Optimizer::set_initial_lrs, py::arg("lrs"))
      .def("add_param_group",
           [](Optimizer& o, const py::dict& d) { o.add_param_group(group_of(d)); })
      .def_property_readonly("defaults",
                             [](const Optimizer& o) {
                               py::dict out;
                               for (const auto& [k, v] : o.defaults()) out[py::str(k)] = v;
                               return out;
                             })
      .def(
          "state",
          [](const Optimizer& o, const Tensor& p) -> py::object {
            const optim::ParamState* s = o.state(p);
            if (!s) return py::none();
            py::dict out;
            out["step"] = s->step;
            for (const auto& [k, v] : s->buffers) out[py::str(k)] = v;
            return out;
          },
          py::arg("param"), "The per-parameter state (step and buffers), None before a step.")
      .def("state_dict", &optimizer_state_to_python, "torch's layout: state and param_groups.")
      .def("load_state_dict", [](Optimizer& o, const py::dict& d) {
        o.load_state_dict(optimizer_state_from_python(o, d));
      });

  py::class_<optim::SGD, Optimizer, std::shared_ptr<optim::SGD>>(m, "SGD").def(
      py::init([](py::handle params, double lr, double momentum, double dampening,
                  double weight_decay, bool nesterov, bool maximize) {
        return std::make_shared<optim::SGD>(
            param_groups_of(params),
            optim::SGDOptions{lr, momentum, dampening, weight_decay, nesterov, maximize});
      }),
      py::arg("params"), py::arg("lr") = 1e-3, py::arg("momentum") = 0.0,
      py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0, py::arg("nesterov") = false,
      py::kw_only(), py::arg("maximize") = false);
  auto adam_options = [](double lr, std::pair<double, double> betas, double eps,
                         std::optional<double> wd, bool amsgrad, bool maximize) {
    return optim::AdamOptions{lr, betas.first, betas.second, eps, wd, amsgrad, maximize};
  };
  py::class_<optim::Adam, Optimizer, std::shared_ptr<optim::Adam>>(m, "Adam").def(
      py::init([adam_options](py::handle params, double lr, std::pair<double, double> betas,
                              double eps, std::optional<double> wd, bool amsgrad, bool maximize) {
        return std::make_shared<optim::Adam>(param_groups_of(params),
                                             adam_options(lr, betas, eps, wd, amsgrad, maximize));
      }),
      py::arg("params"), py::arg("lr") = 1e-3,
      py::arg("betas") = std::pair<double, double>(0.9, 0.999), py::arg("eps") = 1e-8,
      py::arg("weight_decay") = py::none(), py::arg("amsgrad") = false, py::kw_only(),
      py::arg("maximize") = false);
  py::class_<optim::AdamW, optim::Adam, std::shared_ptr<optim::AdamW>>(m, "AdamW")
      .def(py::init([adam_options](py::handle params, double lr, std::pair<double, double> betas,
                                   double eps, std::optional<double> wd, bool amsgrad,
                                   bool maximize) {
             return std::make_shared<optim::AdamW>(
                 param_groups_of(params), adam_options(lr, betas, eps, wd, amsgrad, maximize));
           }),
           py::arg("params"), py::arg("lr") = 1e-3,
           py::arg("betas") = std::pair<double, double>(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = py::none(), py::arg("amsgrad") = false, py::kw_only(),
           py::arg("maximize") = false);
  m.def(
      "weight_decay_param_groups",
      [](py::handle params, double weight_decay) {
        py::list out;
        for (const ParamGroup& g :
             optim::weight_decay_param_groups(tensors_of(params), weight_decay)) {
          py::dict d;
          d["params"] = g.params;
          for (const auto& [k, v] : g.options) d[py::str(k)] = v;
          out.append(d);
        }
        return out;
      },
      py::arg("params"), py::arg("weight_decay"),
      "Param-group dicts: weight decay for params with dim >= 2, none for the rest.");
}

void bind_schedulers(py::module_& m) {
  using optim::LRScheduler;
  // Schedulers hold a reference to their optimizer: keep_alive ties the two objects.
  py::class_<LRScheduler>(m, "LRScheduler",
                          "lr = schedule(step, base_lr, group) after each step().")
      .def(py::init([](Optimizer& o, py::function schedule) {
             return std::make_unique<LRScheduler>(
                 o, [schedule](int64_t step, double base_lr, size_t group) {
                   py::gil_scoped_acquire gil;
                   return schedule(step, base_lr, group).cast<double>();
                 });
           }),
           py::arg("optimizer"), py::arg("schedule"), py::keep_alive<1, 2>())
      .def(
          "step",
          [](LRScheduler& s, std::optional<int64_t> epoch) {
            if (epoch)
              s.step(*epoch);
            else
              s.step();
          },
          py::arg("epoch") = py::none())
      .def("get_last_lr", &LRScheduler::last_lr)
      .def_property("last_epoch", &LRScheduler::last_step, &LRScheduler::set_last_step)
      .def_property_readonly("optimizer", &LRScheduler::optimizer,
                             py::return_value_policy::reference)
      .def_property_readonly("base_lrs", &LRScheduler::base_lrs)
      .def("state_dict", [](const LRScheduler& s) { return flat_state_to_python(s.state_dict()); })
      .def("load_state_dict",
           [](LRScheduler& s, const py::dict& d) { s.load_state_dict(flat_state_from_python(d)); });
  py::class_<optim::StepLR, LRScheduler>(m, "StepLR")
      .def(py::init<Optimizer&, int64_t, double>(), py::arg("optimizer"), py::arg("step_size"),
           py::arg("gamma") = 0.1, py::keep_alive<1, 2>());
  py::class_<optim::LambdaLR, LRScheduler>(m, "LambdaLR")
      .def(py::init([](Optimizer& o, py::function factor) {
             return std::make_unique<optim::LambdaLR>(o, [factor](int64_t step) {
               py::gil_scoped_acquire gil;
               return factor(step).cast<double>();
             });
           }),
           py::arg("optimizer"), py::arg("lr_lambda"), py::keep_alive<1, 2>());
  py::class_<optim::WarmupCosineLR, LRScheduler>(m, "WarmupCosineLR")
      .def(py::init<Optimizer&, int64_t, int64_t, double>(), py::arg("optimizer"),
           py::arg("warmup_steps"), py::arg("max_steps"), py::arg("min_lr") = 0.0,
           py::keep_alive<1, 2>());
}

}  // namespace

void init_optim(py::module_& m) {
  py::module_ o = m.def_submodule("optim", "Optimizers, lr schedulers and gradient clipping.");
  bind_optimizers(o);
  bind_schedulers(o);
  o.def(
      "clip_grad_norm_",
      [](py::handle params, double max_norm, double norm_type, bool error_if_nonfinite) {
        return optim::clip_grad_norm_(tensors_of(params), max_norm, norm_type, error_if_nonfinite);
      },
      py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0,
      py::arg("error_if_nonfinite") = false,
      "Scales grads so their total norm is at most max_norm; returns the norm before clipping.");
  o.def(
      "grad_norm",
      [](py::handle params, double norm_type) {
        return optim::grad_norm(tensors_of(params), norm_type);
      },
      py::arg("parameters"), py::arg("norm_type") = 2.0);
}

}  // namespace tessera::python
