// matmul_forward / matmul_backward (both weight layouts, with and without bias) against the
// double reference and finite differences.
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
using kernels::WeightLayout;
using namespace precon::test::nn;
namespace ref = kernels::reference;

struct MatmulShape {
  int B, T, C, OC;  // B = 0: a 2-D (T, C) input
};

const char* layout_name(WeightLayout layout) { return layout == WeightLayout::in_out ? "in_out" : "out_in"; }

Tensor weight_view(std::vector<float>& w, int C, int OC, WeightLayout layout) {
  return layout == WeightLayout::in_out ? host_view(w, {C, OC}) : host_view(w, {OC, C});
}

TEST(NnMatmul, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (MatmulShape s : {MatmulShape{0, 1, 1, 1}, MatmulShape{0, 7, 13, 5}, MatmulShape{2, 3, 16, 24},
                        MatmulShape{0, 5, 33, 17}, MatmulShape{3, 11, 64, 96},
                        MatmulShape{4, 16, 192, 160}})
    for (WeightLayout layout : {WeightLayout::in_out, WeightLayout::out_in})
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " OC=" << s.OC << " "
                                        << layout_name(layout) << (with_bias ? " bias" : " no bias"));
        const int N = std::max(s.B, 1) * s.T, C = s.C, OC = s.OC;
        auto rows = [&](std::vector<float>& v, int last) {
          return s.B ? host_view(v, {s.B, s.T, last}) : host_view(v, {s.T, last});
        };
        auto inp = random_normal(size_t(N) * C, seed + 1);
        auto weight = random_normal(size_t(C) * OC, seed + 2);
        auto bias = random_normal(OC, seed + 3);
        auto dout = random_normal(size_t(N) * OC, seed + 4);
        auto dinp = random_normal(inp.size(), seed + 5);  // non-zero: the backward must add
        auto dweight = random_normal(weight.size(), seed + 6);
        auto dbias = random_normal(OC, seed + 7);
        std::vector<float> out(size_t(N) * OC, NAN);  // must be overwritten
        const Tensor b = with_bias ? host_view(bias, {OC}) : Tensor{};

        kernels::matmul_forward(rows(out, OC), rows(inp, C), weight_view(weight, C, OC, layout), b, layout);
        std::vector<double> out_r(out.size());
        auto inp_d = to_double(inp), weight_d = to_double(weight), bias_d = to_double(bias);
        ref::matmul_forward(out_r.data(), inp_d.data(), weight_d.data(), with_bias ? bias_d.data() : nullptr, N, C,
                            OC, layout);
        // Dot products of C <= 192 unit normals: fp32 error ~sqrt(C) * 6e-8 * |terms|, relative
        // to outputs of size ~sqrt(C); a floor of sqrt(C) makes 1e-5 a safe bound.
        EXPECT_LE(max_rel(out, out_r, std::sqrt(C)), 1e-5);

        auto dinp_r = to_double(dinp), dweight_r = to_double(dweight), dbias_r = to_double(dbias);
        kernels::matmul_backward(rows(dinp, C), weight_view(dweight, C, OC, layout),
                                 with_bias ? host_view(dbias, {OC}) : Tensor{}, rows(dout, OC), rows(inp, C),
                                 weight_view(weight, C, OC, layout), layout);
        ref::matmul_backward(dinp_r.data(), dweight_r.data(), with_bias ? dbias_r.data() : nullptr,
                             to_double(dout).data(), inp_d.data(), weight_d.data(), N, C, OC, layout);
        // Same reasoning with sums over OC (dinp) and N (dweight, dbias) terms.
        EXPECT_LE(max_rel(dinp, dinp_r, std::sqrt(OC)), 1e-5);
        EXPECT_LE(max_rel(dweight, dweight_r, std::sqrt(N)), 1e-5);
        if (with_bias) {
          EXPECT_LE(max_rel(dbias, dbias_r, std::sqrt(N)), 1e-5);
        } else {
          EXPECT_EQ(dbias, random_normal(OC, seed + 7));  // untouched
        }
      }
}

TEST(NnMatmul, ReferenceGradientsMatchFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 3, C = 4, OC = 5;
  for (WeightLayout layout : {WeightLayout::in_out, WeightLayout::out_in}) {
    SCOPED_TRACE(layout_name(layout));
    auto inp = to_double(random_normal(N * C, seed + 1));
    auto weight = to_double(random_normal(C * OC, seed + 2));
    auto bias = to_double(random_normal(OC, seed + 3));
    auto dout = to_double(random_normal(N * OC, seed + 4));
    std::vector<double> out(N * OC);
    auto loss = [&] {
      ref::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC, layout);
      return dot(out, dout);
    };
    std::vector<double> dinp(N * C), dweight(C * OC), dbias(OC);
    ref::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), N, C,
                         OC, layout);
    // Bilinear: central differences are exact up to rounding (~1e-10).
    EXPECT_LE(max_rel(dinp, numerical_gradient(inp, loss), 1e-2), 1e-6);
    EXPECT_LE(max_rel(dweight, numerical_gradient(weight, loss), 1e-2), 1e-6);
    EXPECT_LE(max_rel(dbias, numerical_gradient(bias, loss), 1e-2), 1e-6);
  }
}

TEST(NnMatmul, BackwardAccumulatesAndSkipsEmptyGradients) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 6, C = 7, OC = 9;
  auto inp = random_normal(N * C, seed + 1), weight = random_normal(C * OC, seed + 2);
  auto dout = random_normal(N * OC, seed + 3);
  auto backward = [&](Tensor dinp, Tensor dweight, Tensor dbias) {
    kernels::matmul_backward(dinp, dweight, dbias, host_view(dout, {N, OC}), host_view(inp, {N, C}),
                             host_view(weight, {OC, C}), WeightLayout::out_in);
  };
  std::vector<float> dinp1(N * C), dw1(C * OC), db1(OC), dinp2(N * C), dw2(C * OC), db2(OC);
  backward(host_view(dinp1, {N, C}), host_view(dw1, {OC, C}), host_view(db1, {OC}));
  backward(host_view(dinp2, {N, C}), host_view(dw2, {OC, C}), host_view(db2, {OC}));
  backward(host_view(dinp2, {N, C}), host_view(dw2, {OC, C}), host_view(db2, {OC}));
  auto doubled = [](const std::vector<float>& v) {
    auto d = to_double(v);
    for (double& x : d) x *= 2;
    return d;
  };
  // sgemm with beta = 1 may fold the old value into its own summation order: a few ulp.
  EXPECT_LE(max_rel(dinp2, doubled(dinp1), 1.0), 1e-6);
  EXPECT_LE(max_rel(dw2, doubled(dw1), 1.0), 1e-6);
  EXPECT_LE(max_rel(db2, doubled(db1), 1.0), 1e-6);

  std::vector<float> only_dw(C * OC);
  backward(Tensor{}, host_view(only_dw, {OC, C}), Tensor{});
  EXPECT_EQ(only_dw, dw1);
}

TEST(NnMatmul, RejectsBadInput) {
  const int N = 4, C = 6, OC = 5;
  std::vector<float> inp(N * C), w(C * OC), bias(OC), out(N * OC), big(N * (C + OC + 1));
  auto x = host_view(inp, {N, C}), y = host_view(out, {N, OC}), b = host_view(bias, {OC});
  auto w_io = host_view(w, {C, OC}), w_oi = host_view(w, {OC, C});
  EXPECT_NO_THROW(kernels::matmul_forward(y, x, w_io, b, WeightLayout::in_out));
  EXPECT_NO_THROW(kernels::matmul_forward(y, x, w_oi, b, WeightLayout::out_in));
  EXPECT_THROW(kernels::matmul_forward(y, x, w_oi, b, WeightLayout::in_out), ShapeError);
  EXPECT_THROW(kernels::matmul_forward(y, x, w_io, host_view(big, {OC + 1}), WeightLayout::in_out), ShapeError);
  EXPECT_THROW(kernels::matmul_forward(host_view(big, {N, OC + 1}), x, w_io, b, WeightLayout::in_out), ShapeError);
  EXPECT_THROW(kernels::matmul_forward(host_view(out, {2, 2, OC}), x, w_io, b, WeightLayout::in_out), ShapeError);
  EXPECT_THROW(kernels::matmul_forward(host_view(out, {2, 2, OC}), host_view(inp, {1, N, C}), w_io, b,
                                       WeightLayout::in_out),
               ShapeError);  // same numel, different leading dims
  EXPECT_THROW(kernels::matmul_forward(y, x, host_view(w, {C * OC}), b, WeightLayout::in_out), ShapeError);
  EXPECT_THROW(kernels::matmul_forward(y, x, as_bf16(w_io), b, WeightLayout::in_out), UnsupportedError);
  EXPECT_THROW(kernels::matmul_forward(y, x, on_cuda(w_io), b, WeightLayout::in_out), ShapeError);
  EXPECT_THROW(kernels::matmul_backward(x, w_io, b, host_view(big, {N, OC + 1}), x, w_io, WeightLayout::in_out),
               ShapeError);
  EXPECT_THROW(kernels::matmul_backward(x, w_oi, b, y, x, w_io, WeightLayout::in_out), ShapeError);
  EXPECT_THROW(kernels::matmul_backward(x, w_io, host_view(big, {C}), y, x, w_io, WeightLayout::in_out), ShapeError);
  EXPECT_THROW(kernels::matmul_backward(on_cuda(x), w_io, b, y, x, w_io, WeightLayout::in_out), ShapeError);
}

}  // namespace
}  // namespace precon::test
