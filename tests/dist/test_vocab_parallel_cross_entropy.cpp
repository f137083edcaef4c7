// vocab_parallel_cross_entropy at every TP size against cross_entropy of the gathered logits:
// the loss and each rank's gradient slice, with a padded vocabulary (10 at TP 3 and 4), ignored
// targets, label smoothing and every target ignored; a finite-difference gradient check; errors.
#include "tensor_parallel_util.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/nn.h"
#include "testing/expect_error.h"
#include "testing/gradcheck.h"

namespace tessera::dist::testing {
namespace {

constexpr int64_t V = 10;

struct Case {
  const char* name;
  std::vector<int64_t> targets;  // 12 of them: [2, 6]
  int64_t ignore_index;
  double label_smoothing;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"plain", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 4}, -100, 0.0},
      {"smoothing", {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 3, 3}, -100, 0.1},
      {"ignored", {9, -100, 7, 0, -100, 4, 3, 2, -100, 0, 3, 5}, -100, 0.2},
      {"ignore a class", {3, 1, 3, 6, 5, 3, 9, 2, 1, 0, 3, 8}, 3, 0.0},
      {"all ignored", std::vector<int64_t>(12, -100), -100, 0.1},
  };
  return c;
}

// Loss and each rank's logits gradient against cross_entropy on the first V columns of the
// padded master (the columns past V are junk that must take no part).
void check_cases(DType dtype, double tol) {
  Tensor logits_master = master({2, 6, 12}, 51).to(dtype);  // 12 >= the padded V at any TP size
  for (const GroupPtr& g : tp_groups()) {
    const int64_t S = g->size(), r = g->rank();
    const int64_t Vp = pad_to_multiple(V, S);
    for (const Case& c : cases()) {
      const std::string what = tessera::detail::str(c.name, " ", dtype, " on ", describe_group(g));
      Tensor targets = tensor(c.targets).reshape({2, 6});
      Tensor full = logits_master.narrow(-1, 0, V).clone().requires_grad_();
      Tensor want = cross_entropy(full.reshape({-1, V}), targets.reshape({-1}), c.ignore_index,
                                  c.label_smoothing);
      (want * 2.5).backward();
      Tensor want_grad = cat({full.grad(), zeros({2, 6, Vp - V}, dtype)}, -1);

      Tensor local = part(logits_master.narrow(-1, 0, Vp), -1, r, S).requires_grad_();
      Tensor loss =
          vocab_parallel_cross_entropy(local, targets, g, V, c.ignore_index, c.label_smoothing);
      EXPECT_EQ(loss.dtype(), dtype) << what;
      expect_close(loss, want, what + " loss", tol);
      (loss * 2.5).backward();
      expect_close(local.grad(), part(want_grad, -1, r, S), what + " grad", tol);
    }
  }
}

TEST(TensorParallelCrossEntropy, MatchesCrossEntropyFloat64) { check_cases(kFloat64, 1e-12); }

TEST(TensorParallelCrossEntropy, MatchesCrossEntropyFloat32AndBFloat16) {
  check_cases(kFloat32, 1e-5);
  check_cases(kBFloat16, 2e-2);
}

TEST(TensorParallelCrossEntropy, FiniteDifferenceGradient) {
  Tensor targets = tensor(std::vector<int64_t>{1, -100, 9, 4});
  for (const GroupPtr& g : tp_groups()) {
    // Every rank holds the whole padded logits; scatter_to_tensor_parallel_region keeps its slice
    // and gathers the gradient, so a perturbation (made on every rank) moves only its owner's
    // slice and autograd's gradient is the whole one on every rank.
    Tensor full = master({4, pad_to_multiple(V, g->size())}, 61).requires_grad_();
    auto fn = [&](const TensorList& in) {
      return TensorList{vocab_parallel_cross_entropy(scatter_to_tensor_parallel_region(in[0], g),
                                                     targets, g, V, -100, 0.1)};
    };
    EXPECT_EQ(::tessera::testing::gradcheck(fn, {full}), "") << describe_group(g);
  }
}

TEST(TensorParallelCrossEntropy, BadArgumentsThrowTypedErrors) {
  auto g = world();
  const int64_t Vl = 3;
  Tensor logits = zeros({2, Vl}, kFloat64);
  Tensor t = tensor(std::vector<int64_t>{0, 1});
  const char* op = "[vocab_parallel_cross_entropy] expected";
  EXPECT_TESSERA_ERROR(vocab_parallel_cross_entropy(logits, t, nullptr, 3), ValueError, op);
  EXPECT_TESSERA_ERROR(vocab_parallel_cross_entropy(zeros({2, Vl}, kInt64), t, g, 3), TypeError,
                       "[vocab_parallel_cross_entropy] expected floating-point logits");
  EXPECT_TESSERA_ERROR(vocab_parallel_cross_entropy(logits, zeros({2}), g, 3), TypeError,
                       "[vocab_parallel_cross_entropy] expected int64 targets");
  EXPECT_TESSERA_ERROR(vocab_parallel_cross_entropy(logits, tensor(std::vector<int64_t>{0}), g, 3),
                       ValueError, "[vocab_parallel_cross_entropy] expected targets of shape [2]");
  EXPECT_TESSERA_ERROR(
      vocab_parallel_cross_entropy(logits, tensor(std::vector<int64_t>{0, 3}), g, 3), IndexError,
      "[vocab_parallel_cross_entropy] expected targets in [0, 3) or ignore_index, got 3");
  EXPECT_TESSERA_ERROR(vocab_parallel_cross_entropy(logits, t, g, Vl * g->size() + 1), ValueError,
                       "[vocab_parallel_cross_entropy] expected vocab_size in [1, ");
  EXPECT_TESSERA_ERROR(vocab_parallel_cross_entropy(logits, t, g, 3, -100, 1.5), ValueError,
                       "[vocab_parallel_cross_entropy] expected label_smoothing in [0, 1]");
}

}  // namespace
}  // namespace tessera::dist::testing
