#include "tessera/optim/optimizer.h"

#include <charconv>
#include <unordered_set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/optim/clip_grad.h"

namespace tessera::optim {

namespace {

// "state.<i>.<rest>" -> (i, rest); false when key does not have that form.
bool parse_indexed_key(const std::string& key, std::string_view prefix, int64_t& index,
                       std::string& rest) {
  if (key.rfind(prefix, 0) != 0) return false;
  const char* begin = key.data() + prefix.size();
  const char* end = key.data() + key.size();
  if (begin == end || *begin == '-') return false;  // from_chars takes a sign; indices have none
  auto [ptr, ec] = std::from_chars(begin, end, index);
  if (ec != std::errc() || ptr == begin || ptr == end || *ptr != '.') return false;
  rest.assign(ptr + 1, end);
  return !rest.empty();
}

}  // namespace

DType state_dtype(DType param_dtype) {
  return is_16bit_float(param_dtype) ? kFloat32 : param_dtype;
}

void Optimizer::check_option(bool ok, const char* what, double value) const {
  TESSERA_CHECK(ok, ValueError, "[", name_, "] expected ", what, ", got ", value);
}

const std::vector<double>& Optimizer::initial_lrs() {
  for (size_t g = initial_lrs_.size(); g < groups_.size(); ++g)
    initial_lrs_.push_back(groups_[g].options.at("lr"));
  return initial_lrs_;
}

void Optimizer::set_initial_lrs(std::vector<double> lrs) {
  TESSERA_CHECK(lrs.size() == groups_.size(), ValueError, "[", name_,
                ".set_initial_lrs] expected one lr per param group (", groups_.size(), "), got ",
                lrs.size());
  initial_lrs_ = std::move(lrs);
}

void Optimizer::insert_group(ParamGroup group) {
  std::unordered_set<const TensorImpl*> known;
  for (const ParamGroup& g : groups_) {
    for (const Tensor& p : g.params) known.insert(p.impl());
  }
  for (const Tensor& p : group.params) {
    TESSERA_CHECK(p.defined(), ValueError, "[", name_,
                  "] expected defined tensors as parameters, got an undefined one");
    TESSERA_CHECK(p.is_floating_point() && p.is_leaf(), ValueError, "[", name_,
                  "] expected floating-point leaf tensors as parameters, got a ", p.dtype(),
                  p.is_leaf() ? " leaf" : " non-leaf", " of shape ", p.sizes());
    TESSERA_CHECK(known.insert(p.impl()).second, ValueError, "[", name_,
                  "] expected each parameter in one group only, got one of shape ", p.sizes(),
                  " twice");
  }
  for (const auto& [key, _] : group.options) {
    TESSERA_CHECK(defaults_.contains(key), ValueError, "[", name_, "] expected options among ",
                  defaults_.keys(), ", got '", key, "'");
  }
  // Complete the options in the defaults' order, so every group lists them the same way.
  Options options;
  for (const auto& [key, value] : defaults_) {
    const double* given = group.options.find(key);
    options.insert(key, given ? *given : value);
  }
  check_options(options);
  group.options = std::move(options);
  groups_.push_back(std::move(group));
}

void Optimizer::add_initial_groups(std::vector<ParamGroup> groups) {
  size_t count = 0;
  for (ParamGroup& g : groups) {
    count += g.params.size();
    insert_group(std::move(g));
  }
  TESSERA_CHECK(count > 0, ValueError, "[", name_, "] expected at least one parameter, got none");
}

const ParamState* Optimizer::state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? nullptr : &it->second;
}

void Optimizer::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  for (const ParamGroup& g : groups_) {
    for (const Tensor& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none)
        p.set_grad(Tensor());
      else
        grad.zero_();
    }
  }
}

void Optimizer::step() {
  autograd::NoGradGuard no_grad;
  for (const ParamGroup& g : groups_) {
    std::vector<Update> updates;
    TensorList stepped;  // the parameter of each update
    for (const Tensor& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      // Kernels want contiguous data: a strided parameter is updated through a copy.
      updates.push_back({p.is_contiguous() ? p : p.contiguous(), grad.to(p.dtype()).contiguous(),
                         &state_[p.impl()]});
      stepped.push_back(p);
    }
    update_group(updates, g.options);
    for (size_t i = 0; i < updates.size(); ++i) {
      Tensor p = stepped[i];
      if (!updates[i].param.is_same(p))
        p.copy_(updates[i].param);
      else
        p.bump_version();  // the kernel wrote raw memory; saved copies of p are now stale
    }
  }
}

void Optimizer::update_group(const std::vector<Update>& updates, const Options& options) {
  for (const Update& u : updates) update(u.param, u.grad, options, *u.state);
}

Tensor Optimizer::clip_grad_norm_(double max_norm) {
  TensorList params;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params)
      if (p.grad().defined()) params.push_back(p);
  return max_norm > 0 ? optim::clip_grad_norm_(params, max_norm) : grad_norm(params);
}

Tensor Optimizer::state_buffer(ParamState& state, const std::string& name, const Tensor& param) {
  DType dtype = state_dtype(param.dtype());
  Tensor* buf = state.buffers.find(name);
  if (buf == nullptr) {
    return state.buffers.insert(
        name, zeros(param.sizes(), TensorOptions(dtype).with_device(param.device())));
  }
  if (buf->dtype() != dtype || buf->device() != param.device()) {
    *buf = buf->to(dtype).to(param.device()).contiguous();
  }
  return *buf;
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string group_prefix = "param_groups." + std::to_string(g) + ".";
    for (const auto& [key, value] : groups_[g].options)
      out.scalars.insert(group_prefix + key, value);
    out.scalars.insert(group_prefix + "num_params", static_cast<double>(groups_[g].params.size()));
    for (const Tensor& p : groups_[g].params) {
      std::string prefix = "state." + std::to_string(index++) + ".";
      const ParamState* s = state(p);
      if (s == nullptr) continue;
      out.scalars.insert(prefix + "step", static_cast<double>(s->step));
      for (const auto& [name, buf] : s->buffers) out.tensors.insert(prefix + name, buf);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const StateDict& sd) {
  // Validate everything before changing anything.
  TensorList params;
  std::vector<Options> options(groups_.size(), Options());
  for (const ParamGroup& g : groups_) params.insert(params.end(), g.params.begin(), g.params.end());
  std::vector<ParamState> states(params.size());
  std::vector<bool> has_state(params.size(), false);
  for (const auto& [key, value] : sd.scalars) {
    int64_t i = 0;
    std::string rest;
    if (parse_indexed_key(key, "param_groups.", i, rest)) {
      TESSERA_CHECK(i < static_cast<int64_t>(groups_.size()), ValueError, "[", name_,
                    ".load_state_dict] expected ", groups_.size(), " param groups, got key '", key,
                    "'");
      if (rest == "num_params") {
        TESSERA_CHECK(value == static_cast<double>(groups_[i].params.size()), ValueError, "[",
                      name_, ".load_state_dict] expected ", groups_[i].params.size(),
                      " params in group ", i, ", got ", value);
      } else {
        TESSERA_CHECK(defaults_.contains(rest), ValueError, "[", name_,
                      ".load_state_dict] expected options among ", defaults_.keys(), ", got '", key,
                      "'");
        options[i].insert(rest, value);
      }
    } else if (parse_indexed_key(key, "state.", i, rest) && rest == "step" &&
               i < static_cast<int64_t>(params.size())) {
      states[i].step = static_cast<int64_t>(value);
      has_state[i] = true;
    } else {
      throw ValueError(tessera::detail::str(
          "[", name_,
          ".load_state_dict] expected scalar keys 'param_groups.<g>.<option>' or "
          "'state.<i>.step' (i < ",
          params.size(), "), got '", key, "'"));
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    TESSERA_CHECK(options[g].size() == defaults_.size(), ValueError, "[", name_,
                  ".load_state_dict] expected the options ", defaults_.keys(), " for group ", g,
                  ", got ", options[g].keys());
    check_options(options[g]);
  }
  for (const auto& [key, t] : sd.tensors) {
    int64_t i = 0;
    std::string rest;
    bool ok = parse_indexed_key(key, "state.", i, rest) && i < static_cast<int64_t>(params.size());
    TESSERA_CHECK(ok, ValueError, "[", name_,
                  ".load_state_dict] expected tensor keys "
                  "'state.<i>.<buffer>' (i < ",
                  params.size(), "), got '", key, "'");
    const Tensor& p = params[i];
    TESSERA_CHECK(t.defined() && t.sizes() == p.sizes(), ValueError, "[", name_,
                  ".load_state_dict] expected '", key, "' of shape ", p.sizes(), ", got ",
                  t.defined() ? t.shape_str() : "an undefined tensor");
    autograd::NoGradGuard no_grad;
    // A copy, so the optimizer never writes into the caller's (or a file's) memory.
    states[i].buffers.insert(rest, t.detach().to(state_dtype(p.dtype())).to(p.device()).clone());
    has_state[i] = true;
  }

  for (size_t g = 0; g < groups_.size(); ++g) {
    // Keep the defaults' order whatever order the file had.
    Options ordered;
    for (const auto& [key, _] : defaults_) ordered.insert(key, options[g].at(key));
    groups_[g].options = std::move(ordered);
  }
  state_.clear();
  for (size_t i = 0; i < params.size(); ++i) {
    if (has_state[i]) state_[params[i].impl()] = std::move(states[i]);
  }
}

std::vector<ParamGroup> weight_decay_param_groups(const TensorList& params, double weight_decay) {
  ParamGroup decay{{}, {{"weight_decay", weight_decay}}};
  ParamGroup no_decay{{}, {{"weight_decay", 0.0}}};
  for (const Tensor& p : params) {
    if (!p.requires_grad()) continue;
    (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  }
  return {std::move(decay), std::move(no_decay)};
}

}  // namespace tessera::optim
