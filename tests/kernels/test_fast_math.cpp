// fast_exp against libm's expf over its whole range, and at the edges.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/fast_math.h"

namespace precon::kernels::cpu {
namespace {

TEST(FastMath, ExpWithinTwoUlpOfLibm) {
  float worst = 0;
  for (float x = -87.0f; x <= 88.3f; x += 0.000731f) {
    const float want = std::exp(x), got = fast_exp(x);
    const float ulp = std::nextafter(want, std::numeric_limits<float>::infinity()) - want;
    worst = std::max(worst, std::fabs(got - want) / ulp);
  }
  EXPECT_LE(worst, 2.0f);
}

TEST(FastMath, ExpEdges) {
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-100.0f), 0.0f);
  EXPECT_EQ(fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isinf(fast_exp(100.0f)));
  EXPECT_TRUE(std::isinf(fast_exp(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(fast_exp(NAN)));
}

}  // namespace
}  // namespace precon::kernels::cpu
