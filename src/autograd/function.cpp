#include "tessera/autograd/function.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/view_tracking.h"
#include "tessera/ops/creation.h"

namespace tessera::autograd {

Tensor BackwardContext::saved(size_t i) const {
  TESSERA_ASSERT(i < node_.saved_.size(), node_.name(), " has no saved tensor ", i);
  return node_.saved_[i].unpack(node_.shared_from_this());
}

bool BackwardContext::needs_input_grad(size_t i) const {
  return i < node_.next_edges().size() && node_.next_edges()[i].valid();
}

TensorList FunctionNode::apply(TensorList&& grads) {
  const size_t n_inputs = next_edges().size();
  bool any = false;
  for (const Tensor& g : grads) any = any || g.defined();
  if (!any) return TensorList(n_inputs);
  TESSERA_CHECK(!released_, RuntimeError, "[autograd] trying to backward through ", name_,
                " a second time, but its saved tensors were already freed; pass "
                "retain_graph=true to the first backward");
  for (size_t i = 0; i < grads.size(); ++i) {
    const OutputMeta& m = output_meta()[i];
    if (!grads[i].defined() && is_floating(m.dtype))
      grads[i] = zeros(m.sizes, TensorOptions(m.dtype).with_device(m.device));
  }
  BackwardContext ctx(*this);
  TensorList out = fn_(ctx, grads);
  TESSERA_ASSERT(out.size() == n_inputs, name_, " returned ", out.size(), " gradients for ",
                 n_inputs, " inputs");
  return out;
}

FunctionNode::~FunctionNode() {
  // Saved tensors are destroyed before ~Node runs, so unlink their histories here.
  std::vector<std::shared_ptr<Node>> owned;
  take_owned_nodes(owned);
  release_iteratively(std::move(owned));
}

void FunctionNode::take_owned_nodes(std::vector<std::shared_ptr<Node>>& out) {
  Node::take_owned_nodes(out);
  for (auto& s : saved_) s.take_history(out);
}

void FunctionNode::release_saved() {
  for (auto& s : saved_) s.reset();
  released_ = !saved_.empty();
}

bool needs_grad(const TensorList& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::shared_ptr<FunctionNode> record(std::string name, const TensorList& inputs,
                                     const TensorList& outputs, const TensorList& saved,
                                     BackwardFn backward, RecordOptions options) {
  auto node = std::make_shared<FunctionNode>(std::move(name), std::move(backward));
  for (const Tensor& in : inputs) {
    Edge e = gradient_edge(in);
    // Integer inputs (indices) never receive gradients.
    if (e.valid() && !in.is_floating_point()) e = {};
    node->add_next_edge(std::move(e));
  }
  TESSERA_ASSERT(!options.inplace || (outputs.size() == 1 && !inputs.empty() &&
                                      inputs[0].impl() == outputs[0].impl()),
                 node->name(), " is recorded in place but its output is not its first input");
  if (options.inplace)
    check_recorded_write(outputs[0], detail::str("autograd, recording ", node->name()));
  const bool inplace_on_view = options.inplace && is_tracked_view(outputs[0]);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    node->add_output_meta({out.sizes(), out.dtype(), out.device()});
    if (!out.is_floating_point() || inplace_on_view) continue;
    AutogradMeta& meta = out.impl()->ensure_autograd_meta();
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
    meta.requires_grad = false;
    // Outputs of ops that happen to alias memory are not views for autograd (view ops mark
    // theirs after recording).
    meta.view_base.reset();
    if (meta.retains_grad) attach_retained_grad_hook(out.impl_ptr());
  }
  node->saved().reserve(saved.size());
  for (const Tensor& s : saved) {
    // The view's history will run through the base's and so through this node: saving the view
    // itself would be a reference cycle.
    TESSERA_ASSERT(!inplace_on_view || !s.defined() || s.impl() != outputs[0].impl(), node->name(),
                   " saves the view it writes in place");
    node->saved().emplace_back(s, node.get());
  }
  if (inplace_on_view) record_inplace_on_view(outputs[0], node);
  return node;
}

void check_inplace(const Tensor& self, std::string_view op, bool recorded) {
  if (GradMode::is_enabled()) {
    TESSERA_CHECK(!self.requires_grad() || !self.is_leaf(), RuntimeError, "[", op,
                  "] expected no in-place change to a leaf tensor that requires grad, got one; "
                  "use no_grad() or work on a clone");
    check_view_write(self, op);
    if (recorded) check_recorded_write(self, op);
  }
  bump_version_for_write(self);
}

}  // namespace tessera::autograd
