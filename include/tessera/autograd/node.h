#pragma once
// Graph nodes. A Node is the backward of one forward op: apply() maps the gradients of the op's
// outputs to the gradients of its inputs, which flow along next_edges to the nodes that produced
// those inputs (or to AccumulateGrad for leaves).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// Shape/dtype/device of one forward output, to materialise a zero gradient when it is unused.
struct OutputMeta {
  Shape sizes;
  DType dtype = kFloat32;
  Device device;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grads[i] is the gradient of forward output i (undefined when it did not reach this node).
  virtual TensorList apply(TensorList&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors once the node has run (unless the graph is retained).
  virtual void release_saved() {}
  virtual bool is_accumulate_grad() const { return false; }

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void add_next_edge(Edge e) { next_edges_.push_back(std::move(e)); }
  const std::vector<OutputMeta>& output_meta() const { return output_meta_; }
  void add_output_meta(OutputMeta m) { output_meta_.push_back(std::move(m)); }
  uint64_t sequence_nr() const { return sequence_nr_; }

  // Hooks on the gradient of forward output input_nr (tensor hooks, retain_grad).
  void add_pre_hook(uint32_t input_nr, TensorHook hook) {
    pre_hooks_[input_nr].push_back(std::move(hook));
  }
  // Moves out every node reference this node owns (edges, saved tensors' histories), so a long
  // graph can be destroyed iteratively instead of by recursive destructors.
  virtual void take_owned_nodes(std::vector<std::shared_ptr<Node>>& out);

  // Runs the hooks on input input_nr's gradient, returning the possibly replaced gradient;
  // AccumulateGrad runs its leaf's hooks instead.
  virtual Tensor run_pre_hooks(uint32_t input_nr, Tensor grad);

 protected:
  // Destroys the nodes in `owned` (and what only they keep alive) without recursion.
  static void release_iteratively(std::vector<std::shared_ptr<Node>> owned);

  std::map<uint32_t, std::vector<TensorHook>> pre_hooks_;

 private:
  std::vector<Edge> next_edges_;
  std::vector<OutputMeta> output_meta_;
  uint64_t sequence_nr_;
};

// A tensor kept for backward. Checks the version counter at unpack so that an in-place change
// after saving is an error instead of a silently wrong gradient. A node's own output is held
// without its grad_fn (a weak reference) to avoid a reference cycle.
class SavedVariable {
 public:
  SavedVariable() = default;
  SavedVariable(const Tensor& t, const Node* owner);
  // The saved tensor; `owner` names the node in error messages.
  Tensor unpack(const std::shared_ptr<Node>& owner) const;
  void reset();
  bool defined() const { return was_defined_; }
  // When this is the last handle to the saved tensor, moves its grad_fn into out.
  void take_history(std::vector<std::shared_ptr<Node>>& out);

 private:
  Tensor data_;
  std::weak_ptr<Node> weak_grad_fn_;
  uint32_t output_nr_ = 0;
  uint32_t saved_version_ = 0;
  bool is_output_ = false;
  bool was_defined_ = false;
  bool released_ = false;
  bool requires_grad_ = false;
};

// Whether a gradient buffer is seen by nobody else (one owner, its own storage, contiguous, no
// graph): the engine and AccumulateGrad may then keep it, or add into it, instead of copying.
bool is_exclusive_grad(const Tensor& g);

// Sink for leaf gradients: adds the incoming gradient into variable.grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor variable) : variable_(std::move(variable)) {}
  TensorList apply(TensorList&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  bool is_accumulate_grad() const override { return true; }
  Tensor run_pre_hooks(uint32_t input_nr, Tensor grad) override;
  const Tensor& variable() const { return variable_; }

 private:
  Tensor variable_;
};

// Hooks t's current grad_fn so that its gradient is kept in t.grad (retain_grad). Called again
// whenever grad_fn is replaced (an in-place write); the hook on a former grad_fn does nothing.
void attach_retained_grad_hook(const std::shared_ptr<TensorImpl>& t);

// The edge along which the gradient of t flows: its grad_fn, or its AccumulateGrad for a leaf
// that requires grad, or an invalid edge.
Edge gradient_edge(const Tensor& t);
std::shared_ptr<Node> grad_accumulator(const Tensor& t);

}  // namespace tessera::autograd
