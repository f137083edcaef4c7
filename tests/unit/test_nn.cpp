// Behaviour of the nn ops beyond the op-case table: dropout statistics and seeding, PyTorch's
// edge cases (-inf rows, all-ignored targets, fully masked queries), the fused kernels against
// their composite formulations at sizes that take the parallel paths, and thread-count
// independence.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <limits>
#include <tuple>

#include "tessera/tessera.h"

namespace tessera {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool all_true(const Tensor& b) { return all(b).item<bool>(); }
bool same(const Tensor& a, const Tensor& b) { return all_true(a == b); }

// Runs f with `threads` OpenMP threads.
template <class F>
auto with_threads(int threads, F f) {
  const int prev = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto r = f();
  omp_set_num_threads(prev);
  return r;
}

// Input gradients of sum(f(inputs) * v), through the fused backward kernels (create_graph off)
// and through the composite formulas the ops switch to under create_graph.
std::pair<TensorList, TensorList> kernel_and_composite_grads(
    const std::function<Tensor(const TensorList&)>& f, const TensorList& inputs, uint64_t seed) {
  Generator gen(seed);
  Tensor out = f(inputs);
  Tensor v = randn(out.sizes(), TensorOptions(out.dtype()), &gen);
  TensorList fused = autograd::grad({sum(out * v)}, inputs);
  Tensor out2 = f(inputs);
  TensorList comp = autograd::grad({sum(out2 * v)}, inputs, {}, std::nullopt, true);
  return {fused, comp};
}

void expect_close(const TensorList& a, const TensorList& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(allclose(a[i], b[i], tol, tol)) << what << " input " << i;
}

// ---- dropout ----

TEST(NnDropout, MaskStatisticsAndScale) {
  Generator g(123);
  Tensor y = dropout(ones({200000}), 0.3, true, &g);
  const double zero_frac = mean((y == 0.0).to(kFloat64)).item<double>();
  EXPECT_NEAR(zero_frac, 0.3, 0.005);  // 5 standard deviations
  EXPECT_TRUE(all_true(logical_or(y == 0.0, abs(y - 1.0 / 0.7) < 1e-6)));
  EXPECT_NEAR(mean(y.to(kFloat64)).item<double>(), 1.0, 0.01);
}

TEST(NnDropout, SeededAndAdvancing) {
  Tensor x = randn({64, 33});
  Generator a(5), b(5), c(6);
  Tensor ya = dropout(x, 0.5, true, &a), yb = dropout(x, 0.5, true, &b);
  EXPECT_TRUE(same(ya, yb));
  EXPECT_FALSE(same(ya, dropout(x, 0.5, true, &c)));
  EXPECT_FALSE(same(ya, dropout(x, 0.5, true, &a)));  // the generator advanced
  manual_seed(99);
  Tensor d1 = dropout(x, 0.2);
  manual_seed(99);
  EXPECT_TRUE(same(d1, dropout(x, 0.2)));
}

TEST(NnDropout, SameMaskForAnyThreadCount) {
  Tensor x = randn({300, 257});
  Tensor one = with_threads(1, [&] {
    Generator g(11);
    return dropout(x, 0.4, true, &g);
  });
  Generator g(11);
  EXPECT_TRUE(same(one, dropout(x, 0.4, true, &g)));
}

TEST(NnDropout, IdentityZerosAndGradient) {
  Tensor x = (rand({40, 30}) + 0.5).requires_grad_();
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0).is_same(x));
  Tensor z = dropout(x, 1.0);
  EXPECT_TRUE(same(z, zeros_like(z)));
  sum(z).backward();
  EXPECT_TRUE(same(x.grad(), zeros_like(x)));

  Tensor w = (rand({40, 30}) + 0.5).requires_grad_();
  Generator g(3);
  Tensor y = dropout(w, 0.25, true, &g);
  sum(y).backward();
  Tensor kept = (y != 0.0).to(kFloat32);
  EXPECT_TRUE(allclose(w.grad(), kept / 0.75, 1e-6, 1e-6));
  EXPECT_TRUE(allclose(y, w.detach() * kept / 0.75, 1e-6, 1e-6));
}

TEST(NnDropout, LowPrecisionUsesTheSameMask) {
  Tensor x = randn({50, 20});
  Generator a(8), b(8);
  Tensor y32 = dropout(x, 0.3, true, &a), y16 = dropout(x.to(kBFloat16), 0.3, true, &b);
  EXPECT_EQ(y16.dtype(), kBFloat16);
  EXPECT_TRUE(same(y32 == 0.0, y16 == 0.0));
}

// ---- PyTorch edge cases ----

TEST(NnEdgeCases, SoftmaxOverInfinities) {
  Tensor x = tensor({-kInf, -kInf, -kInf, -kInf, 0.0, 1.0}).reshape({2, 3});
  Tensor s = softmax(x, 1);
  EXPECT_TRUE(all_true(isnan(s.select(0, 0))));  // all -inf: nan, as torch
  EXPECT_EQ(s.select(0, 1).select(0, 0).item<float>(), 0.0f);
  EXPECT_NEAR(sum(s.select(0, 1)).item<float>(), 1.0, 1e-6);
  Tensor ls = log_softmax(x, 1);
  EXPECT_TRUE(all_true(isnan(ls.select(0, 0))));
  EXPECT_EQ(ls.select(0, 1).select(0, 0).item<float>(), -std::numeric_limits<float>::infinity());
  // The same along a non-last dim (strided kernel path).
  Tensor st = softmax(x.t().contiguous(), 0);
  EXPECT_TRUE(all_true(isnan(st.select(1, 0))));
  EXPECT_TRUE(allclose(st.select(1, 1), s.select(0, 1)));
}

TEST(NnEdgeCases, CrossEntropyAllIgnored) {
  Tensor logits = randn({3, 4}).requires_grad_();
  Tensor t = tensor(std::vector<int64_t>{-100, -100, -100});
  EXPECT_TRUE(std::isnan(cross_entropy(logits, t).item<float>()));
  EXPECT_TRUE(std::isnan(nll_loss(logits, t).item<float>()));
  Tensor s = cross_entropy(logits, t, -100, 0.1, Reduction::Sum);
  EXPECT_EQ(s.item<float>(), 0.0f);
  s.backward();
  EXPECT_TRUE(same(logits.grad(), zeros_like(logits)));
  Tensor none = cross_entropy(logits, t, -100, 0.0, Reduction::None);
  EXPECT_EQ(none.sizes(), Shape{3});
  EXPECT_TRUE(same(none, zeros({3})));
}

TEST(NnEdgeCases, CrossEntropyMatchesKnownValue) {
  // torch.nn.functional.cross_entropy([[1, 2, 3], [1, 0, -1]], [2, 0]) = 0.4076059644
  Tensor logits = tensor({1, 2, 3, 1, 0, -1}, kFloat64).reshape({2, 3});
  Tensor t = tensor(std::vector<int64_t>{2, 0});
  EXPECT_NEAR(cross_entropy(logits, t).item<double>(), 0.40760596444438013, 1e-12);
  // label_smoothing=0.1: 0.9 * nll + 0.1 * mean_c(-logp) averaged = 0.5076059644
  EXPECT_NEAR(cross_entropy(logits, t, -100, 0.1).item<double>(), 0.50760596444438014, 1e-12);
}

TEST(NnEdgeCases, AttentionQueryThatSeesNothingGivesZero) {
  Tensor q = randn({1, 2, 3, 4}).requires_grad_(), k = randn({1, 2, 5, 4}).requires_grad_();
  Tensor v = randn({1, 2, 5, 4}).requires_grad_();
  Tensor m = ones({3, 5}, kBool);
  m.select(0, 1).fill_(false);
  Tensor o = scaled_dot_product_attention(q, k, v, m);
  EXPECT_TRUE(same(o.select(2, 1), zeros({1, 2, 4})));
  EXPECT_TRUE(all_true(isfinite(o)));
  sum(o).backward();
  EXPECT_TRUE(all_true(isfinite(q.grad())) && all_true(isfinite(k.grad())));
  EXPECT_TRUE(same(q.grad().select(2, 1), zeros({1, 2, 4})));
}

TEST(NnEdgeCases, AttentionCausalAndGqaEquivalences) {
  Tensor q = randn({2, 6, 4, 8}), k = randn({2, 2, 4, 8}), v = randn({2, 2, 4, 8});
  Tensor keep = unsqueeze(arange(4), 1) >= unsqueeze(arange(4), 0);
  Tensor causal = scaled_dot_product_attention(q, k, v, std::nullopt, true);
  EXPECT_TRUE(allclose(causal, scaled_dot_product_attention(q, k, v, keep), 1e-6, 1e-6));
  // GQA equals attention with each KV head repeated for its 3 query heads.
  Tensor kr = k.unsqueeze(2).expand({2, 2, 3, 4, 8}).reshape({2, 6, 4, 8});
  Tensor vr = v.unsqueeze(2).expand({2, 2, 3, 4, 8}).reshape({2, 6, 4, 8});
  EXPECT_TRUE(
      allclose(causal, scaled_dot_product_attention(q, kr, vr, std::nullopt, true), 1e-6, 1e-6));
  // bfloat16 runs in float32 and rounds once.
  Tensor b16 = scaled_dot_product_attention(q.to(kBFloat16), k.to(kBFloat16), v.to(kBFloat16));
  EXPECT_EQ(b16.dtype(), kBFloat16);
  EXPECT_TRUE(allclose(b16.to(kFloat32), scaled_dot_product_attention(q, k, v), 0.03, 0.03));
}

TEST(NnEdgeCases, RopeConventionsAreAPermutationApart) {
  // Interleaved pairs (2i, 2i+1) become half-split pairs (i, i + D/2) under the permutation
  // Hugging Face applies to Meta checkpoints.
  Tensor x = randn({2, 3, 5, 8});
  auto [c, s] = rope_tables(5, 8);
  auto deinterleave = [](const Tensor& t) {
    return t.reshape({2, 3, 5, 4, 2}).transpose(-1, -2).reshape({2, 3, 5, 8});
  };
  Tensor inter = rope(x, c, s, true);
  Tensor half = rope(deinterleave(x), c, s, false);
  EXPECT_TRUE(allclose(deinterleave(inter), half, 1e-6, 1e-6));
  // Position 0 is the identity; norms of pairs are preserved.
  EXPECT_TRUE(allclose(inter.select(2, 0), x.select(2, 0), 1e-6, 1e-6));
  EXPECT_TRUE(allclose(sum(inter * inter, {-1}), sum(x * x, {-1}), 1e-5, 1e-5));
}

// ---- fused kernels against composites, at sizes that take the parallel paths ----

TEST(NnFused, SoftmaxRowsAndColumns) {
  for (int64_t d : {-1, 0, 1}) {
    Tensor x = (randn({67, 129, 9}) * 3.0).requires_grad_();
    Tensor want = exp(x - logsumexp(x, {d}, true));
    EXPECT_TRUE(allclose(softmax(x, d), want, 1e-5, 1e-6)) << "dim " << d;
    EXPECT_TRUE(allclose(log_softmax(x, d), x - logsumexp(x, {d}, true), 1e-5, 1e-5));
    auto [k1, c1] = kernel_and_composite_grads([&](auto& in) { return softmax(in[0], d); }, {x}, 1);
    expect_close(k1, c1, 1e-5, "softmax");
    auto [k2, c2] =
        kernel_and_composite_grads([&](auto& in) { return log_softmax(in[0], d); }, {x}, 2);
    expect_close(k2, c2, 1e-5, "log_softmax");
  }
  Tensor b = randn({64, 2000}) * 4.0;
  Tensor sb = softmax(b.to(kBFloat16), -1);
  EXPECT_TRUE(allclose(sum(sb.to(kFloat32), {-1}), ones({64}), 0.02, 0.02));
  EXPECT_TRUE(allclose(sb.to(kFloat32), softmax(b.to(kBFloat16).to(kFloat32), -1), 0.01, 1e-3));
}

TEST(NnFused, NormsMatchComposite) {
  Tensor x = (randn({300, 384}) * 2.0 + 0.5).requires_grad_();
  Tensor w = randn({384}).requires_grad_(), b = randn({384}).requires_grad_();
  Tensor r = randn({300, 384}).requires_grad_();
  Tensor xc = x - mean(x, {1}, true);
  Tensor ln_want = xc * rsqrt(mean(xc * xc, {1}, true) + 1e-5) * w + b;
  EXPECT_TRUE(allclose(layer_norm(x, {384}, w, b), ln_want, 1e-4, 1e-4));
  EXPECT_TRUE(allclose(rms_norm(x, w), x * rsqrt(mean(x * x, {1}, true) + 1e-6) * w, 1e-4, 1e-4));
  auto [k1, c1] = kernel_and_composite_grads(
      [](auto& in) { return layer_norm(in[0], {384}, in[1], in[2]); }, {x, w, b}, 3);
  expect_close(k1, c1, 1e-4, "layer_norm");
  auto [k2, c2] =
      kernel_and_composite_grads([](auto& in) { return rms_norm(in[0], in[1]); }, {x, w}, 4);
  expect_close(k2, c2, 1e-4, "rms_norm");
  auto add_norm = [](auto& in) {
    auto [h, y] = add_rms_norm(in[0], in[1], in[2]);
    return h * 0.5 + y;
  };
  auto [k3, c3] = kernel_and_composite_grads(add_norm, {x, r, w}, 5);
  expect_close(k3, c3, 1e-4, "add_rms_norm");
}

TEST(NnFused, CrossEntropyMatchesComposite) {
  const int64_t N = 512, C = 1000;
  Tensor x = (randn({N, C}) * 3.0).requires_grad_();
  Generator gen(2);
  Tensor t = randint(0, C, {N}, kInt64, &gen);
  t = where(t < C / 10, full_like(t, -100), t);  // about 10% ignored
  Tensor w = rand({C}) + 0.5;
  Tensor onehot = (t.unsqueeze(1) == arange(C).unsqueeze(0)).to(kFloat32);
  Tensor valid = (t != -100).to(kFloat32);
  Tensor logp = x - logsumexp(x, {1}, true);
  Tensor per_row = neg(sum(logp * onehot * w, {1})) * 0.9 + neg(sum(logp * w, {1})) * (0.1 / C);
  Tensor want = sum(per_row * valid) / sum(sum(onehot * w, {1}) * valid);
  Tensor got = cross_entropy(x, t, -100, 0.1, Reduction::Mean, w);
  EXPECT_NEAR(got.item<float>(), want.item<float>(), 1e-4);
  auto [k, c] = kernel_and_composite_grads(
      [&](auto& in) { return cross_entropy(in[0], t, -100, 0.1, Reduction::None, w); }, {x}, 6);
  expect_close(k, c, 1e-5, "cross_entropy");
}

// rope through its composite: the path it takes when the tables require grad.
Tensor rope_composite(const Tensor& x, const Tensor& c, const Tensor& s, bool interleaved) {
  return rope(x, c.detach().requires_grad_(), s.detach().requires_grad_(), interleaved);
}

TEST(NnFused, RopeMatchesComposite) {
  // [B, T, H, D] viewed as [B, H, T, D] (strided rows), enough rows for several threads.
  Tensor x = randn({2, 40, 6, 64}).requires_grad_();
  Tensor c, s;  // not a structured binding: clang 14's lambdas cannot capture one
  std::tie(c, s) = rope_tables(40, 64);
  for (bool inter : {false, true}) {
    auto f = [&](const TensorList& in) { return rope(in[0].transpose(1, 2), c, s, inter); };
    Tensor out = f({x});
    ASSERT_TRUE(out.grad_fn());
    EXPECT_EQ(out.grad_fn()->name(), "RopeBackward");  // the kernel ran
    EXPECT_TRUE(allclose(out, rope_composite(x.transpose(1, 2), c, s, inter), 1e-6, 1e-6));
    auto [k, comp] = kernel_and_composite_grads(f, {x}, 7);
    expect_close(k, comp, 1e-6, "rope");
    // bfloat16: opmath arithmetic rounded once, so within half an ulp of float32 on the same
    // (rounded) values; the composite rounds each op.
    Tensor xb = x.detach().to(kBFloat16).requires_grad_();
    Tensor cb = c.to(kBFloat16), sb = s.to(kBFloat16);
    Tensor ob = rope(xb.transpose(1, 2), cb, sb, inter);
    EXPECT_EQ(ob.dtype(), kBFloat16);
    Tensor want =
        rope(xb.detach().to(kFloat32).transpose(1, 2), cb.to(kFloat32), sb.to(kFloat32), inter);
    EXPECT_TRUE(allclose(ob.to(kFloat32), want, 1.0 / 256, 1e-6));
    EXPECT_TRUE(allclose(ob.to(kFloat32),
                         rope_composite(xb.transpose(1, 2), cb, sb, inter).to(kFloat32), 0.02,
                         0.02));
    auto [kb, compb] = kernel_and_composite_grads(f, {xb}, 8);
    expect_close(kb, compb, 0.02, "rope bfloat16");
  }
}

TEST(NnFused, RopeDoubleBackward) {
  // dx = R^T w is linear in w, so d/dw sum(dx * v) = R v: the second pass runs the composite.
  Tensor x = randn({2, 3, 5, 8}).requires_grad_(), v = randn({2, 3, 5, 8});
  auto [c, s] = rope_tables(5, 8);
  for (bool inter : {false, true}) {
    Tensor w = randn({2, 3, 5, 8}).requires_grad_();
    TensorList dx = autograd::grad({sum(rope(x, c, s, inter) * w)}, {x}, {}, std::nullopt, true);
    sum(dx[0] * v).backward();
    EXPECT_TRUE(allclose(w.grad(), rope(v, c, s, inter), 1e-6, 1e-6));
  }
}

TEST(NnFused, SwigluMatchesComposite) {
  Tensor g = (randn({3, 20001}) * 3.0).requires_grad_(), u = randn({3, 20001}).requires_grad_();
  auto f = [](const TensorList& in) { return swiglu(in[0], in[1]); };
  Tensor out = swiglu(g, u);
  ASSERT_TRUE(out.grad_fn());
  EXPECT_EQ(out.grad_fn()->name(), "SwigluBackward");
  EXPECT_TRUE(allclose(out, silu(g) * u, 1e-6, 1e-6));
  auto [k, comp] = kernel_and_composite_grads(f, {g, u}, 9);
  expect_close(k, comp, 1e-5, "swiglu");
  // bfloat16 (the composite rounds silu(gate) before the product).
  Tensor gb = g.detach().to(kBFloat16).requires_grad_();
  Tensor ub = u.detach().to(kBFloat16).requires_grad_();
  Tensor ob = swiglu(gb, ub);
  EXPECT_EQ(ob.dtype(), kBFloat16);
  EXPECT_TRUE(allclose(ob.to(kFloat32), (silu(gb) * ub).to(kFloat32), 0.02, 0.02));
  auto [kb, compb] = kernel_and_composite_grads(f, {gb, ub}, 10);
  expect_close(kb, compb, 0.03, "swiglu bfloat16");
  // ... and its gradients are float32's on the same values, rounded once.
  Tensor vb = randn(ob.sizes()).to(kBFloat16);
  TensorList db = autograd::grad({sum(swiglu(gb, ub) * vb)}, {gb, ub});
  Tensor g32 = gb.detach().to(kFloat32).requires_grad_();
  Tensor u32 = ub.detach().to(kFloat32).requires_grad_();
  TensorList d32 = autograd::grad({sum(swiglu(g32, u32) * vb.to(kFloat32))}, {g32, u32});
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(allclose(db[i].to(kFloat32), d32[i], 1.0 / 256, 1e-6)) << "gradient " << i;
  // Broadcast inputs: the fused gradients are summed back to each input's shape.
  Tensor gs = randn({4, 1, 33}).requires_grad_(), us = randn({5, 1}).requires_grad_();
  TensorList fused = autograd::grad({sum(swiglu(gs, us) * 0.5)}, {gs, us});
  TensorList want = autograd::grad({sum(silu(gs) * us * 0.5)}, {gs, us});
  expect_close(fused, want, 1e-5, "swiglu broadcast");
}

TEST(NnFused, SwigluDoubleBackwardMatchesComposite) {
  Tensor g = randn({6, 9}).requires_grad_(), u = randn({6, 9}).requires_grad_();
  Tensor w = randn({6, 9}), v0 = randn({6, 9}), v1 = randn({6, 9});
  auto second = [&](const std::function<Tensor(const Tensor&, const Tensor&)>& f) {
    TensorList d = autograd::grad({sum(f(g, u) * w)}, {g, u}, {}, std::nullopt, true);
    return autograd::grad({sum(d[0] * v0 + d[1] * v1)}, {g, u});
  };
  TensorList fused = second([](const Tensor& a, const Tensor& b) { return swiglu(a, b); });
  TensorList want = second([](const Tensor& a, const Tensor& b) { return silu(a) * b; });
  expect_close(fused, want, 1e-5, "swiglu second derivative");
}

TEST(NnFused, ParameterGradientsDoNotDependOnThreadCount) {
  Tensor x = randn({1000, 96}), w = randn({96}), b = randn({96}), g = randn({1000, 96});
  auto grads = [&] {
    Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_();
    Tensor br = b.detach().requires_grad_();
    TensorList ln = autograd::grad({sum(layer_norm(xr, {96}, wr, br) * g)}, {xr, wr, br});
    TensorList rms = autograd::grad({sum(rms_norm(xr, wr) * g)}, {xr, wr});
    ln.insert(ln.end(), rms.begin(), rms.end());
    return ln;
  };
  TensorList one = with_threads(1, grads), many = grads();
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same(one[i], many[i])) << "gradient " << i;
}

}  // namespace
}  // namespace tessera
