#pragma once
// Optimizer base: parameter groups, per-parameter state, zero_grad/step and a flat state dict.
// SGD, Adam and AdamW only supply their defaults, option checks and the per-parameter update
// (Adam also an update over a group's list of parameters).
//
// Options are named numbers ("lr", "weight_decay", "momentum", ...; flags such as "nesterov" are
// 0/1), so a group is one flat record: schedulers change "lr" on any optimizer and the state
// dict maps straight onto a safetensors file (tensors + __metadata__).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/ordered_dict.h"

namespace tessera::optim {

using nn::OrderedDict;
using nn::TensorDict;
using Options = OrderedDict<double>;

// Parameters sharing hyperparameters. options overrides the optimizer's defaults for this group
// (e.g. {{"weight_decay", 0.0}}); the optimizer fills in the rest.
struct ParamGroup {
  TensorList params;
  Options options;
};

// A flat checkpoint record: named tensors plus named numbers.
struct StateDict {
  TensorDict tensors;
  OrderedDict<double> scalars;
};

// What an optimizer keeps per parameter: its update count and named buffers (exp_avg, ...).
struct ParamState {
  int64_t step = 0;
  TensorDict buffers;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a .grad, in place, under no_grad.
  virtual void step();
  // Drops every parameter's .grad (set_to_none) or fills it with zeros.
  void zero_grad(bool set_to_none = true);
  // The global 2-norm of the gradients this optimizer steps, before clipping; when max_norm > 0
  // they are scaled by min(1, max_norm / (norm + 1e-6)) (optim::clip_grad_norm_). A sharded
  // optimizer (dist::ZeroOptimizer) reduces the norm over its ranks.
  virtual Tensor clip_grad_norm_(double max_norm);
  // Whether step() reads its parameters' .grad, which GradScaler unscales in place; false for
  // dist::ZeroOptimizer, which steps DDP's reduced buckets.
  virtual bool steps_param_grads() const { return true; }
  // Adds a group. Its option names must be among defaults() (ValueError otherwise), values are
  // checked, and a parameter may belong to one group only.
  virtual void add_param_group(ParamGroup group) { insert_group(std::move(group)); }

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const Options& defaults() const { return defaults_; }
  // Each group's lr as it was when a scheduler first asked (torch's group["initial_lr"], set by
  // the first scheduler): the base every scheduler on this optimizer starts from.
  const std::vector<double>& initial_lrs();
  // Replaces them (torch's OneCycleLR writes group["initial_lr"] = max_lr / div_factor); one per
  // group, ValueError otherwise.
  void set_initial_lrs(std::vector<double> lrs);
  const std::string& name() const { return name_; }
  // The state of param, or null before its first update.
  const ParamState* state(const Tensor& param) const;

  // Parameters are numbered 0, 1, ... across groups in order (as torch). Tensors:
  // "state.<i>.<buffer>"; scalars: "state.<i>.step", "param_groups.<g>.<option>" and
  // "param_groups.<g>.num_params". The tensors alias the live state: clone them to snapshot.
  virtual StateDict state_dict() const;
  // Restores a state_dict() of an optimizer of the same kind with the same group sizes and
  // parameter shapes (ValueError naming the first difference otherwise). Buffers are copied and
  // cast to the state dtype of their parameter; group options are replaced.
  virtual void load_state_dict(const StateDict& state);

 protected:
  // Derived constructors then call add_initial_groups (the option checks are virtual, so they
  // cannot run inside this constructor).
  Optimizer(std::string name, Options defaults)
      : name_(std::move(name)), defaults_(std::move(defaults)) {}
  // Adds the constructor's groups; ValueError when they hold no parameter at all.
  void add_initial_groups(std::vector<ParamGroup> groups);
  // add_param_group's checks and insertion.
  void insert_group(ParamGroup group);

  // One parameter's update. param and grad are contiguous with the same dtype; state buffers
  // made by state_buffer() follow the param's dtype (float32 for 16-bit params).
  virtual void update(const Tensor& param, const Tensor& grad, const Options& options,
                      ParamState& state) = 0;
  // A group's updates of one step (param and grad as for update()). By default update() for
  // each; an optimizer with a kernel over a list of parameters steps many in one launch.
  struct Update {
    Tensor param, grad;
    ParamState* state;
  };
  virtual void update_group(const std::vector<Update>& updates, const Options& options);
  // Throws ValueError for out-of-range values; called on every added or loaded group.
  virtual void check_options(const Options& options) const = 0;
  // The buffer `name` of state (zeros shaped like param when absent, or re-cast when param's
  // dtype changed since, e.g. after Module::to).
  static Tensor state_buffer(ParamState& state, const std::string& name, const Tensor& param);
  // Whether state has buffer `name` yet.
  static bool has_buffer(const ParamState& state, const std::string& name) {
    return state.buffers.contains(name);
  }
  // Forgets every parameter's state.
  void clear_state() { state_.clear(); }
  // ValueError "[<name>] expected <what>, got <value>" unless ok.
  void check_option(bool ok, const char* what, double value) const;

 private:
  std::string name_;
  Options defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<double> initial_lrs_;  // of the first initial_lrs_.size() groups
  std::unordered_map<const TensorImpl*, ParamState> state_;
};

// The dtype optimizer state uses for a parameter: float32 for 16-bit floats, else its own.
DType state_dtype(DType param_dtype);

// Two groups in the GPT training convention: params with dim >= 2 (matmul weights, embeddings)
// get weight_decay, the rest (biases, norm weights) get 0. Params not requiring grad are left
// out.
std::vector<ParamGroup> weight_decay_param_groups(const TensorList& params, double weight_decay);

}  // namespace tessera::optim
