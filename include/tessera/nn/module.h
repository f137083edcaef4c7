#pragma once
// nn::Module: the base of every layer and model. A module owns parameters, buffers and child
// modules, registered in its constructor and kept in insertion order, so names and state dicts
// match PyTorch's ("h.0.attn.c_attn.weight"). Modules are held by std::shared_ptr:
//
//   struct Block : nn::Module {
//     std::shared_ptr<nn::Linear> fc;
//     Tensor scale;
//     Block() {
//       fc = register_module("fc", std::make_shared<nn::Linear>(4, 4));
//       scale = register_parameter("scale", ones({4}));
//     }
//     Tensor operator()(const Tensor& x) { return (*fc)(x) * scale; }
//   };
//
// Member tensors are handles aliasing the registered ones; to() swaps the data inside the same
// TensorImpl, so members, tied weights and optimizer references all see the change.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/ordered_dict.h"

namespace tessera::nn {

class Module;

// Runs before forward; returning a list replaces the inputs.
using ForwardPreHook = std::function<std::optional<TensorList>(Module&, const TensorList& inputs)>;
// Runs after forward; returning a tensor replaces the output.
using ForwardHook =
    std::function<std::optional<Tensor>(Module&, const TensorList& inputs, const Tensor& output)>;

namespace detail {
struct ForwardHooks;
}

// Returned by register_forward_(pre_)hook; remove() unregisters the hook (a no-op once removed or
// once the module is gone).
class HookHandle {
 public:
  HookHandle() = default;
  void remove();

 private:
  friend class Module;
  HookHandle(std::weak_ptr<detail::ForwardHooks> hooks, uint64_t id)
      : hooks_(std::move(hooks)), id_(id) {}
  std::weak_ptr<detail::ForwardHooks> hooks_;
  uint64_t id_ = 0;
};

// What load_state_dict found: keys the module has but the state lacks, keys the state has but
// the module lacks, and keys whose shapes differ (those are never loaded).
struct LoadStateDictReport {
  struct ShapeMismatch {
    std::string key;
    Shape expected, got;
  };
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
  std::vector<ShapeMismatch> mismatched_keys;

  bool ok() const {
    return missing_keys.empty() && unexpected_keys.empty() && mismatched_keys.empty();
  }
  // "missing keys [a, b]; unexpected keys [c]; shape mismatches [w: expected [2], got [3]]".
  std::string str() const;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  // Copying would silently alias every parameter; clone a module by building a new one and
  // loading the state dict.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- registration (names: non-empty, no '.', unique within this module) ----

  // Registers a leaf tensor as a parameter (requires_grad set as given); returns the stored
  // handle, which aliases `tensor`.
  Tensor& register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  // Registers state that is not trained (running stats, masks, rope tables). Non-persistent
  // buffers follow to() but stay out of state_dict().
  Tensor& register_buffer(std::string name, Tensor tensor, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module expects a Module subclass");
    add_child(std::move(name), module);
    return module;
  }
  // Re-points an existing parameter at another tensor, e.g. weight tying:
  //   lm_head->weight = lm_head->replace_parameter("weight", wte->weight);
  Tensor& replace_parameter(const std::string& name, Tensor tensor);
  // Re-points an existing buffer at another tensor (Python's self.running_mean = ...).
  Tensor& replace_buffer(const std::string& name, Tensor tensor);
  // Swaps an existing child for another module (adapters, LoRA); returns the new one.
  template <class M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "replace_module expects a Module subclass");
    swap_child(name, module);
    return module;
  }

  // ---- traversal (pre-order: own entries first, then each child under "child.") ----

  // Each tensor once, under the first name that reaches it (tied weights appear once), as torch.
  TensorDict named_parameters(bool recurse = true) const;
  TensorList parameters(bool recurse = true) const;
  TensorDict named_buffers(bool recurse = true) const;
  TensorList buffers(bool recurse = true) const;
  const OrderedDict<std::shared_ptr<Module>>& named_children() const { return children_; }
  std::vector<std::shared_ptr<Module>> children() const { return children_.values(); }
  // This module (name "") and every descendant, each once. This module must be owned by a
  // std::shared_ptr.
  OrderedDict<std::shared_ptr<Module>> named_modules();
  std::vector<std::shared_ptr<Module>> modules() { return named_modules().values(); }
  // Calls fn on every descendant and then on this module (torch's order), each once.
  Module& apply(const std::function<void(Module&)>& fn);

  // ---- state ----

  // Parameters and persistent buffers (detached, sharing storage), tied tensors under every
  // name, as torch.
  TensorDict state_dict() const;
  // Copies matching entries into this module's tensors (casting dtype). Any problem throws
  // ValueError listing all of them, and nothing is loaded then: a missing or unexpected key when
  // strict, a mis-shaped one unless skip_mismatched_shapes (as torch, which raises on a shape
  // mismatch even when not strict; skipping is HF's ignore_mismatched_sizes, for a new head).
  // Returns the report of what was left alone.
  LoadStateDictReport load_state_dict(const TensorDict& state, bool strict = true,
                                      bool skip_mismatched_shapes = false);

  // ---- mode, dtype, gradients ----

  // Sets training mode on this module and every descendant (dropout reads it).
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  // Converts floating parameters and buffers (and their grads) to dtype in place: the data is
  // swapped inside each TensorImpl, so every alias sees the new dtype.
  Module& to(DType dtype);
  // Moves every parameter and buffer (and grad) to device, in place like to(DType).
  Module& to(Device device);
  // The device of the first parameter (or buffer); the CPU for a module without tensors.
  Device device() const;
  // Drops every parameter's .grad (set_to_none) or fills it with zeros.
  void zero_grad(bool set_to_none = true);
  // Element count of the parameters (each tied tensor once); only requires_grad ones if asked.
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- forward hooks (run by call_with_hooks, e.g. UnaryModule::operator()) ----

  HookHandle register_forward_pre_hook(ForwardPreHook hook);
  HookHandle register_forward_hook(ForwardHook hook);
  bool has_forward_hooks() const;
  // Copies of the registered hooks in registration order, for callers that run a forward
  // themselves (the Python bindings around a Python forward).
  std::vector<ForwardPreHook> forward_pre_hooks() const;
  std::vector<ForwardHook> forward_hooks() const;

  // ---- printing ----

  // The class name without namespaces ("Linear").
  virtual std::string type_name() const;
  // The arguments shown between the parentheses of repr() ("in_features=2, out_features=3").
  virtual std::string extra_repr() const { return ""; }
  // PyTorch-style tree: "Sequential(\n  (0): Linear(in_features=2, ...)\n)".
  std::string repr() const;

 protected:
  // Runs the pre-hooks, forward(inputs) and the forward hooks. A module whose forward takes
  // several tensors calls it from its operator():
  //   Tensor operator()(const Tensor& x, const Tensor& mask) {
  //     return call_with_hooks({x, mask}, [&](const TensorList& in) { return forward(in[0], in[1]);
  //     });
  //   }
  Tensor call_with_hooks(TensorList inputs,
                         const std::function<Tensor(const TensorList&)>& forward);

 protected:
  // replace_module's work; containers that keep their children in a list of their own override
  // it to keep that list in step (after checking the new module, before calling this).
  virtual void swap_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  using Visitor = std::function<void(const std::string& prefix, const Module&)>;
  // Pre-order walk; with dedupe each module is visited once (shared submodules, cycles).
  void visit(const std::string& prefix, const Visitor& fn, bool dedupe) const;
  TensorDict collect(bool params, bool recurse, bool dedupe_tensors) const;
  // Parameters and persistent buffers under their full names (what state_dict() saves).
  TensorDict persistent_tensors() const;
  void check_new_name(const std::string& name, std::string_view op) const;
  void add_child(std::string name, std::shared_ptr<Module> module);
  // Replaces every parameter's and buffer's data (and grads) with convert(t), once per tensor.
  void convert_tensors(const std::function<Tensor(const Tensor&)>& convert, bool floating_only);

  TensorDict parameters_;
  TensorDict buffers_;
  std::unordered_set<std::string> non_persistent_buffers_;
  OrderedDict<std::shared_ptr<Module>> children_;
  bool training_ = true;
  std::shared_ptr<detail::ForwardHooks> hooks_;  // created on the first registered hook
};

// Eval mode (no dropout) for its lifetime; the module's mode before is restored however the scope
// ends, an exception included.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Module& module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalModeGuard() { module_.train(was_training_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  Module& module_;
  bool was_training_;
};

// A module mapping one tensor to one tensor (most layers). operator() runs forward() with the
// forward hooks around it; Sequential chains these.
class UnaryModule : public Module {
 public:
  Tensor operator()(const Tensor& x);
  virtual Tensor forward(const Tensor& x) = 0;
};

}  // namespace tessera::nn
