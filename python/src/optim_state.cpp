// Optimizer state dicts in torch's layout, so that checkpoints move between the frameworks:
//   {"state": {i: {"step": tensor, "exp_avg": ..., ...}},
//    "param_groups": [{"lr": ..., "betas": (b1, b2), "amsgrad": False, ..., "params": [i, ...]}]}
// The C++ optimizer keeps a flat StateDict ("state.<i>.<buffer>", "param_groups.<g>.<option>");
// this file maps between the two. Loading also takes the flat layout, which LR schedulers use.
#include "bind.h"

namespace tessera::python {

namespace {

// Options torch stores as booleans.
bool is_flag(const std::string& key) {
  return key == "amsgrad" || key == "maximize" || key == "nesterov";
}

}  // namespace

py::dict flat_state_to_python(const optim::StateDict& s) {
  py::dict tensors, scalars;
  for (const auto& [k, v] : s.tensors) tensors[py::str(k)] = v;
  for (const auto& [k, v] : s.scalars) scalars[py::str(k)] = v;
  py::dict out;
  out["tensors"] = tensors;
  out["scalars"] = scalars;
  return out;
}

optim::StateDict flat_state_from_python(const py::dict& d) {
  optim::StateDict s;
  if (d.contains("tensors"))
    for (auto [k, v] : d["tensors"].cast<py::dict>()) s.tensors.insert(py::str(k), to_tensor(v));
  if (d.contains("scalars"))
    for (auto [k, v] : d["scalars"].cast<py::dict>())
      s.scalars.insert(py::str(k), v.cast<double>());
  return s;
}

py::dict optimizer_state_to_python(const optim::Optimizer& o) {
  py::dict state;
  py::list groups;
  int64_t index = 0;
  for (const optim::ParamGroup& g : o.param_groups()) {
    py::dict group;
    for (const auto& [key, value] : g.options) {
      if (key == "beta2") continue;
      if (key == "beta1") group["betas"] = py::make_tuple(value, g.options.at("beta2"));
      else if (is_flag(key)) group[py::str(key)] = py::bool_(value != 0);
      else group[py::str(key)] = value;
    }
    py::list params;
    for (const Tensor& p : g.params) {
      if (const optim::ParamState* s = o.state(p)) {
        py::dict entry;
        entry["step"] = scalar_tensor(static_cast<double>(s->step), TensorOptions(kFloat32));
        for (const auto& [name, buffer] : s->buffers) entry[py::str(name)] = buffer;
        state[py::int_(index)] = entry;
      }
      params.append(index++);
    }
    group["params"] = params;
    groups.append(group);
  }
  py::dict out;
  out["state"] = state;
  out["param_groups"] = groups;
  return out;
}

optim::StateDict optimizer_state_from_python(const optim::Optimizer& o, const py::dict& d) {
  if (!d.contains("param_groups")) return flat_state_from_python(d);
  optim::StateDict s;
  TESSERA_CHECK(d.contains("state"), ValueError,
                "[load_state_dict] expected an optimizer state dict with 'state' and "
                "'param_groups'");
  py::list groups = d["param_groups"].cast<py::list>();
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    for (auto [k, v] : groups[g].cast<py::dict>()) {
      const std::string key = py::str(k);
      if (key == "params") {
        s.scalars.insert(prefix + "num_params", static_cast<double>(py::len(v)));
      } else if (key == "betas") {
        auto betas = v.cast<std::pair<double, double>>();
        s.scalars.insert(prefix + "beta1", betas.first);
        s.scalars.insert(prefix + "beta2", betas.second);
      } else if (o.defaults().contains(key) && !v.is_none()) {
        // torch's own switches (foreach, fused, capturable, ...) are not options here.
        s.scalars.insert(prefix + key, v.cast<double>());
      }
    }
  }
  for (auto [i, entry] : d["state"].cast<py::dict>()) {
    const std::string prefix = "state." + std::string(py::str(i)) + ".";
    for (auto [k, v] : entry.cast<py::dict>()) {
      const std::string key = py::str(k);
      if (key == "step")
        s.scalars.insert(prefix + key, py::isinstance<Tensor>(v) ? v.cast<Tensor>().item<double>()
                                                                 : v.cast<double>());
      else
        s.tensors.insert(prefix + key, to_tensor(v));
    }
  }
  return s;
}

}  // namespace tessera::python
