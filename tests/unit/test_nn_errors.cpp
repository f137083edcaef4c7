// User mistakes in the nn ops throw the right typed exception with a message naming the op.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>

#include "tessera/tessera.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

using testing::expect_error;

Tensor targets(std::vector<int64_t> v) { return tensor(v); }

TEST(NnErrors, Reduction) {
  EXPECT_EQ(reduction_from_string("none", "cross_entropy"), Reduction::None);
  EXPECT_EQ(reduction_from_string("mean", "cross_entropy"), Reduction::Mean);
  EXPECT_EQ(reduction_from_string("sum", "cross_entropy"), Reduction::Sum);
  expect_error<ValueError>([] { reduction_from_string("avg", "cross_entropy"); }, "cross_entropy",
                           "'avg'");
  expect_error<ValueError>([] { reduction_from_string("Mean", "mse_loss"); }, "mse_loss");
}

TEST(NnErrors, Softmax) {
  expect_error<TypeError>([] { softmax(arange(6), 0); }, "softmax", "int64");
  expect_error<IndexError>([] { softmax(randn({2, 3}), 2); }, "softmax");
  expect_error<IndexError>([] { log_softmax(randn({2, 3}), -3); }, "log_softmax");
  expect_error<TypeError>([] { log_softmax(ones({3}, kBool), 0); }, "log_softmax");
}

TEST(NnErrors, Norms) {
  Tensor x = randn({4, 6});
  expect_error<ValueError>([&] { layer_norm(x, {5}); }, "layer_norm", "trailing dims");
  expect_error<ValueError>([&] { layer_norm(x, {2, 4, 6}); }, "layer_norm");
  expect_error<ValueError>([&] { layer_norm(x, {}); }, "layer_norm");
  expect_error<ValueError>([&] { layer_norm(x, {6}, randn({5})); }, "layer_norm", "weight");
  expect_error<ValueError>(
      [&] {
        layer_norm(x, {6}, randn({6}), randn({6, 1}));
      },
      "layer_norm", "bias");
  expect_error<TypeError>([&] { layer_norm(x, {6}, randn({6}, kFloat64)); }, "layer_norm");
  expect_error<TypeError>([&] { layer_norm(arange(6), {6}); }, "layer_norm");
  expect_error<ValueError>([&] { rms_norm(x, randn({4})); }, "rms_norm", "weight");
  expect_error<TypeError>([&] { rms_norm(x.to(kFloat64), randn({6})); }, "rms_norm");
  expect_error<ValueError>([&] { rms_norm(scalar_tensor(1.0)); }, "rms_norm");
  expect_error<ValueError>([&] { add_rms_norm(x, randn({4, 5})); }, "add_rms_norm");
  expect_error<ValueError>([&] { add_rms_norm(x, randn({1, 6})); }, "add_rms_norm");
  expect_error<TypeError>([&] { add_rms_norm(x, randn({4, 6}, kFloat64)); }, "add_rms_norm");
  expect_error<ValueError>([&] { add_rms_norm(x, randn({4, 6}), randn({4})); }, "add_rms_norm");
}

TEST(NnErrors, CrossEntropyTargets) {
  Tensor logits = randn({3, 5});
  expect_error<TypeError>(
      [&] {
        cross_entropy(logits, tensor(std::vector<int32_t>{0, 1, 2}));
      },
      "cross_entropy", "int64");
  expect_error<TypeError>([&] { cross_entropy(logits, ones({3}, kBool)); }, "cross_entropy");
  expect_error<ValueError>(
      [&] {
        cross_entropy(logits, targets({0, 1}));
      },
      "cross_entropy", "target of shape [3]");
  expect_error<ValueError>(
      [&] {
        cross_entropy(logits, targets({0, 1, 2, 3, 4, 0}).reshape({3, 2}));
      },
      "cross_entropy");
  // Probability targets must have the logits' shape.
  expect_error<ValueError>([&] { cross_entropy(logits, rand({3, 4})); }, "cross_entropy");
  expect_error<IndexError>(
      [&] {
        cross_entropy(logits, targets({0, 5, 1}));
      },
      "cross_entropy", "got 5");
  expect_error<IndexError>(
      [&] {
        cross_entropy(logits, targets({0, -1, 1}));
      },
      "cross_entropy", "got -1");
  // -100 is only allowed while it is the ignore_index.
  expect_error<IndexError>(
      [&] {
        cross_entropy(logits, targets({0, -100, 1}), std::nullopt);
      },
      "cross_entropy");
  expect_error<IndexError>(
      [&] {
        cross_entropy(randn({2, 4, 3}), targets({0, 1, 4, 0, 1, 2}).reshape({2, 3}));
      },
      "cross_entropy", "got 4");
  expect_error<IndexError>([&] { nll_loss(logits, targets({7, 0, 1})); }, "nll_loss", "got 7");
  expect_error<TypeError>([&] { nll_loss(logits, rand({3})); }, "nll_loss");
}

TEST(NnErrors, CrossEntropyOptions) {
  Tensor logits = randn({3, 5});
  Tensor t = targets({0, 1, 2});
  expect_error<ValueError>([&] { cross_entropy(logits, t, -100, 1.5); }, "cross_entropy",
                           "label_smoothing");
  expect_error<ValueError>([&] { cross_entropy(logits, t, -100, -0.1); }, "cross_entropy");
  expect_error<ValueError>(
      [&] { cross_entropy(logits, t, -100, 0.0, Reduction::Mean, randn({4})); }, "cross_entropy",
      "weight");
  expect_error<TypeError>([&] { cross_entropy(logits, t, -100, 0.0, Reduction::Mean, arange(5)); },
                          "cross_entropy");
  expect_error<ValueError>(
      [&] {
        nll_loss(logits, t, -100, Reduction::Sum, randn({5, 1}));
      },
      "nll_loss");
  expect_error<TypeError>([&] { cross_entropy(arange(15).reshape({3, 5}), t); }, "cross_entropy");
  expect_error<ValueError>([&] { cross_entropy(scalar_tensor(1.0), targets({0})); },
                           "cross_entropy");
  expect_error<ValueError>([&] { mse_loss(randn({3, 4}), randn({3, 5})); }, "mse_loss");
  expect_error<TypeError>([&] { mse_loss(randn({3}), arange(3)); }, "mse_loss");
}

TEST(NnErrors, Attention) {
  Tensor q = randn({1, 4, 3, 8}), k = randn({1, 2, 5, 8}), v = randn({1, 2, 5, 8});
  const std::string op = "scaled_dot_product_attention";
  expect_error<ValueError>(
      [&] {
        scaled_dot_product_attention(q, randn({1, 3, 5, 8}), randn({1, 3, 5, 8}));
      },
      op, "multiple");
  expect_error<ValueError>(
      [&] {
        scaled_dot_product_attention(randn({4, 3, 8}), k, v);
      },
      op, "4-d");
  expect_error<ValueError>([&] { scaled_dot_product_attention(q, randn({1, 2, 5, 7}), v); }, op);
  expect_error<ValueError>([&] { scaled_dot_product_attention(q, k, randn({1, 2, 4, 8})); }, op);
  expect_error<ValueError>([&] { scaled_dot_product_attention(q, k, randn({2, 2, 5, 8})); }, op);
  expect_error<TypeError>([&] { scaled_dot_product_attention(q, k, v.to(kFloat64)); }, op);
  expect_error<ValueError>(
      [&] {
        scaled_dot_product_attention(q, k, v, ones({3, 5}, kBool), true);
      },
      op, "is_causal");
  expect_error<ValueError>(
      [&] {
        scaled_dot_product_attention(q, k, v, ones({3, 4}, kBool));
      },
      op, "attn_mask");
  expect_error<ValueError>([&] { scaled_dot_product_attention(q, k, v, randn({2, 4, 3, 5})); }, op);
  expect_error<TypeError>([&] { scaled_dot_product_attention(q, k, v, arange(5)); }, op);
}

TEST(NnErrors, DropoutRopeSwiglu) {
  expect_error<ValueError>([] { dropout(randn({3}), 1.5); }, "dropout", "p in [0, 1]");
  expect_error<ValueError>([] { dropout(randn({3}), -0.1, false); }, "dropout");
  expect_error<TypeError>([] { dropout(arange(3), 0.5); }, "dropout");
  Tensor c, s;  // not a structured binding: clang 14's lambdas cannot capture one
  std::tie(c, s) = rope_tables(4, 8);
  expect_error<ValueError>([&] { rope(randn({2, 4, 7}), c, s); }, "rope", "even");
  expect_error<ValueError>([&] { rope(randn({2, 5, 8}), c, s); }, "rope", "broadcast");
  expect_error<ValueError>([&] { rope(randn({2, 4, 8}), c, s.narrow(1, 0, 2)); }, "rope");
  expect_error<ValueError>([&] { rope(randn({8}), c, s); }, "rope");
  expect_error<TypeError>([&] { rope(arange(32).reshape({4, 8}), c, s); }, "rope");
  expect_error<ValueError>([] { rope_tables(4, 7); }, "rope_tables", "even");
  expect_error<ValueError>([] { rope_tables(-1, 8); }, "rope_tables");
  expect_error<TypeError>([] { rope_tables(4, 8, 10000.0, kInt64); }, "rope_tables");
  expect_error<TypeError>([] { swiglu(arange(3), randn({3})); }, "swiglu");
  expect_error<ValueError>([] { swiglu(randn({3}), randn({4})); }, "swiglu");
}

}  // namespace
}  // namespace tessera
