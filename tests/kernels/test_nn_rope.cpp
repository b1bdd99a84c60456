// rope_forward / rope_backward against the double reference, finite differences, hand-computed
// rotations and the forward-backward round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/error.h"
#include "kernels/nn.h"
#include "kernels/reference/nn_reference.h"
#include "tests/kernels/test_nn_util.h"

namespace precon::test {
namespace {

using kernels::ShapeError;
using kernels::UnsupportedError;
using namespace precon::test::nn;
namespace ref = kernels::reference;

struct RopeShape {
  int B, T, NH, hd;
  double theta;
};

TEST(NnRope, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  // T = 2048 reaches angles of 2047 rad, where an fp32 angle would be off by ~1e-4.
  for (RopeShape s : {RopeShape{1, 1, 1, 2, 10000}, RopeShape{2, 7, 3, 6, 10000}, RopeShape{3, 5, 2, 10, 500000},
                      RopeShape{2, 33, 4, 64, 10000}, RopeShape{1, 2048, 1, 128, 10000}, RopeShape{2, 9, 5, 2, 7.5}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH << " hd=" << s.hd
                                      << " theta=" << s.theta);
    const int C = s.NH * s.hd;
    const size_t n = size_t(s.B) * s.T * C;
    auto x = random_normal(n, seed + 1);
    auto x_r = to_double(x);
    kernels::rope_forward(host_view(x, {s.B, s.T, C}), s.NH, s.theta);
    ref::rope_forward(x_r.data(), s.B, s.T, s.NH, s.hd, s.theta);
    // cos and sin rounded to fp32, then two fp32 products and a sum: a few 1e-7 of the O(1) inputs.
    EXPECT_LE(max_rel(x, x_r, 1.0), 1e-6) << "forward";

    auto dx = random_normal(n, seed + 2);
    auto dx_r = to_double(dx);
    kernels::rope_backward(host_view(dx, {s.B, s.T, C}), s.NH, s.theta);
    ref::rope_backward(dx_r.data(), s.B, s.T, s.NH, s.hd, s.theta);
    EXPECT_LE(max_rel(dx, dx_r, 1.0), 1e-6) << "backward";
  }
}

// YaRN as DeepSeek-V3 scales its 64 rotary channels (factor 40 over 4096 positions, beta 32 and 1:
// pairs 10 to 23 on the ramp), a head whose original context (6 positions) puts low and high both
// at 0 (the +0.001 rule: pair 0 extrapolated, the rest interpolated), and the cos/sin factor.
kernels::Rope yarn_rope_of(double theta, double factor, double original_max, double attention_factor) {
  kernels::Rope r(theta);
  r.factor = factor;
  r.original_max = original_max;
  r.attention_factor = attention_factor;
  return r;
}

TEST(NnRope, YarnMatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  struct YarnCase {
    int B, T, NH, hd;
    kernels::Rope rope;
  };
  for (const YarnCase& s : {YarnCase{2, 300, 2, 64, yarn_rope_of(10000, 40, 4096, 1.0)},
                            YarnCase{1, 50, 3, 8, yarn_rope_of(10000, 4, 6, 1.1386)},
                            YarnCase{2, 9, 1, 16, yarn_rope_of(500000, 8, 100, 0.7)}}) {
    SCOPED_TRACE(::testing::Message() << "hd=" << s.hd << " factor=" << s.rope.factor);
    const int C = s.NH * s.hd;
    const size_t n = size_t(s.B) * s.T * C;
    auto x = random_normal(n, seed + 1);
    auto x_r = to_double(x);
    kernels::rope_forward(host_view(x, {s.B, s.T, C}), s.NH, s.rope);
    ref::rope_forward(x_r.data(), s.B, s.T, s.NH, s.hd, s.rope);
    EXPECT_LE(max_rel(x, x_r, 1.0), 1e-6) << "forward";
    auto plain = to_double(x);
    ref::rope_backward(plain.data(), s.B, s.T, s.NH, s.hd, kernels::Rope(s.rope.theta));
    EXPECT_GT(max_rel(x, plain, 1.0), 1e-2) << "YaRN changed nothing";
    auto dx = random_normal(n, seed + 2);
    auto dx_r = to_double(dx);
    kernels::rope_backward(host_view(dx, {s.B, s.T, C}), s.NH, s.rope);
    ref::rope_backward(dx_r.data(), s.B, s.T, s.NH, s.hd, s.rope);
    EXPECT_LE(max_rel(dx, dx_r, 1.0), 1e-6) << "backward";
  }
  // Known frequencies of DeepSeek-V3's ramp: pair 0 (turning 4096/2π ≈ 652 times over the original
  // context, more than beta_fast) keeps theta^0 = 1, pair 31 (0.09 turns, fewer than beta_slow) is
  // theta^(−62/64) / 40, pair 16 sits 6/13 of the way up the ramp from low = 10 to high = 23.
  const kernels::Rope v3 = yarn_rope_of(10000, 40, 4096, 1.0);
  EXPECT_DOUBLE_EQ(v3.inv_freq(0, 64), 1.0);
  EXPECT_NEAR(v3.inv_freq(31, 64), std::pow(10000.0, -62.0 / 64) / 40, 1e-15);
  const double base16 = std::pow(10000.0, -32.0 / 64), ramp16 = 6.0 / 13.0;
  EXPECT_NEAR(v3.inv_freq(16, 64), base16 * (1 - ramp16) + base16 / 40 * ramp16, 1e-15);
  // Position 0 is the cos/sin factor times the identity.
  std::vector<float> x = {1, 2, 3, 4};
  kernels::rope_forward(host_view(x, {1, 1, 4}), 1, yarn_rope_of(10000, 4, 64, 1.25));
  EXPECT_EQ(x, (std::vector<float>{1.25f, 2.5f, 3.75f, 5.0f}));
}

TEST(NnRope, ReferenceGradientsMatchFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int B = 2, T = 4, NH = 2, hd = 6;
  const double theta = 100;
  auto x = to_double(random_normal(B * T * NH * hd, seed + 1));
  auto dout = to_double(random_normal(x.size(), seed + 2));
  auto loss = [&] {
    auto y = x;
    ref::rope_forward(y.data(), B, T, NH, hd, theta);
    return dot(y, dout);
  };
  auto dx = dout;
  ref::rope_backward(dx.data(), B, T, NH, hd, theta);
  // Linear in x, so central differences are exact up to rounding.
  EXPECT_LE(max_rel(dx, numerical_gradient(x, loss), 1e-2), 1e-6);
}

TEST(NnRope, KnownValues) {
  // Position 0 is the identity, bit for bit (cos 0 = 1, sin 0 = 0).
  {
    const int NH = 3, hd = 8;
    auto x = random_normal(NH * hd, test_seed());
    auto before = x;
    kernels::rope_forward(host_view(x, {1, 1, NH * hd}), NH, 10000);
    EXPECT_EQ(x, before);
    kernels::rope_backward(host_view(x, {1, 1, NH * hd}), NH, 10000);
    EXPECT_EQ(x, before);
  }
  // hd = 2: one pair rotated by angle t (theta^0 = 1, whatever theta).
  {
    std::vector<float> x = {1, 0, 1, 0, 0, 1, 2, -1};  // positions 0, 1, 2, 3
    kernels::rope_forward(host_view(x, {1, 4, 2}), 1, 10000);
    const std::vector<double> want = {1,
                                      0,
                                      std::cos(1.0),
                                      std::sin(1.0),
                                      -std::sin(2.0),
                                      std::cos(2.0),
                                      2 * std::cos(3.0) + std::sin(3.0),
                                      -std::cos(3.0) + 2 * std::sin(3.0)};
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], want[i], 3e-7) << "element " << i;
  }
  // hd = 4, rotate-half pairing (not interleaved): pairs (x0, x2) at angle t and (x1, x3) at
  // angle t·theta^(−1/2) = t/100 for theta = 10000, at position t = 1.
  {
    std::vector<float> x = {0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0};  // (t0, t1) for e0 then e1
    kernels::rope_forward(host_view(x, {2, 2, 4}), 1, 10000);
    const std::vector<double> want = {0, 0, 0, 0, std::cos(1.0),  0, std::sin(1.0), 0, 0,
                                      0, 0, 0, 0, std::cos(0.01), 0, std::sin(0.01)};
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], want[i], 1e-7) << "element " << i;
  }
}

TEST(NnRope, BackwardInvertsForward) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int B = 2, T = 257, NH = 3, hd = 16, C = NH * hd;
  auto x = random_normal(size_t(B) * T * C, seed + 1);
  const auto original = to_double(x);
  kernels::rope_forward(host_view(x, {B, T, C}), NH, 10000);
  EXPECT_GT(max_rel(x, original, 1.0), 0.1);  // it did rotate
  kernels::rope_backward(host_view(x, {B, T, C}), NH, 10000);
  // Two fp32 rotations with cos² + sin² = 1 to within fp32 rounding.
  EXPECT_LE(max_rel(x, original, 1.0), 1e-6);
}

TEST(NnRope, RejectsBadInput) {
  const int B = 2, T = 3, NH = 2, hd = 4, C = NH * hd;
  std::vector<float> x(B * T * C);
  auto v = host_view(x, {B, T, C});
  EXPECT_NO_THROW(kernels::rope_forward(v, NH, 10000));
  EXPECT_NO_THROW(kernels::rope_backward(v, NH, 10000));
  EXPECT_THROW(kernels::rope_forward(host_view(x, {B * T, C}), NH, 10000), ShapeError);  // no T
  EXPECT_THROW(kernels::rope_forward(v, 3, 10000), ShapeError);                          // 8 % 3
  EXPECT_THROW(kernels::rope_forward(v, 8, 10000), ShapeError);                          // hd = 1, odd
  EXPECT_THROW(kernels::rope_forward(host_view(x, {B, 4, 6}), 2, 10000), ShapeError);    // hd = 3, odd
  EXPECT_THROW(kernels::rope_forward(v, 0, 10000), ShapeError);
  EXPECT_THROW(kernels::rope_backward(v, -2, 10000), ShapeError);
  EXPECT_THROW(kernels::rope_forward(host_view(x, {B, C, T}).transposed(), NH, 10000), ShapeError);
  EXPECT_THROW(kernels::rope_forward(as_bf16(v), NH, 10000), UnsupportedError);
  for (double theta :
       {0.0, -10000.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(kernels::rope_forward(v, NH, theta), UnsupportedError) << "theta " << theta;
    EXPECT_THROW(kernels::rope_backward(v, NH, theta), UnsupportedError) << "theta " << theta;
  }
  EXPECT_NO_THROW(kernels::rope_forward(v, NH, yarn_rope_of(10000, 4, 64, 1.0)));
  EXPECT_THROW(kernels::rope_forward(v, NH, yarn_rope_of(10000, 0.5, 64, 1.0)), UnsupportedError);  // factor < 1
  EXPECT_THROW(kernels::rope_forward(v, NH, yarn_rope_of(10000, 4, 0, 1.0)), UnsupportedError);     // no context
  EXPECT_THROW(kernels::rope_forward(v, NH, yarn_rope_of(10000, 4, 64, 0.0)), UnsupportedError);    // a = 0
  kernels::Rope crossed = yarn_rope_of(10000, 4, 64, 1.0);
  crossed.beta_fast = 0.5;  // below beta_slow
  EXPECT_THROW(kernels::rope_backward(v, NH, crossed), UnsupportedError);
}

}  // namespace
}  // namespace precon::test
