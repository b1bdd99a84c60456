// layernorm_forward / layernorm_backward against the double reference and finite differences.
#include <gtest/gtest.h>

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

struct LnShape {
  int B, T, C;   // B = 0: a 2-D (T, C) input
  float offset;  // added to the input: a large mean stresses the variance computation
};

TEST(NnLayernorm, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (LnShape s : {LnShape{0, 1, 1, 0}, LnShape{0, 7, 13, 0}, LnShape{2, 5, 32, 0}, LnShape{3, 3, 96, 10},
                    LnShape{0, 4, 3, -2}, LnShape{2, 8, 768, 1}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " offset=" << s.offset);
    const int N = std::max(s.B, 1) * s.T, C = s.C;
    auto shape = [&](std::vector<float>& v) {
      return s.B ? host_view(v, {s.B, s.T, C}) : host_view(v, {s.T, C});
    };
    auto inp = random_normal(size_t(N) * C, seed + 1);
    for (float& x : inp) x += s.offset;
    auto weight = random_normal(C, seed + 2), bias = random_normal(C, seed + 3);
    auto dout = random_normal(size_t(N) * C, seed + 4);
    auto dinp = random_normal(inp.size(), seed + 5);  // non-zero: the backward must add
    auto dweight = random_normal(C, seed + 6), dbias = random_normal(C, seed + 7);
    std::vector<float> out(inp.size()), mean(N), rstd(N);

    kernels::layernorm_forward(shape(out), host_view(mean, {N}), host_view(rstd, {N}), shape(inp),
                               host_view(weight, {C}), host_view(bias, {C}));
    std::vector<double> out_r(out.size()), mean_r(N), rstd_r(N);
    auto inp_d = to_double(inp), weight_d = to_double(weight);
    ref::layernorm_forward(out_r.data(), mean_r.data(), rstd_r.data(), inp_d.data(), weight_d.data(),
                           to_double(bias).data(), N, C);
    // fp32 sums over C <= 768 values plus the offset's cancellation: a few 1e-6 relative to the
    // O(1) outputs (floor 1); rstd can be as large as 1/sqrt(1e-5) for C = 1, hence relative.
    EXPECT_LE(max_rel(out, out_r, 1.0), 2e-5);
    EXPECT_LE(max_rel(mean, mean_r, 1.0), 1e-5);
    EXPECT_LE(max_rel(rstd, rstd_r, 1e-3), 2e-5);

    auto dinp_r = to_double(dinp), dweight_r = to_double(dweight), dbias_r = to_double(dbias);
    kernels::layernorm_backward(shape(dinp), host_view(dweight, {C}), host_view(dbias, {C}), shape(dout), shape(inp),
                                host_view(weight, {C}), host_view(mean, {N}), host_view(rstd, {N}));
    ref::layernorm_backward(dinp_r.data(), dweight_r.data(), dbias_r.data(), to_double(dout).data(), inp_d.data(),
                            weight_d.data(), mean_r.data(), rstd_r.data(), N, C);
    // dinp is scaled by rstd (up to ~300 for C = 1 where it is ~0 anyway), so it is compared
    // with a floor of rstd; the parameter gradients are sums over N <= 16 rows of O(1) terms.
    double rstd_max = 1;
    for (double r : rstd_r) rstd_max = std::max(rstd_max, r);
    EXPECT_LE(max_rel(dinp, dinp_r, rstd_max), 5e-5);
    EXPECT_LE(max_rel(dweight, dweight_r, 1.0), 2e-5);
    EXPECT_LE(max_rel(dbias, dbias_r, 1.0), 1e-5);
  }
}

TEST(NnLayernorm, ReferenceGradientsMatchFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 3, C = 5;
  auto inp = to_double(random_normal(N * C, seed + 1));
  auto weight = to_double(random_normal(C, seed + 2)), bias = to_double(random_normal(C, seed + 3));
  auto dout = to_double(random_normal(N * C, seed + 4));
  std::vector<double> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
    return dot(out, dout);
  };
  loss();
  std::vector<double> dinp(N * C), dweight(C), dbias(C);
  ref::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                          mean.data(), rstd.data(), N, C);
  // Smooth in every argument; central differences in double are good to ~1e-9 here.
  EXPECT_LE(max_rel(dinp, numerical_gradient(inp, loss), 1e-2), 1e-6);
  EXPECT_LE(max_rel(dweight, numerical_gradient(weight, loss), 1e-2), 1e-6);
  EXPECT_LE(max_rel(dbias, numerical_gradient(bias, loss), 1e-2), 1e-6);
}

TEST(NnLayernorm, BackwardAccumulatesAndSkipsEmptyGradients) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 6, C = 10;
  auto inp = random_normal(N * C, seed + 1), weight = random_normal(C, seed + 2), bias = random_normal(C, seed + 3);
  auto dout = random_normal(N * C, seed + 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  kernels::layernorm_forward(host_view(out, {N, C}), host_view(mean, {N}), host_view(rstd, {N}),
                             host_view(inp, {N, C}), host_view(weight, {C}), host_view(bias, {C}));
  auto backward = [&](Tensor dinp, Tensor dweight, Tensor dbias) {
    kernels::layernorm_backward(dinp, dweight, dbias, host_view(dout, {N, C}), host_view(inp, {N, C}),
                                host_view(weight, {C}), host_view(mean, {N}), host_view(rstd, {N}));
  };
  std::vector<float> dinp1(N * C), dw1(C), db1(C), dinp2(N * C), dw2(C), db2(C);
  backward(host_view(dinp1, {N, C}), host_view(dw1, {C}), host_view(db1, {C}));
  backward(host_view(dinp2, {N, C}), host_view(dw2, {C}), host_view(db2, {C}));
  backward(host_view(dinp2, {N, C}), host_view(dw2, {C}), host_view(db2, {C}));
  auto doubled = [](const std::vector<float>& v) {
    auto d = to_double(v);
    for (double& x : d) x *= 2;
    return d;
  };
  // x + x is exact in fp32, and each call adds one pre-summed value per element.
  EXPECT_EQ(max_rel(dinp2, doubled(dinp1), 1.0), 0.0);
  EXPECT_EQ(max_rel(dw2, doubled(dw1), 1.0), 0.0);
  EXPECT_EQ(max_rel(db2, doubled(db1), 1.0), 0.0);

  std::vector<float> only_dinp(N * C), only_dw(C);
  backward(host_view(only_dinp, {N, C}), Tensor{}, Tensor{});
  backward(Tensor{}, host_view(only_dw, {C}), Tensor{});
  EXPECT_EQ(only_dinp, dinp1);
  EXPECT_EQ(only_dw, dw1);
}

TEST(NnLayernorm, RejectsBadInput) {
  const int N = 4, C = 6;
  std::vector<float> inp(N * C), out(N * C), mean(N), rstd(N), w(C), b(C), big(N * (C + 1));
  auto x = host_view(inp, {N, C}), y = host_view(out, {N, C});
  auto m = host_view(mean, {N}), r = host_view(rstd, {N}), wt = host_view(w, {C}), bs = host_view(b, {C});
  EXPECT_NO_THROW(kernels::layernorm_forward(y, m, r, x, wt, bs));
  EXPECT_THROW(kernels::layernorm_forward(y, m, r, x, host_view(big, {C + 1}), bs), ShapeError);
  EXPECT_THROW(kernels::layernorm_forward(y, m, r, x, wt, host_view(big, {C - 1})), ShapeError);
  EXPECT_THROW(kernels::layernorm_forward(y, host_view(big, {N - 1}), r, x, wt, bs), ShapeError);
  EXPECT_THROW(kernels::layernorm_forward(host_view(big, {N, C + 1}), m, r, x, wt, bs), ShapeError);
  EXPECT_THROW(kernels::layernorm_forward(y, m, r, host_view(inp, {1, 2, 2, C}), wt, bs), ShapeError);
  EXPECT_THROW(kernels::layernorm_forward(y, m, r, x.transposed(), wt, bs), ShapeError);
  EXPECT_THROW(kernels::layernorm_forward(as_bf16(y), m, r, as_bf16(x), wt, bs), UnsupportedError);
  EXPECT_THROW(kernels::layernorm_forward(y, m, r, x, on_cuda(wt), bs), ShapeError);
  EXPECT_THROW(kernels::layernorm_backward(x, wt, bs, host_view(big, {N, C + 1}), x, wt, m, r), ShapeError);
  EXPECT_THROW(kernels::layernorm_backward(x, host_view(big, {C + 1}), bs, y, x, wt, m, r), ShapeError);
  EXPECT_THROW(kernels::layernorm_backward(x, wt, bs, y, x, wt, m, on_cuda(r)), ShapeError);
}

}  // namespace
}  // namespace precon::test
