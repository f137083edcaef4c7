// Op cases for the nn ops. The fused kernels (softmax, norms, class losses, rope, swiglu) are
// checked against composites of other public ops or explicit loops in double; the composites
// (attention) against explicit loops.
#include <cmath>
#include <limits>

#include "testing/op_cases.h"
#include "testing/reference.h"

namespace tessera::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

InputSpec fixed(InputSpec s) {
  s.requires_grad = false;
  return s;
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<double> v = values(t);
  return std::vector<int64_t>(v.begin(), v.end());
}

// Targets equal to `from` replaced by `to` (to plant ignore_index values).
Tensor replace(const Tensor& t, int64_t from, int64_t to) {
  return where(t == from, full_like(t, to), t);
}

// ---- softmax ----

Tensor softmax_ref(const Tensor& x, int64_t d) {
  Tensor e = exp(x - amax(x, {d}, true));
  return e / sum(e, {d}, true);
}

std::vector<OpCase> softmax_cases() {
  std::vector<OpCase> v;
  auto both = [&](std::string label, InputSpec in, int64_t d, double gain = 1.0) {
    v.push_back(one(
        "softmax", label, {in}, [=](auto& x) { return softmax(x[0] * gain, d); },
        [=](auto& x) { return softmax_ref(x[0] * gain, d); }));
    v.push_back(one(
        "log_softmax", label, {in}, [=](auto& x) { return log_softmax(x[0] * gain, d); },
        [=](auto& x) { return x[0] * gain - logsumexp(x[0] * gain, {d}, true); }));
  };
  both("last_dim", real({4, 7}), -1);
  both("middle_dim_noncontiguous", real({3, 5, 4}, true), 1);
  both("first_dim", real({6, 3}), 0);
  // A power of two, so that scaling is exact in bfloat16 too (the low-precision test measures
  // the op, not the rounding of x * gain).
  both("large_logits", real({3, 9}), 1, 32.0);
  both("single_row_1d", real({5}), 0);
  both("wide_inner", real({2, 3, 70}), 1);  // more inner columns than one kernel block
  for (auto& c : v) c.gradgradcheck = c.label == "last_dim" || c.label == "first_dim";
  return v;
}

// ---- normalisation ----

// Layer norm over the trailing n elements of each row, by loops in double.
Tensor layer_norm_ref(const Tensor& x, int64_t n, const Tensor& w, const Tensor& b, double eps) {
  std::vector<double> xv = values(x), out(xv.size());
  std::vector<double> wv = w.defined() ? values(w) : std::vector<double>(n, 1.0);
  std::vector<double> bv = b.defined() ? values(b) : std::vector<double>(n, 0.0);
  for (size_t r = 0; r * n < xv.size(); ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mu += xv[r * n + i] / n;
    for (int64_t i = 0; i < n; ++i) var += (xv[r * n + i] - mu) * (xv[r * n + i] - mu) / n;
    for (int64_t i = 0; i < n; ++i)
      out[r * n + i] = (xv[r * n + i] - mu) / std::sqrt(var + eps) * wv[i] + bv[i];
  }
  return from_values(out, x.sizes(), x.dtype());
}

Tensor rms_ref(const Tensor& x, const Tensor& w, double eps) {
  Tensor y = x * rsqrt(mean(x * x, {-1}, true) + eps);
  return w.defined() ? y * w : y;
}

std::vector<OpCase> norm_cases() {
  std::vector<OpCase> v;
  v.push_back(one(
      "layer_norm", "affine_2d", {real({4, 8}), real({8}), real({8})},
      [](auto& x) { return layer_norm(x[0], {8}, x[1], x[2]); },
      [](auto& x) { return layer_norm_ref(x[0], 8, x[1], x[2], 1e-5); }));
  v.push_back(one(
      "layer_norm", "plain_noncontiguous", {real({2, 3, 6}, true)},
      [](auto& x) { return layer_norm(x[0], {6}); },
      [](auto& x) { return layer_norm_ref(x[0], 6, Tensor(), Tensor(), 1e-5); }));
  v.push_back(one(
      "layer_norm", "two_normalized_dims", {real({3, 2, 4}), real({2, 4}), real({2, 4})},
      [](auto& x) {
        return layer_norm(x[0], {2, 4}, x[1], x[2], 1e-3);
      },
      [](auto& x) { return layer_norm_ref(x[0], 8, x[1].reshape({8}), x[2].reshape({8}), 1e-3); }));
  v.push_back(one(
      "layer_norm", "weight_only_many_rows", {real({40, 5}), real({5})},
      [](auto& x) { return layer_norm(x[0], {5}, x[1]); },
      [](auto& x) { return layer_norm_ref(x[0], 5, x[1], Tensor(), 1e-5); }));
  v.push_back(one(
      "layer_norm", "bias_only", {real({3, 5}), real({5})},
      [](auto& x) { return layer_norm(x[0], {5}, std::nullopt, x[1]); },
      [](auto& x) {
        Tensor xc = x[0] - mean(x[0], {1}, true);
        return xc * rsqrt(mean(xc * xc, {1}, true) + 1e-5) + x[1];
      }));
  v.push_back(one(
      "rms_norm", "weight", {real({4, 8}), real({8})}, [](auto& x) { return rms_norm(x[0], x[1]); },
      [](auto& x) { return rms_ref(x[0], x[1], 1e-6); }));
  v.push_back(one(
      "rms_norm", "plain_noncontiguous_3d", {real({3, 4, 6}, true)},
      [](auto& x) { return rms_norm(x[0], std::nullopt, 1e-4); },
      [](auto& x) { return rms_ref(x[0], Tensor(), 1e-4); }));
  v.push_back(one(
      "rms_norm", "many_rows", {real({50, 3}), real({3})},
      [](auto& x) { return rms_norm(x[0], x[1]); },
      [](auto& x) { return rms_ref(x[0], x[1], 1e-6); }));
  auto add_rms = [](const TensorList& x, bool weight) {
    auto [h, y] = add_rms_norm(x[0], x[1], weight ? std::optional<Tensor>(x[2]) : std::nullopt);
    return TensorList{h, y};
  };
  auto add_rms_ref = [](const TensorList& x, bool weight) {
    Tensor h = x[0] + x[1];
    return TensorList{h, rms_ref(h, weight ? x[2] : Tensor(), 1e-6)};
  };
  v.push_back({"add_rms_norm",
               "weight",
               {real({4, 6}), real({4, 6}), real({6})},
               [=](const TensorList& x) { return add_rms(x, true); },
               [=](const TensorList& x) { return add_rms_ref(x, true); }});
  v.push_back({"add_rms_norm",
               "plain_noncontiguous_residual",
               {real({2, 3, 5}), real({2, 3, 5}, true)},
               [=](const TensorList& x) { return add_rms(x, false); },
               [=](const TensorList& x) { return add_rms_ref(x, false); }});
  // Only the normalised output used: the sum's gradient arrives as zeros.
  v.push_back(one(
      "add_rms_norm", "normed_output_only", {real({3, 4}), real({3, 4}), real({4})},
      [](auto& x) { return std::get<1>(add_rms_norm(x[0], x[1], x[2])); },
      [](auto& x) { return rms_ref(x[0] + x[1], x[2], 1e-6); }));
  for (auto& c : v)
    c.gradgradcheck = c.label == "affine_2d" || (c.op == "rms_norm" && c.label == "weight") ||
                      (c.op == "add_rms_norm" && c.label == "weight");
  return v;
}

// ---- losses ----

// torch's class-index loss by loops in double: input [C], [N, C] or [N, C, d...].
Tensor class_loss_ref(const Tensor& x, const Tensor& t, const Tensor& w,
                      std::optional<int64_t> ignore, double eps, Reduction red, bool logits) {
  std::vector<double> xv = values(x);
  std::vector<int64_t> tv = ints(t);
  const int64_t C = x.dim() == 1 ? x.size(0) : x.size(1);
  const int64_t N = x.dim() == 1 ? 1 : x.size(0);
  const int64_t S = x.numel() / (N * C);
  std::vector<double> wv = w.defined() ? values(w) : std::vector<double>(C, 1.0);
  std::vector<double> loss(N * S, 0.0);
  double total = 0, weight_sum = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t s = 0; s < S; ++s) {
      const int64_t i = n * S + s, tt = tv[i];
      if (ignore && tt == *ignore) continue;
      auto at = [&](int64_t c) { return xv[(n * C + c) * S + s]; };
      double lse = 0;
      if (logits) {
        double m = -kInf, z = 0;
        for (int64_t c = 0; c < C; ++c) m = std::max(m, at(c));
        for (int64_t c = 0; c < C; ++c) z += std::exp(at(c) - m);
        lse = m + std::log(z);
      }
      double smooth = 0;
      for (int64_t c = 0; c < C; ++c) smooth += wv[c] * (lse - at(c));
      loss[i] = (1 - eps) * wv[tt] * (lse - at(tt)) + eps / C * smooth;
      total += loss[i];
      weight_sum += wv[tt];
    }
  }
  if (red == Reduction::None) return from_values(loss, t.sizes(), x.dtype());
  return from_values({red == Reduction::Sum ? total : total / weight_sum}, {}, x.dtype());
}

// The same loss in public ops, picking the target with a one-hot mask.
Tensor cross_entropy_composite(const Tensor& x, const Tensor& t) {
  const int64_t C = x.size(1);
  Tensor onehot = (t.unsqueeze(1) == arange(C).unsqueeze(0)).to(x.dtype());
  Tensor logp = x - logsumexp(x, {1}, true);
  return mean(neg(sum(logp * onehot, {1})));
}

std::vector<OpCase> loss_cases() {
  std::vector<OpCase> v;
  const auto kMean = Reduction::Mean, kSum = Reduction::Sum, kNone = Reduction::None;
  v.push_back(one(
      "cross_entropy", "mean_2d", {real({5, 7}), index({5}, 7)},
      [](auto& x) { return cross_entropy(x[0], x[1]); },
      [](auto& x) { return cross_entropy_composite(x[0], x[1]); }));
  v.push_back(one(
      "cross_entropy", "sum_ignore_index", {real({6, 4}), index({6}, 4)},
      [=](auto& x) { return cross_entropy(x[0], replace(x[1], 0, -100), -100, 0.0, kSum); },
      [=](auto& x) {
        return class_loss_ref(x[0], replace(x[1], 0, -100), Tensor(), -100, 0.0, kSum, true);
      }));
  v.push_back(one(
      "cross_entropy", "none_label_smoothing", {real({5, 6}, true), index({5}, 6)},
      [=](auto& x) { return cross_entropy(x[0], x[1], -100, 0.1, kNone); },
      [=](auto& x) { return class_loss_ref(x[0], x[1], Tensor(), -100, 0.1, kNone, true); }));
  v.push_back(one(
      "cross_entropy", "mean_weight_smoothing_ignore",
      {real({8, 5}), index({8}, 5), fixed(positive({5}))},
      [=](auto& x) { return cross_entropy(x[0], replace(x[1], 1, -1), -1, 0.2, kMean, x[2]); },
      [=](auto& x) {
        return class_loss_ref(x[0], replace(x[1], 1, -1), x[2], -1, 0.2, kMean, true);
      }));
  v.push_back(one(
      "cross_entropy", "spatial_nd_mean_ignore", {real({2, 4, 3, 2}), index({2, 3, 2}, 4)},
      [=](auto& x) { return cross_entropy(x[0], replace(x[1], 3, -100)); },
      [=](auto& x) {
        return class_loss_ref(x[0], replace(x[1], 3, -100), Tensor(), -100, 0.0, kMean, true);
      }));
  v.push_back(one(
      "cross_entropy", "spatial_none_weight",
      {real({2, 3, 4}), index({2, 4}, 3), fixed(positive({3}))},
      [=](auto& x) { return cross_entropy(x[0], x[1], -100, 0.0, kNone, x[2]); },
      [=](auto& x) { return class_loss_ref(x[0], x[1], x[2], -100, 0.0, kNone, true); }));
  v.push_back(one(
      "cross_entropy", "unbatched_1d", {real({6}), index({}, 6)},
      [](auto& x) { return cross_entropy(x[0], x[1], std::nullopt, 0.3); },
      [=](auto& x) {
        return class_loss_ref(x[0], x[1], Tensor(), std::nullopt, 0.3, kMean, true);
      }));
  // ignore_index may name a real class: its targets are skipped.
  v.push_back(one(
      "cross_entropy", "ignore_valid_class", {real({7, 3}), index({7}, 3)},
      [=](auto& x) { return cross_entropy(x[0], x[1], 2, 0.0, kSum); },
      [=](auto& x) { return class_loss_ref(x[0], x[1], Tensor(), 2, 0.0, kSum, true); }));
  v.push_back(one(
      "cross_entropy", "probability_targets", {real({4, 5}), positive({4, 5})},
      [](auto& x) { return cross_entropy(x[0], x[1] / sum(x[1], {1}, true), -100, 0.1); },
      [](auto& x) {
        Tensor p = x[1] / sum(x[1], {1}, true) * 0.9 + 0.1 / 5;
        return mean(neg(sum((x[0] - logsumexp(x[0], {1}, true)) * p, {1})));
      }));
  v.push_back(one(
      "nll_loss", "mean", {real({5, 4}), index({5}, 4)},
      [](auto& x) { return nll_loss(x[0], x[1]); },
      [=](auto& x) { return class_loss_ref(x[0], x[1], Tensor(), -100, 0.0, kMean, false); }));
  v.push_back(one(
      "nll_loss", "sum_weight_ignore", {real({6, 3}, true), index({6}, 3), fixed(positive({3}))},
      [=](auto& x) { return nll_loss(x[0], replace(x[1], 0, -100), -100, kSum, x[2]); },
      [=](auto& x) {
        return class_loss_ref(x[0], replace(x[1], 0, -100), x[2], -100, 0.0, kSum, false);
      }));
  v.push_back(one(
      "nll_loss", "spatial_none", {real({2, 3, 5}), index({2, 5}, 3)},
      [=](auto& x) { return nll_loss(log_softmax(x[0], 1), x[1], -100, kNone); },
      [=](auto& x) { return class_loss_ref(x[0], x[1], Tensor(), -100, 0.0, kNone, true); }));
  v.push_back(one(
      "mse_loss", "mean", {real({3, 4}), real({3, 4})},
      [](auto& x) { return mse_loss(x[0], x[1]); },
      [](auto& x) {
        return mean(map2(x[0], x[1], [](double a, double b) { return (a - b) * (a - b); }));
      }));
  v.push_back(one(
      "mse_loss", "none_broadcast_target", {real({3, 4}, true), constant({4})},
      [=](auto& x) { return mse_loss(x[0], x[1], kNone); },
      [](auto& x) {
        return map2(x[0], x[1], [](double a, double b) { return (a - b) * (a - b); });
      }));
  v.push_back(one(
      "mse_loss", "sum", {real({5}), real({5})},
      [=](auto& x) { return mse_loss(x[0], x[1], kSum); },
      [](auto& x) {
        return sum(map2(x[0], x[1], [](double a, double b) { return (a - b) * (a - b); }));
      }));
  for (auto& c : v)
    c.gradgradcheck = c.label == "mean_2d" || c.label == "mean_weight_smoothing_ignore" ||
                      (c.op == "nll_loss" && c.label == "sum_weight_ignore");
  return v;
}

// ---- attention ----

// softmax(q k^T scale + mask) v by loops in double; fully masked queries give 0.
Tensor sdpa_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                double scale) {
  const int64_t B = q.size(0), Hq = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2), Dv = v.size(3), G = Hq / Hkv;
  std::vector<double> qv = values(q), kv = values(k), vv = values(v), out(B * Hq * Tq * Dv, 0.0);
  std::vector<double> mv;
  if (mask.defined()) mv = values(mask.expand({B, Hq, Tq, Tk}));
  const bool bool_mask = mask.defined() && mask.dtype() == kBool;
  std::vector<double> s(Tk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t hk = h / G, row = (b * Hq + h) * Tq + i;
        double m = -kInf;
        for (int64_t j = 0; j < Tk; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += qv[row * D + d] * kv[((b * Hkv + hk) * Tk + j) * D + d];
          s[j] = dot * scale;
          if (!mv.empty())
            s[j] = bool_mask ? (mv[row * Tk + j] != 0 ? s[j] : -kInf) : s[j] + mv[row * Tk + j];
          if (causal && j > i) s[j] = -kInf;
          m = std::max(m, s[j]);
        }
        if (m == -kInf) continue;
        double z = 0;
        for (int64_t j = 0; j < Tk; ++j) z += std::exp(s[j] - m);
        for (int64_t j = 0; j < Tk; ++j)
          for (int64_t d = 0; d < Dv; ++d)
            out[row * Dv + d] += std::exp(s[j] - m) / z * vv[((b * Hkv + hk) * Tk + j) * Dv + d];
      }
  return from_values(out, {B, Hq, Tq, Dv}, q.dtype());
}

std::vector<OpCase> attention_cases() {
  std::vector<OpCase> v;
  auto sdpa_case = [&](std::string label, std::vector<InputSpec> in, bool causal,
                       std::optional<double> scale) {
    const int64_t D = in[0].shape[3];
    const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
    v.push_back(one(
        "scaled_dot_product_attention", label, in,
        [=](auto& x) {
          std::optional<Tensor> m = x.size() > 3 ? std::optional<Tensor>(x[3]) : std::nullopt;
          return scaled_dot_product_attention(x[0], x[1], x[2], m, causal, scale);
        },
        [=](auto& x) {
          return sdpa_ref(x[0], x[1], x[2], x.size() > 3 ? x[3] : Tensor(), causal, sc);
        }));
  };
  sdpa_case("basic", {real({1, 2, 3, 4}), real({1, 2, 5, 4}), real({1, 2, 5, 4})}, false,
            std::nullopt);
  sdpa_case("gqa_causal", {real({2, 4, 3, 4}), real({2, 2, 3, 4}), real({2, 2, 3, 4})}, true,
            std::nullopt);
  sdpa_case("causal_tq_lt_tk", {real({1, 1, 3, 4}), real({1, 1, 5, 4}), real({1, 1, 5, 4})}, true,
            std::nullopt);
  sdpa_case("causal_tq_gt_tk", {real({1, 2, 5, 2}), real({1, 2, 3, 2}), real({1, 2, 3, 2})}, true,
            std::nullopt);
  sdpa_case("mqa_value_dim", {real({2, 3, 2, 4}), real({2, 1, 4, 4}), real({2, 1, 4, 6})}, false,
            std::nullopt);
  sdpa_case("bool_mask_broadcast",
            {real({2, 2, 4, 3}), real({2, 2, 5, 3}), real({2, 2, 5, 3}), mask({1, 1, 4, 5})}, false,
            std::nullopt);
  sdpa_case("float_mask_grad_gqa",
            {real({1, 4, 3, 2}), real({1, 2, 4, 2}), real({1, 2, 4, 2}), real({1, 4, 1, 4})}, false,
            std::nullopt);
  sdpa_case("noncontiguous_scale",
            {real({1, 2, 4, 3}, true), real({1, 2, 4, 3}, true), real({1, 2, 4, 3}, true)}, false,
            0.3);
  return v;
}

// ---- rope, swiglu, dropout ----

// Rotary embedding by loops: tables broadcast to [..., T, D/2].
Tensor rope_ref(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
  const int64_t D = x.size(-1), half = D / 2;
  Shape table(x.sizes().begin(), x.sizes().end() - 1);
  table.push_back(half);
  std::vector<double> xv = values(x), cv = values(cos.expand(table)),
                      sv = values(sin.expand(table));
  std::vector<double> out(xv.size());
  for (size_t r = 0; r * D < xv.size(); ++r)
    for (int64_t i = 0; i < half; ++i) {
      const int64_t ia = r * D + (interleaved ? 2 * i : i);
      const int64_t ib = r * D + (interleaved ? 2 * i + 1 : i + half);
      const double c = cv[r * half + i], s = sv[r * half + i];
      out[ia] = xv[ia] * c - xv[ib] * s;
      out[ib] = xv[ib] * c + xv[ia] * s;
    }
  return from_values(out, x.sizes(), x.dtype());
}

std::vector<OpCase> misc_cases() {
  std::vector<OpCase> v;
  for (bool inter : {false, true}) {
    const std::string style = inter ? "interleaved" : "half_split";
    auto fn = [=](auto& x) { return rope(x[0], x[1], x[2], inter); };
    auto ref = [=](auto& x) { return rope_ref(x[0], x[1], x[2], inter); };
    // Tables that require grad take the composite (their gradients too); fixed ones the kernel.
    v.push_back(one("rope", style + "_table_grads",
                    {real({2, 3, 5, 8}), unit({5, 4}), unit({5, 4})}, fn, ref));
    v.push_back(one("rope", style + "_bhtd_tables",
                    {real({2, 3, 5, 8}), fixed(unit({5, 4})), fixed(unit({5, 4}))}, fn, ref));
    v.back().gradgradcheck = true;  // create_graph: the backward's composite
    v.push_back(one("rope", style + "_full_tables",
                    {real({2, 3, 5, 8}), fixed(unit({2, 3, 5, 4})), fixed(unit({2, 3, 5, 4}))}, fn,
                    ref));
    // Per-batch positions (Hugging Face's [B, 1, T, D/2]): broadcast over heads only.
    v.push_back(one("rope", style + "_batch_tables",
                    {real({2, 3, 5, 8}), fixed(unit({2, 1, 5, 4})), fixed(unit({2, 1, 5, 4}))}, fn,
                    ref));
    // [B, T, H, D] viewed as [B, H, T, D] (split_heads): strided rows, read in place.
    v.push_back(one(
        "rope", style + "_bthd_view",
        {real({2, 5, 3, 8}), fixed(unit({5, 4})), fixed(unit({5, 4}))},
        [=](auto& x) { return rope(x[0].transpose(1, 2), x[1], x[2], inter); },
        [=](auto& x) { return rope_ref(x[0].transpose(1, 2), x[1], x[2], inter); }));
    // A transposed last dim: copied before the kernel.
    v.push_back(one(
        "rope", style + "_bthd_noncontiguous", {real({2, 5, 3, 6}, true)},
        [=](auto& x) {
          auto [c, s] = rope_tables(5, 6, 10000.0, options_like(x[0]));
          return rope(x[0], c.unsqueeze(1), s.unsqueeze(1), inter);
        },
        [=](auto& x) {
          auto [c, s] = rope_tables(5, 6, 10000.0, x[0].dtype());
          return rope_ref(x[0], c.unsqueeze(1), s.unsqueeze(1), inter);
        }));
  }
  OpCase tables{"rope_tables",
                "theta_500",
                {constant({1})},
                [](const TensorList& x) {
                  auto [c, s] = rope_tables(6, 8, 500.0, options_like(x[0]));
                  return TensorList{c, s};
                },
                [](const TensorList& x) {
                  std::vector<double> c, s;
                  for (int t = 0; t < 6; ++t)
                    for (int i = 0; i < 4; ++i) {
                      c.push_back(std::cos(t * std::pow(500.0, -2.0 * i / 8)));
                      s.push_back(std::sin(t * std::pow(500.0, -2.0 * i / 8)));
                    }
                  return TensorList{from_values(c, {6, 4}, x[0].dtype()),
                                    from_values(s, {6, 4}, x[0].dtype())};
                }};
  tables.gradcheck = false;
  v.push_back(tables);
  auto swiglu_fn = [](auto& x) { return swiglu(x[0], x[1]); };
  auto swiglu_ref = [](auto& x) {
    return map2(x[0], x[1], [](double g, double u) { return g / (1 + std::exp(-g)) * u; });
  };
  v.push_back(one("swiglu", "basic", {real({3, 4}), real({3, 4}, true)}, swiglu_fn, swiglu_ref));
  v.back().gradgradcheck = true;  // create_graph: the backward's composite
  v.push_back(one("swiglu", "broadcast_up", {real({2, 3, 4}), real({4})}, swiglu_fn, swiglu_ref));
  v.push_back(one("swiglu", "broadcast_both", {real({2, 1, 4}), real({3, 1}, true)}, swiglu_fn,
                  swiglu_ref));
  // The mask depends only on the generator state, so a fresh generator gives the same one.
  v.push_back(one(
      "dropout", "train_seeded", {real({6, 5})},
      [](auto& x) {
        Generator g(7);
        return dropout(x[0], 0.3, true, &g);
      },
      [](auto& x) {
        Generator g(7);
        Tensor keep = bernoulli(full(x[0].sizes(), 0.7, kFloat64), &g).to(x[0].dtype());
        return x[0] * keep / 0.7;
      }));
  v.push_back(one(
      "dropout", "eval_identity", {real({3, 4}, true)},
      [](auto& x) { return dropout(x[0], 0.5, false); }, [](auto& x) { return x[0]; }));
  return v;
}

TESSERA_OP_CASES(softmax_cases());
TESSERA_OP_CASES(norm_cases());
TESSERA_OP_CASES(loss_cases());
TESSERA_OP_CASES(attention_cases());
TESSERA_OP_CASES(misc_cases());

}  // namespace
}  // namespace tessera::testing
