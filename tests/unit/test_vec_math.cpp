// The vectorisable float exp/tanh used by the CPU kernels stay within a few ulp of libm.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/common/vec_math.h"

namespace tessera {
namespace {

double ulps(float got, double want) {
  double ulp = std::nextafter(static_cast<float>(std::fabs(want)), INFINITY) -
               std::fabs(static_cast<float>(want));
  return std::fabs(got - want) / ulp;
}

TEST(VecMath, ExpIsWithinFewUlp) {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0037f)
    worst = std::max(worst, ulps(detail::vexp(x), std::exp(double(x))));
  EXPECT_LT(worst, 3.0);
  EXPECT_EQ(detail::vexp(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isinf(detail::vexp(100.0f)));
  EXPECT_TRUE(std::isnan(detail::vexp(NAN)));
}

TEST(VecMath, TanhIsWithinFewUlp) {
  double worst = 0;
  for (float x = -12.0f; x < 12.0f; x += 0.00071f)
    worst = std::max(worst, ulps(detail::vtanh(x), std::tanh(double(x))));
  for (float x = 1e-30f; x < 1e-2f; x *= 1.37f)
    worst = std::max(worst, ulps(detail::vtanh(x), std::tanh(double(x))));
  EXPECT_LT(worst, 4.0);
  EXPECT_EQ(detail::vtanh(50.0f), 1.0f);
  EXPECT_EQ(detail::vtanh(-50.0f), -1.0f);
  EXPECT_EQ(detail::vtanh(INFINITY), 1.0f);
  EXPECT_TRUE(std::isnan(detail::vtanh(NAN)));
}

}  // namespace
}  // namespace tessera
