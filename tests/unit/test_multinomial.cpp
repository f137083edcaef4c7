// multinomial: draws follow the weights (a chi-square bound over 60,000 draws), zero weights are
// never drawn, draws without replacement are distinct, a seeded generator repeats them, and bad
// weights or counts are typed errors naming the op.
#include <gtest/gtest.h>

#include <set>

#include "tessera/tessera.h"

namespace tessera {
namespace {

TEST(Multinomial, DrawsFollowTheWeights) {
  const std::vector<double> w = {1, 2, 0, 3, 4};
  const int64_t n = 60000;
  Tensor draws = multinomial(tensor(w), n, /*replacement=*/true);
  ASSERT_EQ(draws.dtype(), kInt64);
  ASSERT_EQ(draws.shape(), Shape({n}));
  std::vector<int64_t> counts(w.size(), 0);
  for (int64_t i = 0; i < n; ++i) ++counts.at(draws.data_ptr<int64_t>()[i]);
  EXPECT_EQ(counts[2], 0);
  double chi2 = 0;
  for (size_t k = 0; k < w.size(); ++k) {
    if (w[k] == 0) continue;
    const double expected = n * w[k] / 10.0;
    chi2 += (counts[k] - expected) * (counts[k] - expected) / expected;
  }
  EXPECT_LT(chi2, 18.5);  // 3 degrees of freedom: p < 0.0004 by chance
}

TEST(Multinomial, WithoutReplacementEachRowDrawsDistinctNonZeroCategories) {
  Tensor w = tensor(std::vector<double>{0, 1, 1, 5, 0, 2, 1, 1, 0.5, 3}).reshape({2, 5});
  for (int trial = 0; trial < 50; ++trial) {
    Tensor d = multinomial(w, 3);
    ASSERT_EQ(d.shape(), Shape({2, 3}));
    for (int64_t r = 0; r < 2; ++r) {
      std::set<int64_t> seen;
      for (int64_t s = 0; s < 3; ++s) {
        const int64_t i = d.data_ptr<int64_t>()[r * 3 + s];
        EXPECT_GT(w.data_ptr<double>()[r * 5 + i], 0.0) << "row " << r << " drew " << i;
        seen.insert(i);
      }
      EXPECT_EQ(seen.size(), 3u);
    }
  }
}

TEST(Multinomial, ASeededGeneratorRepeatsTheDraws) {
  Tensor w = rand({4, 30}, kFloat32);
  Generator a(5), b(5);
  Tensor x = multinomial(w, 10, true, &a), y = multinomial(w, 10, true, &b);
  EXPECT_TRUE(allclose(x.to(kFloat64), y.to(kFloat64), 0, 0));
}

TEST(Multinomial, BadInputIsATypedError) {
  auto expect_error = [](auto f, const char* what) {
    try {
      f();
      ADD_FAILURE() << "expected an error: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[multinomial] expected"), std::string::npos)
          << e.what();
    }
  };
  expect_error([] { multinomial(tensor(std::vector<double>{1, -1}), 1); }, "negative");
  expect_error([] { multinomial(tensor(std::vector<double>{1, NAN}), 1); }, "nan");
  expect_error([] { multinomial(zeros({2, 3}), 1); }, "zero row");
  expect_error([] { multinomial(ones({3}), 4); }, "more than n without replacement");
  expect_error([] { multinomial(tensor(std::vector<double>{1, 0, 0}), 2); }, "too few non-zero");
  expect_error([] { multinomial(ones({2, 2, 2}), 1); }, "3-d");
  expect_error([] { multinomial(ones({3}, kInt64), 1); }, "integer weights");
  expect_error([] { multinomial(ones({3}), 0); }, "no samples");
}

}  // namespace
}  // namespace tessera
