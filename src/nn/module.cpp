#include "tessera/nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <sstream>
#include <typeinfo>
#include <unordered_map>
#include <utility>

#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"

namespace tessera::nn {

namespace detail {
// Hooks in registration order; ids let a HookHandle find its entry after others were removed.
struct ForwardHooks {
  uint64_t next_id = 0;
  std::vector<std::pair<uint64_t, ForwardPreHook>> pre;
  std::vector<std::pair<uint64_t, ForwardHook>> post;
};
}  // namespace detail

namespace {

template <class List>
void erase_id(List& list, uint64_t id) {
  std::erase_if(list, [id](const auto& entry) { return entry.first == id; });
}

// Points `target`'s TensorImpl at `source`'s data (storage, strides, dtype), keeping autograd
// metadata, so every handle sharing the impl sees the new data.
void swap_data(const Tensor& target, const Tensor& source) {
  target.impl()->set_data(source.impl()->storage(), source.sizes(), source.strides(),
                          source.storage_offset(), source.dtype());
}

}  // namespace

void HookHandle::remove() {
  if (auto hooks = hooks_.lock()) {
    erase_id(hooks->pre, id_);
    erase_id(hooks->post, id_);
  }
  hooks_.reset();
}

std::string LoadStateDictReport::str() const {
  std::ostringstream os;
  const char* sep = "";
  if (!missing_keys.empty()) {
    os << "missing keys " << tessera::detail::str(missing_keys);
    sep = "; ";
  }
  if (!unexpected_keys.empty()) {
    os << sep << "unexpected keys " << tessera::detail::str(unexpected_keys);
    sep = "; ";
  }
  if (!mismatched_keys.empty()) {
    os << sep << "shape mismatches [";
    for (size_t i = 0; i < mismatched_keys.size(); ++i) {
      const ShapeMismatch& m = mismatched_keys[i];
      os << (i ? ", " : "") << m.key << ": expected " << tessera::detail::str(m.expected)
         << ", got " << tessera::detail::str(m.got);
    }
    os << "]";
  }
  return ok() ? "all keys matched" : os.str();
}

// ---- registration ----

void Module::check_new_name(const std::string& name, std::string_view op) const {
  TESSERA_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, "[", op,
                "] expected a non-empty name without '.', got '", name, "'");
  TESSERA_CHECK(
      !parameters_.contains(name) && !buffers_.contains(name) && !children_.contains(name),
      ValueError, "[", op, "] expected a name not yet used in ", type_name(), ", got '", name,
      "' again");
}

Tensor& Module::register_parameter(std::string name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "register_parameter");
  TESSERA_CHECK(tensor.defined(), ValueError,
                "[register_parameter] expected a defined tensor for '", name,
                "', got an undefined one");
  TESSERA_CHECK(tensor.is_leaf(), ValueError, "[register_parameter] expected a leaf tensor for '",
                name, "', got the output of ", tensor.grad_fn()->name(),
                " (detach() it or build it under NoGradGuard)");
  tensor.requires_grad_(requires_grad);
  return parameters_.insert(std::move(name), std::move(tensor));
}

Tensor& Module::register_buffer(std::string name, Tensor tensor, bool persistent) {
  check_new_name(name, "register_buffer");
  TESSERA_CHECK(tensor.defined(), ValueError, "[register_buffer] expected a defined tensor for '",
                name, "', got an undefined one");
  if (!persistent) non_persistent_buffers_.insert(name);
  return buffers_.insert(std::move(name), std::move(tensor));
}

Tensor& Module::replace_parameter(const std::string& name, Tensor tensor) {
  Tensor* slot = parameters_.find(name);
  TESSERA_CHECK(slot != nullptr, ValueError, "[replace_parameter] expected a parameter of ",
                type_name(), ", got '", name, "' (parameters: ", parameters_.keys(), ")");
  TESSERA_CHECK(tensor.defined() && tensor.is_leaf(), ValueError,
                "[replace_parameter] expected a defined leaf tensor for '", name,
                "', got an undefined or non-leaf one");
  return *slot = std::move(tensor);
}

Tensor& Module::replace_buffer(const std::string& name, Tensor tensor) {
  Tensor* slot = buffers_.find(name);
  TESSERA_CHECK(slot != nullptr, ValueError, "[replace_buffer] expected a buffer of ", type_name(),
                ", got '", name, "' (buffers: ", buffers_.keys(), ")");
  TESSERA_CHECK(tensor.defined(), ValueError, "[replace_buffer] expected a defined tensor for '",
                name, "', got an undefined one");
  return *slot = std::move(tensor);
}

void Module::add_child(std::string name, std::shared_ptr<Module> module) {
  check_new_name(name, "register_module");
  TESSERA_CHECK(module != nullptr, ValueError, "[register_module] expected a module for '", name,
                "', got nullptr");
  children_.insert(std::move(name), std::move(module));
}

void Module::swap_child(const std::string& name, std::shared_ptr<Module> module) {
  std::shared_ptr<Module>* slot = children_.find(name);
  TESSERA_CHECK(slot != nullptr, ValueError, "[replace_module] expected a child of ", type_name(),
                ", got '", name, "' (children: ", children_.keys(), ")");
  TESSERA_CHECK(module != nullptr, ValueError, "[replace_module] expected a module for '", name,
                "', got nullptr");
  *slot = std::move(module);
}

// ---- traversal ----

void Module::visit(const std::string& prefix, const Visitor& fn, bool dedupe) const {
  std::unordered_set<const Module*> seen;
  // Explicit recursion through a lambda keeps `seen` shared across the walk.
  std::function<void(const std::string&, const Module&)> walk = [&](const std::string& p,
                                                                    const Module& m) {
    if (dedupe && !seen.insert(&m).second) return;
    fn(p, m);
    for (const auto& [name, child] : m.children_) walk(p + name + ".", *child);
  };
  walk(prefix, *this);
}

TensorDict Module::collect(bool params, bool recurse, bool dedupe_tensors) const {
  TensorDict out;
  std::unordered_set<const TensorImpl*> seen;
  auto add_own = [&](const std::string& prefix, const Module& m) {
    const TensorDict& own = params ? m.parameters_ : m.buffers_;
    for (const auto& [name, t] : own) {
      if (dedupe_tensors && !seen.insert(t.impl()).second) continue;
      out.insert(prefix + name, t);
    }
  };
  if (recurse)
    visit("", add_own, /*dedupe=*/true);
  else
    add_own("", *this);
  return out;
}

TensorDict Module::named_parameters(bool recurse) const { return collect(true, recurse, true); }
TensorList Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }
TensorDict Module::named_buffers(bool recurse) const { return collect(false, recurse, true); }
TensorList Module::buffers(bool recurse) const { return named_buffers(recurse).values(); }

OrderedDict<std::shared_ptr<Module>> Module::named_modules() {
  std::shared_ptr<Module> self = weak_from_this().lock();
  TESSERA_CHECK(self != nullptr, RuntimeError, "[named_modules] expected a ", type_name(),
                " owned by a std::shared_ptr (std::make_shared), got one that is not");
  OrderedDict<std::shared_ptr<Module>> out;
  // The walk visits each module once under its first name; prefix is "a.b." for module "a.b".
  visit(
      "",
      [&](const std::string& prefix, const Module& m) {
        std::string name = prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1);
        out.insert(std::move(name), std::const_pointer_cast<Module>(m.shared_from_this()));
      },
      /*dedupe=*/true);
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  std::unordered_set<const Module*> seen;
  std::function<void(Module&)> walk = [&](Module& m) {
    if (!seen.insert(&m).second) return;
    for (auto& [_, child] : m.children_) walk(*child);
    fn(m);
  };
  walk(*this);
  return *this;
}

// ---- state ----

TensorDict Module::persistent_tensors() const {
  TensorDict out;
  // No module dedupe: a shared submodule's tensors appear under each of its names, as torch.
  visit(
      "",
      [&](const std::string& prefix, const Module& m) {
        for (const auto& [name, t] : m.parameters_) out.insert(prefix + name, t);
        for (const auto& [name, t] : m.buffers_) {
          if (!m.non_persistent_buffers_.count(name)) out.insert(prefix + name, t);
        }
      },
      /*dedupe=*/false);
  return out;
}

TensorDict Module::state_dict() const {
  TensorDict out = persistent_tensors();
  for (auto& [_, t] : out) t = t.detach();
  return out;
}

LoadStateDictReport Module::load_state_dict(const TensorDict& state, bool strict,
                                            bool skip_mismatched_shapes) {
  TensorDict own = persistent_tensors();  // not detached: we write into them
  LoadStateDictReport report;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source)
  for (const auto& [key, dst] : own) {
    const Tensor* src = state.find(key);
    if (src == nullptr) {
      report.missing_keys.push_back(key);
    } else if (!src->defined() || src->sizes() != dst.sizes()) {
      report.mismatched_keys.push_back({key, dst.sizes(), src->defined() ? src->sizes() : Shape{}});
    } else {
      copies.emplace_back(dst, *src);
    }
  }
  for (const auto& [key, _] : state) {
    if (!own.contains(key)) report.unexpected_keys.push_back(key);
  }
  const bool keys_ok = !strict || (report.missing_keys.empty() && report.unexpected_keys.empty());
  const bool shapes_ok = skip_mismatched_shapes || report.mismatched_keys.empty();
  TESSERA_CHECK(keys_ok && shapes_ok, ValueError, "[load_state_dict] expected the keys of ",
                type_name(), " with matching shapes, got ", report.str());
  autograd::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src);
  return report;
}

// ---- mode, dtype, gradients ----

Module& Module::train(bool on) {
  return apply([on](Module& m) { m.training_ = on; });
}

void Module::convert_tensors(const std::function<Tensor(const Tensor&)>& convert,
                             bool floating_only) {
  autograd::NoGradGuard no_grad;
  std::unordered_set<const TensorImpl*> seen;
  visit(
      "",
      [&](const std::string&, const Module& m) {
        for (const TensorDict* dict : {&m.parameters_, &m.buffers_}) {
          for (const auto& [_, t] : *dict) {
            if (!seen.insert(t.impl()).second || (floating_only && !t.is_floating_point()))
              continue;
            swap_data(t, convert(t.detach()));
            if (Tensor g = t.grad(); g.defined()) swap_data(g, convert(g.detach()));
          }
        }
      },
      /*dedupe=*/true);
}

Module& Module::to(DType dtype) {
  TESSERA_CHECK(is_floating(dtype), TypeError, "[Module::to] expected a floating dtype, got ",
                dtype);
  convert_tensors([dtype](const Tensor& t) { return t.to(dtype); }, /*floating_only=*/true);
  return *this;
}

Module& Module::to(Device device) {
  convert_tensors([device](const Tensor& t) { return t.to(device); }, /*floating_only=*/false);
  return *this;
}

Device Module::device() const {
  for (const Tensor& p : parameters()) return p.device();
  for (const auto& [name, b] : named_buffers()) return b.device();
  return kCPU;
}

void Module::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  for (const Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      g.zero_();
  }
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) {
    if (!trainable_only || p.requires_grad()) n += p.numel();
  }
  return n;
}

// ---- hooks ----

HookHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  if (!hooks_) hooks_ = std::make_shared<detail::ForwardHooks>();
  uint64_t id = hooks_->next_id++;
  hooks_->pre.emplace_back(id, std::move(hook));
  return HookHandle(hooks_, id);
}

HookHandle Module::register_forward_hook(ForwardHook hook) {
  if (!hooks_) hooks_ = std::make_shared<detail::ForwardHooks>();
  uint64_t id = hooks_->next_id++;
  hooks_->post.emplace_back(id, std::move(hook));
  return HookHandle(hooks_, id);
}

bool Module::has_forward_hooks() const {
  return hooks_ && (!hooks_->pre.empty() || !hooks_->post.empty());
}

std::vector<ForwardPreHook> Module::forward_pre_hooks() const {
  std::vector<ForwardPreHook> out;
  if (hooks_)
    for (const auto& [_, hook] : hooks_->pre) out.push_back(hook);
  return out;
}

std::vector<ForwardHook> Module::forward_hooks() const {
  std::vector<ForwardHook> out;
  if (hooks_)
    for (const auto& [_, hook] : hooks_->post) out.push_back(hook);
  return out;
}

Tensor Module::call_with_hooks(TensorList inputs,
                               const std::function<Tensor(const TensorList&)>& forward) {
  if (!has_forward_hooks()) return forward(inputs);
  // Copies, so a hook may remove itself (or register another) while the lists are walked.
  auto pre = hooks_->pre;
  for (auto& [_, hook] : pre) {
    if (std::optional<TensorList> replaced = hook(*this, inputs)) inputs = std::move(*replaced);
  }
  Tensor output = forward(inputs);
  auto post = hooks_->post;
  for (auto& [_, hook] : post) {
    if (std::optional<Tensor> replaced = hook(*this, inputs, output)) output = std::move(*replaced);
  }
  return output;
}

Tensor UnaryModule::operator()(const Tensor& x) {
  if (!has_forward_hooks()) return forward(x);
  return call_with_hooks({x}, [this](const TensorList& in) { return forward(in.at(0)); });
}

// ---- printing ----

std::string Module::type_name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // Drop namespaces but keep template arguments intact: cut at the last "::" before any '<'.
  size_t angle = name.find('<');
  size_t colon = name.rfind("::", angle);
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

std::string Module::repr() const {
  std::string out = type_name() + "(" + extra_repr();
  if (children_.empty()) return out + ")";
  out += "\n";
  for (const auto& [name, child] : children_) {
    std::string sub = child->repr();
    // Indent the child's continuation lines under its "(name): " entry.
    for (size_t pos = sub.find('\n'); pos != std::string::npos; pos = sub.find('\n', pos + 3))
      sub.replace(pos, 1, "\n  ");
    out += "  (" + name + "): " + sub + "\n";
  }
  return out + ")";
}

}  // namespace tessera::nn
