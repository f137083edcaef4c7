#include "tessera/autograd/node.h"

#include <atomic>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/elementwise.h"

namespace tessera::autograd {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}

Node::Node() : sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

Node::~Node() {
  std::vector<std::shared_ptr<Node>> owned;
  Node::take_owned_nodes(owned);
  release_iteratively(std::move(owned));
}

void Node::take_owned_nodes(std::vector<std::shared_ptr<Node>>& out) {
  for (Edge& e : next_edges_)
    if (e.fn) out.push_back(std::move(e.fn));
  next_edges_.clear();
}

void Node::release_iteratively(std::vector<std::shared_ptr<Node>> owned) {
  while (!owned.empty()) {
    std::shared_ptr<Node> n = std::move(owned.back());
    owned.pop_back();
    if (n.use_count() == 1) n->take_owned_nodes(owned);  // n dies below with nothing to free
  }
}

Tensor Node::run_pre_hooks(uint32_t input_nr, Tensor grad) {
  auto it = pre_hooks_.find(input_nr);
  if (it == pre_hooks_.end()) return grad;
  for (auto& hook : it->second) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) grad = replaced;
  }
  return grad;
}

namespace {
// t's memory under a new handle (t.detach()) whose history is output output_nr of fn.
Tensor alias_with_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr) {
  Tensor alias = t.detach();
  if (fn) {
    AutogradMeta& meta = alias.impl()->ensure_autograd_meta();
    meta.grad_fn = std::move(fn);
    meta.output_nr = output_nr;
  }
  return alias;
}

// An alias of t with the history t has now. Saving t itself would follow it when it is later
// written in place, and its new history can run through the node that saved it, directly
// (b.add_(b * w)) or through a view's base (b[2:].copy_(exp(b[:2]))): a reference cycle.
Tensor snapshot(const Tensor& t) {
  if (t.is_leaf() && t.requires_grad()) return t;  // its grad_fn never changes
  Tensor alias = alias_with_history(t, t.grad_fn(), t.output_nr());
  alias.impl()->is_wrapped_number = t.impl()->is_wrapped_number;  // backward promotes with it
  return alias;
}
}  // namespace

SavedVariable::SavedVariable(const Tensor& t, const Node* owner) {
  if (!t.defined()) return;
  was_defined_ = true;
  saved_version_ = t.version();
  requires_grad_ = t.requires_grad();
  TESSERA_CHECK(!t.impl()->is_inference, RuntimeError,
                "[autograd] expected tensors saved for backward to be normal tensors, got an "
                "inference tensor (created under InferenceMode); clone it outside the mode");
  if (t.grad_fn().get() == owner && owner != nullptr) {
    // Our own output: keep data only, re-attach the node on unpack.
    is_output_ = true;
    output_nr_ = t.output_nr();
    weak_grad_fn_ = t.grad_fn();
    data_ = t.detach();
  } else {
    data_ = snapshot(t);
  }
}

Tensor SavedVariable::unpack(const std::shared_ptr<Node>& owner) const {
  if (!was_defined_) return Tensor();
  TESSERA_CHECK(!released_, RuntimeError, "[autograd] trying to backward through ",
                owner ? owner->name() : std::string("a node"),
                " a second time, but its saved tensors were already freed; pass "
                "retain_graph=true to the first backward");
  TESSERA_CHECK(data_.version() == saved_version_, RuntimeError,
                "[autograd] expected a tensor saved for ", owner ? owner->name() : "backward",
                " at version ", saved_version_, ", got version ", data_.version(),
                ": one of the tensors needed for gradient computation was modified by an "
                "in-place operation");
  if (!is_output_) return data_;
  auto fn = weak_grad_fn_.lock();
  if (!fn || !GradMode::is_enabled()) return data_;
  // Rebuild an alias that carries the output's history so double backward flows through it.
  Tensor alias = alias_with_history(data_, std::move(fn), output_nr_);
  alias.impl()->autograd_meta()->requires_grad = requires_grad_;
  return alias;
}

void SavedVariable::take_history(std::vector<std::shared_ptr<Node>>& out) {
  if (!data_.defined() || data_.impl_ptr().use_count() != 1) return;
  AutogradMeta* meta = data_.impl()->autograd_meta();
  if (meta && meta->grad_fn) out.push_back(std::move(meta->grad_fn));
}

void SavedVariable::reset() {
  if (!was_defined_) return;
  data_ = Tensor();
  weak_grad_fn_.reset();
  released_ = true;
}

Tensor AccumulateGrad::run_pre_hooks(uint32_t input_nr, Tensor grad) {
  grad = Node::run_pre_hooks(input_nr, std::move(grad));
  if (AutogradMeta* meta = variable_.impl()->autograd_meta()) {
    for (auto& hook : meta->hooks) {
      Tensor replaced = hook(grad);
      if (replaced.defined()) grad = replaced;
    }
  }
  return grad;
}

bool is_exclusive_grad(const Tensor& g) {
  return g.is_contiguous() && g.impl_ptr().use_count() == 1 &&
         g.impl()->storage().use_count() == 1 && !g.requires_grad();
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};
  AutogradMeta& meta = variable_.impl()->ensure_autograd_meta();
  TESSERA_CHECK(g.sizes() == variable_.sizes(), RuntimeError,
                "[AccumulateGrad] expected a grad of shape ", variable_.sizes(), ", got ",
                g.sizes());
  if (g.dtype() != variable_.dtype()) g = cast(g, variable_.dtype());
  const bool create_graph = GradMode::is_enabled();
  if (!meta.grad) {
    // Keep the incoming buffer only when nothing else can see it; otherwise own a copy (under
    // create_graph a differentiable one: the incoming gradient may be a broadcast view or be
    // handed to another leaf too, and a later backward adds into .grad in place).
    Tensor stored = create_graph ? clone(g) : (is_exclusive_grad(g) ? g : clone(g.detach()));
    meta.grad = stored.impl_ptr();
  } else if (create_graph) {
    meta.grad = add(Tensor(meta.grad), g).impl_ptr();
  } else {
    Tensor acc(meta.grad);
    add_(acc, g.detach());
  }
  for (auto& hook : meta.post_accumulate_grad_hooks) hook(variable_);
  return {};
}

void attach_retained_grad_hook(const std::shared_ptr<TensorImpl>& t) {
  AutogradMeta& meta = t->ensure_autograd_meta();
  if (!meta.grad_fn) return;
  std::weak_ptr<TensorImpl> weak = t;  // the node must not keep the tensor alive
  const Node* owner = meta.grad_fn.get();
  meta.grad_fn->add_pre_hook(meta.output_nr, [weak, owner](const Tensor& g) {
    auto impl = weak.lock();
    if (!impl || impl->autograd_meta()->grad_fn.get() != owner) return Tensor();
    AutogradMeta& m = *impl->autograd_meta();
    Tensor prev = m.grad ? Tensor(m.grad) : Tensor();
    m.grad = (prev.defined() ? prev + g.detach() : g.detach().clone()).impl_ptr();
    return Tensor();
  });
}

std::shared_ptr<Node> grad_accumulator(const Tensor& t) {
  AutogradMeta& meta = t.impl()->ensure_autograd_meta();
  if (auto acc = meta.grad_accumulator.lock()) return acc;
  auto acc = std::make_shared<AccumulateGrad>(t);
  meta.grad_accumulator = acc;
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  if (const auto& fn = t.grad_fn()) return {fn, t.output_nr()};
  const AutogradMeta* meta = t.impl()->autograd_meta();
  if (meta && meta->requires_grad) return {grad_accumulator(t), 0};
  return {};
}

}  // namespace tessera::autograd
