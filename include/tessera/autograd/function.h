#pragma once
// How ops record themselves in the graph. An op computes its outputs, then, when
//   needs_grad({a, b})
// is true, calls
//   record("MulBackward", {a, b}, {out}, {a, b}, [](BackwardContext& ctx, const TensorList& g) {
//     return TensorList{g[0] * ctx.saved(1), g[0] * ctx.saved(0)};
//   });
// The backward lambda returns one gradient per input (undefined = no gradient) and is written
// with public ops, so it is itself differentiable when create_graph is set.
#include <functional>
#include <string>
#include <vector>

#include "tessera/autograd/node.h"

namespace tessera::autograd {

class FunctionNode;

class BackwardContext {
 public:
  BackwardContext(FunctionNode& node) : node_(node) {}
  // Saved tensor i (version-checked).
  Tensor saved(size_t i) const;
  // Whether input i needs a gradient; skip computing it otherwise.
  bool needs_input_grad(size_t i) const;

 private:
  FunctionNode& node_;
};

using BackwardFn = std::function<TensorList(BackwardContext&, const TensorList&)>;

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  ~FunctionNode() override;
  TensorList apply(TensorList&& grads) override;
  void take_owned_nodes(std::vector<std::shared_ptr<Node>>& out) override;
  std::string name() const override { return name_; }
  void release_saved() override;

  std::vector<SavedVariable>& saved() { return saved_; }

 private:
  friend class BackwardContext;
  std::string name_;
  BackwardFn fn_;
  std::vector<SavedVariable> saved_;
  bool released_ = false;
};

// True when grad mode is on and any input requires grad.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const TensorList& inputs);

struct RecordOptions {
  // An in-place op: its one output is its first input, written. On a tracked view the node
  // becomes part of the base's history (autograd/view_tracking.h).
  bool inplace = false;
};

// Wires outputs into the graph with a FunctionNode whose edges point at the inputs' history.
// Outputs that are not floating point never require grad. Returns the node.
std::shared_ptr<FunctionNode> record(std::string name, const TensorList& inputs,
                                     const TensorList& outputs, const TensorList& saved,
                                     BackwardFn backward, RecordOptions options = {});

// Checks an in-place op on `self` is legal for autograd (neither a leaf that requires grad nor a
// view of one, nor a view autograd cannot follow) and bumps its version counter. Call before
// writing into self, and record the op with {.inplace = true}; `recorded` says the op will be
// recorded (an operand requires grad), which a view made in no-grad mode refuses, before
// anything is written.
void check_inplace(const Tensor& self, std::string_view op, bool recorded = false);

}  // namespace tessera::autograd
