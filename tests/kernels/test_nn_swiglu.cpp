// swiglu_forward / swiglu_backward against the double reference and finite differences.
#include <gtest/gtest.h>

#include <iterator>

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

struct SwigluShape {
  int B, T, F;  // B = 0: a 2-D (T, F) input
};

TEST(NnSwiglu, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (SwigluShape s : {SwigluShape{0, 1, 1}, SwigluShape{0, 7, 13}, SwigluShape{2, 5, 33}, SwigluShape{4, 16, 2048}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " F=" << s.F);
    const size_t n = size_t(std::max(s.B, 1)) * s.T * s.F;
    auto shape = [&](std::vector<float>& v) { return s.B ? host_view(v, {s.B, s.T, s.F}) : host_view(v, {s.T, s.F}); };
    // Wide gates reach the saturated ends of the sigmoid; the first few hit exp's overflow.
    auto gate = random_normal(n, seed + 1, 4.0f);
    const float extremes[] = {-100.0f, 100.0f, -88.0f, 88.0f, -20.0f, 20.0f, 0.0f};
    for (size_t i = 0; i < n && i < std::size(extremes); ++i) gate[i] = extremes[i];
    auto up = random_normal(n, seed + 2);
    auto dout = random_normal(n, seed + 3);
    auto dgate = random_normal(n, seed + 4), dup = random_normal(n, seed + 5);  // non-zero: must add
    std::vector<float> out(n);

    kernels::swiglu_forward(shape(out), shape(gate), shape(up));
    auto gate_d = to_double(gate), up_d = to_double(up);
    std::vector<double> out_r(n);
    ref::swiglu_forward(out_r.data(), gate_d.data(), up_d.data(), n);
    // fast_exp is within 2 ulp of expf; with the division and two products, observed ~2e-7
    // relative (floor 1: absolute for the tiny values at very negative gates).
    EXPECT_LE(max_rel(out, out_r, 1.0), 2e-6);

    auto dgate_r = to_double(dgate), dup_r = to_double(dup);
    kernels::swiglu_backward(shape(dgate), shape(dup), shape(dout), shape(gate), shape(up));
    ref::swiglu_backward(dgate_r.data(), dup_r.data(), to_double(dout).data(), gate_d.data(), up_d.data(), n);
    // Observed ~6e-7: the kernel avoids the cancellation of 1 − sigmoid(g) at large g, which
    // would leave an absolute error of ~g·6e-8 in the factor 1 + g·(1 − sigmoid(g)).
    EXPECT_LE(max_rel(dgate, dgate_r, 1.0), 2e-6);
    EXPECT_LE(max_rel(dup, dup_r, 1.0), 2e-6);
  }
}

TEST(NnSwiglu, ReferenceGradientsMatchFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int n = 24;
  auto gate = to_double(random_normal(n, seed + 1, 3.0f));
  auto up = to_double(random_normal(n, seed + 2));
  auto dout = to_double(random_normal(n, seed + 3));
  std::vector<double> out(n);
  auto loss = [&] {
    ref::swiglu_forward(out.data(), gate.data(), up.data(), n);
    return dot(out, dout);
  };
  std::vector<double> dgate(n), dup(n);
  ref::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  EXPECT_LE(max_rel(dgate, numerical_gradient(gate, loss), 1e-2), 1e-6);
  EXPECT_LE(max_rel(dup, numerical_gradient(up, loss), 1e-2), 1e-6);
}

TEST(NnSwiglu, BackwardAccumulates) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 5, F = 19;
  auto gate = random_normal(N * F, seed + 1, 3.0f), up = random_normal(N * F, seed + 2);
  auto dout = random_normal(N * F, seed + 3);
  auto backward = [&](std::vector<float>& dgate, std::vector<float>& dup) {
    kernels::swiglu_backward(host_view(dgate, {N, F}), host_view(dup, {N, F}), host_view(dout, {N, F}),
                             host_view(gate, {N, F}), host_view(up, {N, F}));
  };
  std::vector<float> dg1(N * F), du1(N * F), dg2(N * F), du2(N * F);
  backward(dg1, du1);
  backward(dg2, du2);
  backward(dg2, du2);
  auto doubled = [](const std::vector<float>& v) {
    auto d = to_double(v);
    for (double& x : d) x *= 2;
    return d;
  };
  // One add per element and call, so twice from zero is exactly 2x.
  EXPECT_EQ(max_rel(dg2, doubled(dg1), 1.0), 0.0);
  EXPECT_EQ(max_rel(du2, doubled(du1), 1.0), 0.0);
}

TEST(NnSwiglu, RejectsBadInput) {
  const int N = 4, F = 6;
  std::vector<float> g(N * F), u(N * F), o(N * F), big(N * (F + 1));
  auto gv = host_view(g, {N, F}), uv = host_view(u, {N, F}), ov = host_view(o, {N, F});
  auto wide = host_view(big, {N, F + 1});
  EXPECT_NO_THROW(kernels::swiglu_forward(ov, gv, uv));
  EXPECT_NO_THROW(kernels::swiglu_forward(host_view(o, {2, 2, F}), host_view(g, {2, 2, F}), host_view(u, {2, 2, F})));
  EXPECT_THROW(kernels::swiglu_forward(ov, gv, wide), ShapeError);
  EXPECT_THROW(kernels::swiglu_forward(wide, gv, uv), ShapeError);
  EXPECT_THROW(kernels::swiglu_forward(ov, gv, host_view(u, {2, 2, F})), ShapeError);
  EXPECT_THROW(kernels::swiglu_forward(host_view(o, {N * F}), host_view(g, {N * F}), host_view(u, {N * F})),
               ShapeError);
  EXPECT_THROW(kernels::swiglu_forward(ov, host_view(g, {F, N}).transposed(), uv), ShapeError);
  EXPECT_THROW(kernels::swiglu_forward(ov, as_bf16(gv), uv), UnsupportedError);
  EXPECT_THROW(kernels::swiglu_forward(ov, gv, on_cuda(uv)), ShapeError);
  EXPECT_NO_THROW(kernels::swiglu_backward(gv, uv, ov, gv, uv));
  EXPECT_THROW(kernels::swiglu_backward(wide, uv, ov, gv, uv), ShapeError);
  EXPECT_THROW(kernels::swiglu_backward(gv, wide, ov, gv, uv), ShapeError);
  EXPECT_THROW(kernels::swiglu_backward(gv, uv, wide, gv, uv), ShapeError);
  EXPECT_THROW(kernels::swiglu_backward(gv, uv, ov, gv, kernels::Tensor{}), ShapeError);
  EXPECT_THROW(kernels::swiglu_backward(gv, as_bf16(uv), ov, gv, uv), UnsupportedError);
}

}  // namespace
}  // namespace precon::test
