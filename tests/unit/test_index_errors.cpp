// Error handling and edge cases of the indexing and combining ops: every user mistake throws the
// right typed exception with a message naming the op; empty inputs behave as in PyTorch; the
// parallel kernel paths match serial loops.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "tessera/tessera.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

using testing::expect_error;

Tensor idx(std::vector<int64_t> v, std::optional<Shape> shape = std::nullopt) {
  return tensor(v, shape);
}

TEST(IndexErrors, OutOfRangeIndex) {
  Tensor x = randn({3, 5});
  expect_error<IndexError>(
      [&] {
        gather(x, 1, idx({0, 7, 1}, Shape{3, 1}));
      },
      "gather", "[gather] expected index in [0, 5), got 7");
  expect_error<IndexError>([&] { gather(x, 0, idx({-1}, Shape{1, 1})); }, "gather", "got -1");
  expect_error<IndexError>([&] { index_select(x, 0, idx({3})); }, "index_select",
                           "expected index in [0, 3), got 3");
  expect_error<IndexError>([&] { scatter(x, 1, idx({5}, Shape{1, 1}), randn({1, 1})); }, "scatter");
  expect_error<IndexError>([&] { scatter(x, 1, idx({9}, Shape{1, 1}), Scalar(1.0)); }, "scatter");
  expect_error<IndexError>(
      [&] {
        scatter_add(x, 0, idx({3}, Shape{1, 1}), randn({1, 1}));
      },
      "scatter_add");
  expect_error<IndexError>([&] { index_add(x, 1, idx({0, 5}), randn({3, 2})); }, "index_add");
  expect_error<IndexError>(
      [&] {
        embedding(x, idx({1, 3}));
      },
      "embedding", "expected index in [0, 3), got 3");
  expect_error<IndexError>([&] { one_hot(idx({0, 4}), 3); }, "one_hot");
  expect_error<IndexError>([&] { one_hot(idx({-2, 1})); }, "one_hot", "got -2");
  expect_error<IndexError>([&] { take_along_dim(x, idx({5}, Shape{1, 1}), 1); }, "take_along_dim");
  expect_error<IndexError>([&] { take_along_dim(x, idx({15})); }, "take_along_dim");
}

TEST(IndexErrors, DimOutOfRange) {
  Tensor x = randn({3, 5});
  expect_error<IndexError>([&] { gather(x, 2, idx({0}, Shape{1, 1})); }, "gather");
  expect_error<IndexError>([&] { index_select(x, -3, idx({0})); }, "index_select");
  expect_error<IndexError>([&] { cat({x, x}, 2); }, "cat");
  expect_error<IndexError>([&] { stack({x, x}, 3); }, "stack");
  expect_error<IndexError>([&] { split(x, 2, 2); }, "split");
  expect_error<IndexError>([&] { flip(x, {2}); }, "flip");
  expect_error<IndexError>([&] { roll(x, {1}, {-3}); }, "roll");
}

TEST(IndexErrors, WrongRank) {
  Tensor x = randn({3, 5});
  expect_error<ValueError>([&] { gather(x, 0, idx({0, 1})); }, "gather");
  expect_error<ValueError>([&] { index_select(x, 0, idx({0, 1}, Shape{1, 2})); }, "index_select");
  expect_error<ValueError>(
      [&] {
        index_add(x, 0, idx({0, 1}, Shape{2, 1}), randn({2, 5}));
      },
      "index_add");
  expect_error<ValueError>([&] { scatter(x, 0, idx({0}), randn({1, 1})); }, "scatter");
  expect_error<ValueError>(
      [&] {
        scatter_add(x, 0, idx({0}, Shape{1, 1}), randn({1}));
      },
      "scatter_add");
  expect_error<ValueError>([&] { embedding(randn({5}), idx({0})); }, "embedding");
  expect_error<ValueError>([&] { take_along_dim(x, idx({0}), 0); }, "take_along_dim");
  expect_error<ValueError>([&] { tril(randn({4})); }, "tril");
  expect_error<ValueError>([&] { triu(randn({})); }, "triu");
  expect_error<ValueError>([&] { cat({x, randn({3, 5, 1})}); }, "cat");
  expect_error<ValueError>([&] { repeat(x, {2}); }, "repeat");
}

TEST(IndexErrors, DtypeMismatch) {
  Tensor x = randn({3, 5});
  Tensor fidx = zeros({3, 1});
  expect_error<TypeError>([&] { gather(x, 1, fidx); }, "gather", "int64 or int32");
  expect_error<TypeError>([&] { index_select(x, 0, zeros({2})); }, "index_select");
  expect_error<TypeError>([&] { scatter(x, 1, fidx, randn({3, 1})); }, "scatter");
  expect_error<TypeError>(
      [&] {
        scatter(x, 1, idx({0, 1, 2}, Shape{3, 1}), randn({3, 1}, kFloat64));
      },
      "scatter");
  expect_error<TypeError>(
      [&] {
        scatter_add(x, 1, idx({0, 1, 2}, Shape{3, 1}), randn({3, 1}, kFloat64));
      },
      "scatter_add");
  expect_error<TypeError>([&] { index_add(x, 0, idx({0}), randn({1, 5}, kFloat64)); }, "index_add");
  expect_error<TypeError>([&] { embedding(x, zeros({2})); }, "embedding");
  expect_error<TypeError>([&] { one_hot(zeros({2})); }, "one_hot");
  expect_error<TypeError>([&] { one_hot(idx({0, 1}).to(kInt16), 3); }, "one_hot");
  expect_error<TypeError>([&] { masked_select(x, ones({3, 5})); }, "masked_select");
  expect_error<TypeError>([&] { take_along_dim(x, fidx, 1); }, "take_along_dim");
}

TEST(IndexErrors, ShapeMismatch) {
  Tensor x = randn({3, 5});
  expect_error<ValueError>([&] { cat({x, randn({2, 4})}, 0); }, "cat", "at position 1");
  expect_error<ValueError>([&] { stack({x, randn({3, 4})}); }, "stack");
  expect_error<ValueError>([&] { gather(x, 1, zeros({4, 1}, kInt64)); }, "gather");
  expect_error<ValueError>([&] { scatter(x, 0, zeros({2, 2}, kInt64), randn({1, 2})); }, "scatter");
  expect_error<ValueError>(
      [&] {
        scatter_add(x, 0, zeros({2, 6}, kInt64), randn({2, 6}));
      },
      "scatter_add");
  expect_error<ValueError>([&] { index_add(x, 0, idx({0, 1}), randn({2, 4})); }, "index_add");
  expect_error<ValueError>([&] { index_add(x, 0, idx({0, 1}), randn({3, 5})); }, "index_add");
  expect_error<ValueError>([&] { masked_select(x, ones({2, 5}, kBool)); }, "masked_select");
  expect_error<ValueError>([&] { take_along_dim(x, zeros({2, 2}, kInt64), 1); }, "take_along_dim");
  expect_error<ValueError>([&] { split(x, Shape{1, 1}, 0); }, "split");
  expect_error<ValueError>([&] { split(x, Shape{4, -1}, 0); }, "split");
  expect_error<ValueError>([&] { roll(x, {1, 2}, {0}); }, "roll");
  expect_error<ValueError>([&] { roll(x, {1, 2}, {}); }, "roll");
  expect_error<ValueError>([&] { flip(x, {0, -2}); }, "flip");
  expect_error<ValueError>([&] { repeat(x, {2, -1}); }, "repeat");
  expect_error<ValueError>([&] { embedding(x, idx({0}), 3); }, "embedding", "padding_idx");
}

TEST(IndexErrors, EmptyInputs) {
  expect_error<ValueError>([&] { cat({}); }, "cat", "non-empty list");
  expect_error<ValueError>([&] { stack({}); }, "stack");
  expect_error<ValueError>([&] { cat({randn({}), randn({})}); }, "cat", "0-d");
  expect_error<ValueError>([&] { one_hot(zeros({0}, kInt64)); }, "one_hot");
  expect_error<ValueError>([&] { chunk(randn({4}), 0); }, "chunk");
  expect_error<ValueError>([&] { split(randn({}), 1); }, "split");
  expect_error<ValueError>([&] { split(randn({4}), 0); }, "split");
  expect_error<ValueError>([&] { index_select(randn({}), 0, idx({0, 0})); }, "index_select");
}

TEST(IndexEdgeCases, EmptyTensorsBehaveLikeTorch) {
  Tensor x = randn({3, 4});
  EXPECT_EQ(gather(x, 1, zeros({3, 0}, kInt64)).sizes(), (Shape{3, 0}));
  EXPECT_EQ(index_select(x, 0, zeros({0}, kInt64)).sizes(), (Shape{0, 4}));
  EXPECT_EQ(masked_select(x, zeros({3, 4}, kBool)).sizes(), (Shape{0}));
  EXPECT_EQ(one_hot(zeros({0}, kInt64), 3).sizes(), (Shape{0, 3}));
  EXPECT_EQ(cat({zeros({0}), x, zeros({0})}, 1).sizes(), (Shape{3, 4}));
  EXPECT_EQ(cat({zeros({0}), zeros({0})}).sizes(), (Shape{0}));
  EXPECT_EQ(cat({x, zeros({0, 4})}).sizes(), (Shape{3, 4}));
  EXPECT_EQ(tril(zeros({0, 3})).sizes(), (Shape{0, 3}));
  EXPECT_EQ(roll(zeros({0, 3}), {1}, {0}).sizes(), (Shape{0, 3}));
  EXPECT_EQ(flip(zeros({2, 0}), {0, 1}).sizes(), (Shape{2, 0}));
  EXPECT_EQ(repeat(x, {0, 2}).sizes(), (Shape{0, 8}));
  TensorList pieces = chunk(zeros({0, 2}), 3);
  ASSERT_EQ(pieces.size(), 3u);
  for (const Tensor& p : pieces) EXPECT_EQ(p.sizes(), (Shape{0, 2}));
  ASSERT_EQ(split(zeros({0}), 2).size(), 1u);
  ASSERT_EQ(chunk(randn({5}), 4).size(), 3u);  // pieces of 2: fewer than asked, as torch

  Tensor w = randn({4, 3}).requires_grad_();
  Tensor e = embedding(w, zeros({2, 0}, kInt64));
  EXPECT_EQ(e.sizes(), (Shape{2, 0, 3}));
  sum(e).backward();
  EXPECT_TRUE(allclose(w.grad(), zeros({4, 3})));
}

TEST(IndexEdgeCases, ZeroDimInputs) {
  Tensor s = full({}, 3.0);
  EXPECT_EQ(index_select(s, 0, idx({0})).sizes(), Shape{});
  EXPECT_EQ(gather(s, 0, zeros({}, kInt64)).item<double>(), 3.0);
  EXPECT_EQ(stack({s, s}).sizes(), (Shape{2}));
  EXPECT_EQ(repeat(s, {2, 3}).sizes(), (Shape{2, 3}));
  EXPECT_EQ(one_hot(full({}, 2, kInt64)).sizes(), (Shape{3}));
  EXPECT_EQ(roll(s, {2}, {}).item<double>(), 3.0);
  EXPECT_EQ(flip(s, {0}).item<double>(), 3.0);
}

TEST(IndexSemantics, CatPromotesAllInputs) {
  Tensor i32 = ones({2}, kInt32), i64 = ones({2}, kInt64), f64 = ones({2}, kFloat64);
  EXPECT_EQ(cat({i32, i64}).dtype(), kInt64);
  EXPECT_EQ(cat({i32, f64, i64}).dtype(), kFloat64);
  EXPECT_EQ(cat({ones({2}, kBool), i32}).dtype(), kInt32);
  EXPECT_EQ(cat({ones({2}, kBFloat16), ones({1}, kFloat16)}).dtype(), kFloat32);
  Tensor a = arange(3, kInt32), b = tensor({0.5, 1.5}, kFloat64);
  EXPECT_TRUE(allclose(cat({a, b}), tensor({0.0, 1.0, 2.0, 0.5, 1.5}, kFloat64)));
}

TEST(IndexSemantics, RepeatAndRollCopy) {
  Tensor x = arange(4.0);
  Tensor r = repeat(x, {1}), o = roll(x, {0}, {0});
  x.fill_(7.0);
  EXPECT_TRUE(allclose(r, arange(4.0)));
  EXPECT_TRUE(allclose(o, arange(4.0)));
}

TEST(IndexSemantics, EmbeddingPaddingRowGetsNoGradient) {
  Tensor w = randn({5, 3}, kFloat64).requires_grad_();
  Tensor i = idx({2, 0, 2, 4, 4, 4}, Shape{2, 3});
  Tensor e = embedding(w, i, 2);
  EXPECT_TRUE(allclose(e.select(0, 0).select(0, 0), w.detach().select(0, 2)));  // forward reads it
  sum(e).backward();
  // Rows count their occurrences; the padding row (2) stays zero.
  Tensor want = tensor({1.0, 0.0, 0.0, 0.0, 3.0}, kFloat64).reshape({5, 1}).expand({5, 3});
  EXPECT_TRUE(allclose(w.grad(), want)) << w.grad();
  w.set_grad(Tensor());
  sum(embedding(w, i, -3)).backward();  // -3 wraps to row 2 as well
  EXPECT_TRUE(allclose(w.grad(), want)) << w.grad();
}

TEST(IndexSemantics, ScatterLastWriterWinsAndIntTypes) {
  Tensor x = zeros({4}, kInt64);
  Tensor out = scatter(x, 0, idx({1, 1, 3}), idx({5, 6, 7}));
  EXPECT_TRUE(allclose(out, idx({0, 6, 0, 7})));
  EXPECT_TRUE(allclose(scatter_add(x, 0, idx({1, 1, 3}), idx({5, 6, 7})), idx({0, 11, 0, 7})));
  EXPECT_TRUE(allclose(index_add(x, 0, idx({3, 3}).to(kInt32), idx({1, 2}), 2), idx({0, 0, 0, 6})));
  EXPECT_TRUE(allclose(x, zeros({4}, kInt64)));  // out of place
  EXPECT_TRUE(allclose(flip(idx({1, 2, 3}), {0}), idx({3, 2, 1})));
  EXPECT_TRUE(allclose(tril(ones({2, 2}, kBool)).to(kInt64), idx({1, 0, 1, 1}, Shape{2, 2})));
}

// Sizes above the kernels' parallel grain, checked against serial loops.
TEST(IndexKernels, ParallelPathsMatchLoops) {
  Generator gen(7);
  const int64_t V = 50, C = 700, N = 3000;
  Tensor w = randn({V, C}, kFloat64, &gen);
  Tensor i = randint(0, V, {N}, kInt64, &gen);
  Tensor g = randn({N, C}, kFloat64, &gen);
  Tensor iv = i.contiguous();
  const int64_t* ip = iv.data_ptr<int64_t>();
  // index_add with duplicates (the embedding backward path), skipping nothing.
  std::vector<double> want(V * C, 0.0);
  const double* gp = g.data_ptr<double>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) want[ip[n] * C + c] += gp[n * C + c];
  Tensor got = index_add(zeros({V, C}, kFloat64), 0, i, g);
  EXPECT_TRUE(allclose(got, tensor(want, Shape{V, C}), 1e-12, 1e-10));
  // Embedding backward with padding row 0.
  Tensor wr = w.detach().requires_grad_();
  embedding(wr, i, 0).backward(g);
  for (int64_t c = 0; c < C; ++c) want[c] = 0.0;
  EXPECT_TRUE(allclose(wr.grad(), tensor(want, Shape{V, C}), 1e-12, 1e-10));
  // index_select / gather over many rows.
  Tensor sel = index_select(w, 0, i);
  EXPECT_TRUE(allclose(sel.select(0, 17), w.select(0, ip[17])));
  EXPECT_TRUE(allclose(sel.select(0, N - 1), w.select(0, ip[N - 1])));
  Tensor gi = randint(0, C, {V, 2 * C}, kInt64, &gen);
  Tensor ga = gather(w, 1, gi);
  Tensor gic = gi.contiguous();
  const int64_t* gp2 = gic.data_ptr<int64_t>();
  const double* wp = w.data_ptr<double>();
  const double* gap = ga.data_ptr<double>();
  int64_t bad = 0;
  for (int64_t r = 0; r < V; ++r)
    for (int64_t k = 0; k < 2 * C; ++k) bad += gap[r * 2 * C + k] != wp[r * C + gp2[r * 2 * C + k]];
  EXPECT_EQ(bad, 0);
  // scatter_add back along dim 1 (duplicates within each row).
  Tensor sa = scatter_add(zeros({V, C}, kFloat64), 1, gi, ga);
  EXPECT_TRUE(allclose(sum(sa, {1}), sum(ga, {1}), 1e-10, 1e-9));
}

}  // namespace
}  // namespace tessera
