// Tensor's autograd-facing methods.
#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/autograd/view_tracking.h"
#include "tessera/core/tensor.h"

namespace tessera {

namespace {
// The tensor's autograd metadata, with a view's grad_fn brought up to date first. impl: a defined
// tensor's (the shared pointer, for the retain_grad hook a rebuilt grad_fn gets).
AutogradMeta* fresh_meta(const std::shared_ptr<TensorImpl>& impl) {
  AutogradMeta* m = impl->autograd_meta();
  if (m && m->view_base) autograd::refresh_view_grad_fn(impl);
  return m;
}
}  // namespace

bool Tensor::requires_grad() const {
  checked();
  const AutogradMeta* m = fresh_meta(impl_);
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  TESSERA_CHECK(is_leaf(), RuntimeError,
                "[requires_grad_] expected a leaf tensor, got a non-leaf (output of ",
                grad_fn()->name(), "); use detach() to make a leaf");
  TESSERA_CHECK(!requires_grad || is_floating(dtype()), TypeError,
                "[requires_grad_] expected a floating-point tensor, got ", dtype());
  AutogradMeta& meta = checked()->ensure_autograd_meta();
  meta.requires_grad = requires_grad;
  // A view made a leaf is a variable of its own, no longer a function of its base (and holds no
  // base that the base's later history, running through this leaf's AccumulateGrad, could
  // reach: a reference cycle).
  if (requires_grad) meta.view_base.reset();
  return *this;
}

bool Tensor::is_leaf() const {
  checked();
  const AutogradMeta* m = fresh_meta(impl_);
  return !m || !m->grad_fn;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = checked()->autograd_meta();
  return m && m->grad ? Tensor(m->grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    TESSERA_CHECK(g.sizes() == sizes(), ValueError, "[set_grad] expected a grad of shape ",
                  sizes(), ", got ", g.sizes());
  }
  checked()->ensure_autograd_meta().grad = g.impl_ptr();
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  checked();
  const AutogradMeta* m = fresh_meta(impl_);
  return m ? m->grad_fn : none;
}

uint32_t Tensor::output_nr() const {
  checked();
  const AutogradMeta* m = fresh_meta(impl_);
  return m ? m->output_nr : 0;
}

void Tensor::backward(const Tensor& grad, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {grad}, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  TensorImpl* s = checked();
  auto impl = std::make_shared<TensorImpl>(s->storage(), s->sizes(), s->strides(),
                                           s->storage_offset(), s->dtype());
  impl->is_inference = s->is_inference;
  impl->untracked_version = s->untracked_version;
  return Tensor(std::move(impl));
}

Tensor Tensor::variable_data() const {
  Tensor alias = detach();
  alias.impl()->untracked_version = true;
  return alias;
}

Tensor& Tensor::detach_() {
  if (AutogradMeta* m = checked()->autograd_meta()) {
    m->grad_fn.reset();
    m->requires_grad = false;
    m->output_nr = 0;
    m->view_base.reset();  // a detached tensor no longer follows its base's history
  }
  return *this;
}

void Tensor::retain_grad() const {
  TESSERA_CHECK(requires_grad(), RuntimeError,
                "[retain_grad] expected a tensor that requires grad, got one that does not");
  if (is_leaf()) return;  // leaves keep .grad anyway
  AutogradMeta& meta = checked()->ensure_autograd_meta();
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  autograd::attach_retained_grad_hook(impl_);
}

bool Tensor::retains_grad() const {
  const AutogradMeta* m = checked()->autograd_meta();
  return m && m->retains_grad;
}

void Tensor::register_hook(TensorHook hook) const {
  TESSERA_CHECK(requires_grad(), RuntimeError,
                "[register_hook] expected a tensor that requires grad, got one that does not");
  AutogradMeta& meta = checked()->ensure_autograd_meta();
  if (meta.grad_fn) {
    meta.grad_fn->add_pre_hook(meta.output_nr, std::move(hook));
  } else {
    meta.hooks.push_back(std::move(hook));
  }
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const {
  TESSERA_CHECK(is_leaf() && requires_grad(), RuntimeError,
                "[register_post_accumulate_grad_hook] expected a leaf tensor that requires grad");
  checked()->ensure_autograd_meta().post_accumulate_grad_hooks.push_back(std::move(hook));
}

}  // namespace tessera
