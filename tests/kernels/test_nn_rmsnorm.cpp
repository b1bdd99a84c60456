// rmsnorm_forward / rmsnorm_backward against the double reference and finite differences.
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
using kernels::Tensor;
using kernels::UnsupportedError;
using namespace precon::test::nn;
namespace ref = kernels::reference;

struct RmsShape {
  int B, T, C;  // B = 0: a 2-D (T, C) input
  float scale;  // of the input: 1e-3 makes eps comparable with mean(x²)
  float eps;
};

TEST(NnRmsnorm, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (RmsShape s : {RmsShape{0, 1, 1, 1, 1e-5f}, RmsShape{0, 7, 13, 1, 1e-6f}, RmsShape{2, 5, 32, 1, 1e-5f},
                     RmsShape{3, 3, 97, 1e-3f, 1e-5f}, RmsShape{0, 4, 3, 100, 1e-6f}, RmsShape{2, 8, 768, 1, 1e-5f},
                     RmsShape{1, 3, 4, 1, 0.0f}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " scale=" << s.scale
                                      << " eps=" << s.eps);
    const int N = std::max(s.B, 1) * s.T, C = s.C;
    auto shape = [&](std::vector<float>& v) { return s.B ? host_view(v, {s.B, s.T, C}) : host_view(v, {s.T, C}); };
    auto inp = random_normal(size_t(N) * C, seed + 1, s.scale);
    auto weight = random_normal(C, seed + 2);
    auto dout = random_normal(size_t(N) * C, seed + 3);
    auto dinp = random_normal(inp.size(), seed + 4);  // non-zero: the backward must add
    auto dweight = random_normal(C, seed + 5);
    std::vector<float> out(inp.size()), rstd(N);

    kernels::rmsnorm_forward(shape(out), host_view(rstd, {N}), shape(inp), host_view(weight, {C}), s.eps);
    std::vector<double> out_r(out.size()), rstd_r(N);
    auto inp_d = to_double(inp), weight_d = to_double(weight);
    ref::rmsnorm_forward(out_r.data(), rstd_r.data(), inp_d.data(), weight_d.data(), N, C, s.eps);
    // fp32 sums of C <= 768 squares, one sqrt: observed ~2e-7 relative. The outputs are
    // O(|weight|) whatever the input scale (floor 1); rstd ranges from 1e-2 to ~1e3, hence relative.
    EXPECT_LE(max_rel(out, out_r, 1.0), 2e-6);
    EXPECT_LE(max_rel(rstd, rstd_r, 1e-3), 2e-6);

    auto dinp_r = to_double(dinp), dweight_r = to_double(dweight);
    kernels::rmsnorm_backward(shape(dinp), host_view(dweight, {C}), shape(dout), shape(inp), host_view(weight, {C}),
                              host_view(rstd, {N}));
    ref::rmsnorm_backward(dinp_r.data(), dweight_r.data(), to_double(dout).data(), inp_d.data(), weight_d.data(),
                          rstd_r.data(), N, C);
    // dinp is scaled by rstd (up to ~300 at scale 1e-3; for C = 1 its two terms cancel to ~eps·rstd³),
    // so it is compared with a floor of rstd (observed ~5e-7); dweight sums N <= 16 rows of O(1)
    // terms onto an O(1) start (observed ~1.5e-6).
    double rstd_max = 1;
    for (double r : rstd_r) rstd_max = std::max(rstd_max, r);
    EXPECT_LE(max_rel(dinp, dinp_r, rstd_max), 5e-6);
    EXPECT_LE(max_rel(dweight, dweight_r, 1.0), 1e-5);
  }
}

TEST(NnRmsnorm, ReferenceGradientsMatchFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 3, C = 5;
  const double eps = 1e-2;  // large enough to take part in the derivative
  auto inp = to_double(random_normal(N * C, seed + 1));
  auto weight = to_double(random_normal(C, seed + 2));
  auto dout = to_double(random_normal(N * C, seed + 3));
  std::vector<double> out(N * C), rstd(N);
  auto loss = [&] {
    ref::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps);
    return dot(out, dout);
  };
  loss();
  std::vector<double> dinp(N * C), dweight(C);
  ref::rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(), N, C);
  // Smooth in every argument; central differences in double are good to ~1e-9 here.
  EXPECT_LE(max_rel(dinp, numerical_gradient(inp, loss), 1e-2), 1e-6);
  EXPECT_LE(max_rel(dweight, numerical_gradient(weight, loss), 1e-2), 1e-6);
}

TEST(NnRmsnorm, BackwardAccumulatesAndSkipsEmptyGradients) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 6, C = 10;
  auto inp = random_normal(N * C, seed + 1), weight = random_normal(C, seed + 2);
  auto dout = random_normal(N * C, seed + 3);
  std::vector<float> out(N * C), rstd(N);
  kernels::rmsnorm_forward(host_view(out, {N, C}), host_view(rstd, {N}), host_view(inp, {N, C}), host_view(weight, {C}),
                           1e-5f);
  auto backward = [&](Tensor dinp, Tensor dweight) {
    kernels::rmsnorm_backward(dinp, dweight, host_view(dout, {N, C}), host_view(inp, {N, C}), host_view(weight, {C}),
                              host_view(rstd, {N}));
  };
  std::vector<float> dinp1(N * C), dw1(C), dinp2(N * C), dw2(C);
  backward(host_view(dinp1, {N, C}), host_view(dw1, {C}));
  backward(host_view(dinp2, {N, C}), host_view(dw2, {C}));
  backward(host_view(dinp2, {N, C}), host_view(dw2, {C}));
  auto doubled = [](const std::vector<float>& v) {
    auto d = to_double(v);
    for (double& x : d) x *= 2;
    return d;
  };
  // x + x is exact in fp32, and each call adds one pre-summed value per element.
  EXPECT_EQ(max_rel(dinp2, doubled(dinp1), 1.0), 0.0);
  EXPECT_EQ(max_rel(dw2, doubled(dw1), 1.0), 0.0);

  std::vector<float> only_dinp(N * C), only_dw(C);
  backward(host_view(only_dinp, {N, C}), Tensor{});
  backward(Tensor{}, host_view(only_dw, {C}));
  EXPECT_EQ(only_dinp, dinp1);
  EXPECT_EQ(only_dw, dw1);
}

TEST(NnRmsnorm, RejectsBadInput) {
  const int N = 4, C = 6;
  std::vector<float> inp(N * C), out(N * C), rstd(N), w(C), big(N * (C + 1));
  auto x = host_view(inp, {N, C}), y = host_view(out, {N, C});
  auto r = host_view(rstd, {N}), wt = host_view(w, {C});
  EXPECT_NO_THROW(kernels::rmsnorm_forward(y, r, x, wt, 1e-5f));
  EXPECT_THROW(kernels::rmsnorm_forward(y, r, x, host_view(big, {C + 1}), 1e-5f), ShapeError);
  EXPECT_THROW(kernels::rmsnorm_forward(y, host_view(big, {N - 1}), x, wt, 1e-5f), ShapeError);
  EXPECT_THROW(kernels::rmsnorm_forward(host_view(big, {N, C + 1}), r, x, wt, 1e-5f), ShapeError);
  EXPECT_THROW(kernels::rmsnorm_forward(y, r, host_view(inp, {1, 2, 2, C}), wt, 1e-5f), ShapeError);
  EXPECT_THROW(kernels::rmsnorm_forward(y, r, x.transposed(), wt, 1e-5f), ShapeError);
  EXPECT_THROW(kernels::rmsnorm_forward(as_bf16(y), r, as_bf16(x), wt, 1e-5f), UnsupportedError);
  EXPECT_THROW(kernels::rmsnorm_forward(y, r, x, on_cuda(wt), 1e-5f), ShapeError);
  for (float eps : {-1e-5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    EXPECT_THROW(kernels::rmsnorm_forward(y, r, x, wt, eps), UnsupportedError) << "eps " << eps;
  EXPECT_NO_THROW(kernels::rmsnorm_backward(x, wt, y, x, wt, r));
  EXPECT_THROW(kernels::rmsnorm_backward(x, wt, host_view(big, {N, C + 1}), x, wt, r), ShapeError);
  EXPECT_THROW(kernels::rmsnorm_backward(host_view(big, {N, C + 1}), wt, y, x, wt, r), ShapeError);
  EXPECT_THROW(kernels::rmsnorm_backward(x, host_view(big, {C + 1}), y, x, wt, r), ShapeError);
  EXPECT_THROW(kernels::rmsnorm_backward(x, wt, y, x, wt, host_view(big, {N + 1})), ShapeError);
  EXPECT_THROW(kernels::rmsnorm_backward(x, wt, y, x, wt, on_cuda(r)), ShapeError);
  EXPECT_THROW(kernels::rmsnorm_backward(x, as_bf16(wt), y, x, wt, r), UnsupportedError);
}

}  // namespace
}  // namespace precon::test
