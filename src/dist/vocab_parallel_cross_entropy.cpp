// Cross-entropy of logits whose vocabulary is split over a TP group (Megatron's
// cross_entropy.py), with label smoothing as torch: per row,
//   loss = lse - (1 - eps) x[t] - eps / V sum_c x[c],   lse = m + log sum_c exp(x[c] - m),
// where m, the exp-sum, x[t] and the logit sum are reduced over the group; the mean runs over
// the non-ignored rows. The gradient is this rank's slice of
//   softmax(x) - (1 - eps) onehot(t) - eps / V   (zero on padded columns and ignored rows),
// computed from the saved softmax slice, so the backward needs no communication.
#include <algorithm>
#include <limits>

#include "dist/tensor_parallel_internal.h"
#include "tessera/autograd/function.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/index.h"
#include "tessera/ops/reduce.h"
#include "tessera/ops/shape.h"

namespace tessera::dist {

namespace {

constexpr const char* kOp = "vocab_parallel_cross_entropy";

void check_arguments(const Tensor& logits, const Tensor& targets, const GroupPtr& group,
                     int64_t vocab_size, int64_t ignore_index, double label_smoothing) {
  detail::check_group(kOp, group);
  TESSERA_CHECK(logits.defined(), ValueError, "[", kOp, "] expected logits, got undefined");
  TESSERA_CHECK(is_floating(logits.dtype()), TypeError, "[", kOp,
                "] expected floating-point logits, got ", logits.dtype());
  TESSERA_CHECK(logits.dim() >= 1 && logits.size(logits.dim() - 1) > 0, ValueError, "[", kOp,
                "] expected logits [..., V_local] with V_local > 0, got ", logits.sizes());
  Shape target_shape = logits.sizes();
  target_shape.pop_back();
  TESSERA_CHECK(targets.defined() && targets.sizes() == target_shape, ValueError, "[", kOp,
                "] expected targets of shape ", target_shape, " for logits of shape ",
                logits.sizes(), ", got ",
                targets.defined() ? targets.shape_str() : std::string("undefined"));
  TESSERA_CHECK(targets.device() == logits.device(), ValueError, "[", kOp, "] expected targets on ",
                logits.device().str(), ", got ", targets.device().str());
  const int64_t padded = logits.size(logits.dim() - 1) * group->size();
  TESSERA_CHECK(vocab_size > 0 && vocab_size <= padded, ValueError, "[", kOp,
                "] expected vocab_size in [1, ", padded, "] (V_local x group size), got ",
                vocab_size);
  TESSERA_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError, "[", kOp,
                "] expected label_smoothing in [0, 1], got ", label_smoothing);
  detail::check_ids(kOp, targets, vocab_size, "targets", ignore_index);
}

// The [M, V_local] gradient from the saved softmax slice p, target columns (idx where in_shard),
// valid rows, their count and the real-column mask: (p - (1 - eps) onehot - eps / V) g / count.
Tensor logits_grad(const Tensor& g, autograd::BackwardContext& ctx, double eps,
                   int64_t vocab_size) {
  TESSERA_CHECK(!autograd::GradMode::is_enabled(), NotImplementedError, "[", kOp,
                "] expected a backward without create_graph (no double backward), got "
                "create_graph");
  Tensor p = ctx.saved(0);
  Tensor onehot = one_hot(ctx.saved(1), p.size(1)) * unsqueeze(ctx.saved(2), 1);
  Tensor d = p - cast(onehot, p.dtype()) * (1.0 - eps);
  if (eps > 0) d = d - ctx.saved(5) * (eps / static_cast<double>(vocab_size));
  return masked_fill(d * (cast(g, p.dtype()) / ctx.saved(4)),
                     unsqueeze(logical_not(ctx.saved(3)), 1), 0.0);
}

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    const GroupPtr& group, int64_t vocab_size, int64_t ignore_index,
                                    double label_smoothing) {
  check_arguments(logits, targets, group, vocab_size, ignore_index, label_smoothing);
  const double eps = label_smoothing;
  const int64_t Vl = logits.size(logits.dim() - 1);
  const int64_t start = group->rank() * Vl;
  const int64_t real = std::clamp<int64_t>(vocab_size - start, 0, Vl);  // non-padded columns
  // Statistics in float64 for float64 logits, else float32 (as cross_entropy).
  const DType at = logits.dtype() == kFloat64 ? kFloat64 : kFloat32;

  Tensor out, softmax, idx, in_shard, valid, count;
  {
    autograd::NoGradGuard ng;
    Tensor x = contiguous(reshape(cast(logits.detach(), at), {-1, Vl}));  // [M, Vl]
    Tensor t = contiguous(reshape(targets.detach(), {-1}));               // [M]
    Tensor pad = arange(Vl).to(logits.device()) >= real;                  // [Vl]
    // Padded columns: -inf takes no part in the max, and exp gives 0.
    Tensor xm = real < Vl ? masked_fill(x, pad, -std::numeric_limits<double>::infinity()) : x;
    Tensor m = amax(xm, {1});
    group->all_reduce(m, ReduceOp::Max)->wait();
    Tensor e = exp(xm - unsqueeze(m, 1));
    valid = t != ignore_index;
    in_shard = logical_and(logical_and(t >= start, t < start + real), valid);
    idx = masked_fill(t - start, logical_not(in_shard), 0);
    Tensor target_logit =
        masked_fill(squeeze(gather(x, 1, unsqueeze(idx, 1)), 1), logical_not(in_shard), 0.0);
    // One all-reduce for the exp-sum, the target logit and (label smoothing) the logit sum.
    TensorList parts{sum(e, {1}), target_logit};
    if (eps > 0) parts.push_back(sum(real < Vl ? masked_fill(x, pad, 0.0) : x, {1}));
    Tensor stats = stack(parts, 0);
    group->all_reduce(stats)->wait();
    Tensor sum_exp = stats.select(0, 0);
    Tensor row = log(sum_exp) + m - stats.select(0, 1) * (1.0 - eps);
    if (eps > 0) row = row - stats.select(0, 2) * (eps / static_cast<double>(vocab_size));
    // Mean over the non-ignored rows: 0 / 0 = nan when all are ignored, as cross_entropy.
    count = sum(cast(valid, at));
    out = cast(sum(masked_fill(row, logical_not(valid), 0.0)) / count, logits.dtype());
    softmax = e / unsqueeze(sum_exp, 1);
  }
  if (!autograd::needs_grad({logits})) return out;
  Tensor real_mask = cast(arange(Vl).to(logits.device()) < real, at);
  autograd::record("VocabParallelCrossEntropyBackward", {logits}, {out},
                   {softmax, idx, in_shard, valid, count, real_mask},
                   [eps, vocab_size, shape = logits.sizes(), dtype = logits.dtype()](
                       autograd::BackwardContext& ctx, const TensorList& g) {
                     Tensor d = logits_grad(g[0], ctx, eps, vocab_size);
                     return TensorList{cast(reshape(d, shape), dtype)};
                   });
  return out;
}

}  // namespace tessera::dist
