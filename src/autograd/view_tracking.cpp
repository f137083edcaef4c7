#include "tessera/autograd/view_tracking.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/shape.h"

namespace tessera::autograd {

namespace {

AutogradMeta* tracked_meta(const TensorImpl& t) {
  AutogradMeta* m = t.autograd_meta();
  return m && m->view_base && m->view_base->storage() == t.storage() ? m : nullptr;
}

// The origin of a view of x made as `origin`: a view of a view that may not be written may not be
// written either (x may carry only its origin: a no-grad view of a tensor not requiring grad).
ViewOrigin inherited_origin(const Tensor& x, ViewOrigin origin) {
  const AutogradMeta* xm = x.impl()->autograd_meta();
  return xm && xm->view_origin != ViewOrigin::ViewOp ? xm->view_origin : origin;
}

void mark_view(const Tensor& x, const Tensor& out, ViewOrigin origin) {
  const AutogradMeta* xm = tracked_meta(*x.impl());
  AutogradMeta& m = out.impl()->ensure_autograd_meta();
  m.view_base = xm ? xm->view_base : x.impl_ptr();
  m.view_version = out.version();
  m.view_origin = inherited_origin(x, origin);
}

// Sets the view's grad_fn to that of as_strided(base) over the view's elements: how its values
// depend on the base now.
void rebuild_from_base(const std::shared_ptr<TensorImpl>& view, AutogradMeta& meta) {
  Tensor base(meta.view_base);
  if (meta.view_origin != ViewOrigin::ViewOp) {
    // Made in no-grad mode or by a function with its own backward: never a function of the
    // base's history (a no-grad view of a parameter stays a constant across optimizer steps).
  } else if (base.requires_grad()) {
    GradModeGuard on(true);  // also when asked for grad_fn during a backward pass
    Tensor rebuilt = as_strided(base, view->sizes(), view->strides(), view->storage_offset());
    meta.grad_fn = rebuilt.grad_fn();
    meta.output_nr = 0;
    if (meta.retains_grad) attach_retained_grad_hook(view);
  } else {
    meta.grad_fn.reset();  // the base left the graph (detach_, requires_grad_(false))
    meta.output_nr = 0;
  }
  meta.view_version = view->storage()->version();  // only once rebuilt: as_strided may throw
}

// The base's history after an in-place op `fn` on one of its views: the base's gradient goes
// through fn's backward on the view's region and passes unchanged elsewhere; fn's other inputs
// get their gradients from fn.
class CopySlices final : public Node {
 public:
  CopySlices(const Tensor& base, const TensorImpl& view, std::shared_ptr<FunctionNode> fn)
      : base_sizes_(base.sizes()),
        base_strides_(base.strides()),
        view_sizes_(view.sizes()),
        view_strides_(view.strides()),
        view_offset_(view.storage_offset() - base.storage_offset()),
        fn_(std::move(fn)) {
    add_next_edge(gradient_edge(base));
    for (size_t i = 1; i < fn_->next_edges().size(); ++i) add_next_edge(fn_->next_edges()[i]);
    add_output_meta({base.sizes(), base.dtype(), base.device()});
  }

  TensorList apply(TensorList&& grads) override {
    TensorList out(next_edges().size());
    const Tensor& g = grads[0];
    if (!g.defined()) return out;
    // Laid out like the base, so the view's geometry finds the view's region in it.
    Tensor result =
        empty_strided(base_sizes_, base_strides_, TensorOptions(g.dtype()).with_device(g.device()));
    result.copy_(g);
    Tensor region = as_strided(result, view_sizes_, view_strides_, view_offset_);
    TensorList fn_grads = fn_->apply({clone(region)});
    if (fn_grads[0].defined())
      region.copy_(fn_grads[0]);
    else
      region.zero_();  // the op overwrote the view's old values
    out[0] = std::move(result);
    for (size_t i = 1; i < out.size(); ++i) out[i] = std::move(fn_grads[i]);
    return out;
  }

  std::string name() const override { return "CopySlices"; }
  void release_saved() override { fn_->release_saved(); }
  void take_owned_nodes(std::vector<std::shared_ptr<Node>>& out) override {
    Node::take_owned_nodes(out);
    if (fn_) out.push_back(std::move(fn_));
  }

 private:
  Shape base_sizes_, base_strides_, view_sizes_, view_strides_;
  int64_t view_offset_;
  std::shared_ptr<FunctionNode> fn_;
};

}  // namespace

void track_view(const Tensor& x, const Tensor& out) {
  if (!out.is_floating_point()) return;
  if (GradMode::is_enabled()) return mark_view(x, out, ViewOrigin::ViewOp);
  if (InferenceMode::is_enabled()) return;
  if (x.requires_grad()) return mark_view(x, out, ViewOrigin::NoGradMode);
  // Only the origin, so that values requiring grad are not written through it later (torch's
  // rule); no base reference, so its storage keeps a single owner and the buffers backward
  // formulas (grad mode off) make stay exclusive for the engine and AccumulateGrad.
  out.impl()->ensure_autograd_meta().view_origin = inherited_origin(x, ViewOrigin::NoGradMode);
}

void track_opaque_view(const Tensor& x, const Tensor& out) {
  if (out.is_floating_point()) mark_view(x, out, ViewOrigin::OpaqueFunction);
}

bool is_tracked_view(const Tensor& t) { return tracked_meta(*t.impl()) != nullptr; }

Tensor view_base(const Tensor& t) {
  const AutogradMeta* m = tracked_meta(*t.impl());
  return m ? Tensor(m->view_base) : Tensor();
}

void refresh_view_grad_fn(const std::shared_ptr<TensorImpl>& view) {
  AutogradMeta* m = view->autograd_meta();
  if (!m || !m->view_base || m->view_version == view->storage()->version()) return;
  if (m->view_base->storage() != view->storage()) {
    m->view_base.reset();  // re-pointed at other memory (x.data = y): no longer a view
    return;
  }
  rebuild_from_base(view, *m);
}

namespace {

// RuntimeError naming op unless a write through the view m may be recorded.
void check_view_origin(const AutogradMeta& m, std::string_view op) {
  TESSERA_CHECK(m.view_origin == ViewOrigin::ViewOp, RuntimeError, "[", op,
                "] expected a view made by a view op with grad mode on, got one made ",
                m.view_origin == ViewOrigin::NoGradMode ? "in no-grad mode"
                                                        : "by a function with its own backward",
                ": autograd cannot follow a write through it; clone() it first");
}

}  // namespace

void check_view_write(const Tensor& self, std::string_view op) {
  const AutogradMeta* m = tracked_meta(*self.impl());
  if (!m) return;
  Tensor base(m->view_base);
  if (!base.requires_grad()) return;  // unless the written values do (check_recorded_write)
  TESSERA_CHECK(!base.is_leaf(), RuntimeError, "[", op,
                "] expected no in-place change to a view of a leaf tensor that requires grad, got "
                "one; use no_grad() or work on a clone");
  check_view_origin(*m, op);
}

void bump_version_for_write(const Tensor& self) {
  AutogradMeta* m = tracked_meta(*self.impl());
  const bool current = m && m->view_version == self.version();
  self.bump_version();
  if (current) m->view_version = self.version();
}

void check_recorded_write(const Tensor& self, std::string_view op) {
  const AutogradMeta* m = self.impl()->autograd_meta();
  if (m) check_view_origin(*m, op);
}

void record_inplace_on_view(const Tensor& view, const std::shared_ptr<FunctionNode>& node) {
  AutogradMeta& meta = *tracked_meta(*view.impl());
  Tensor base(meta.view_base);
  AutogradMeta& base_meta = base.impl()->ensure_autograd_meta();
  base_meta.grad_fn = std::make_shared<CopySlices>(base, *view.impl(), node);
  base_meta.output_nr = 0;
  if (base_meta.retains_grad) attach_retained_grad_hook(base.impl_ptr());
  rebuild_from_base(view.impl_ptr(), meta);
}

}  // namespace tessera::autograd
