// attention_forward / attention_backward against the double reference and finite differences, and
// attention_forward's per-row largest logit against a naive double loop.
#include <gtest/gtest.h>

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

struct AttShape {
  int B, T, C, NH;
};

TEST(NnAttention, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  // Head sizes 1, 3 (odd), 5 (odd), 8, 16 and 24; T = 1, primes, and a GPT-like 64.
  for (AttShape s : {AttShape{1, 1, 1, 1}, AttShape{2, 7, 9, 3}, AttShape{1, 13, 10, 2}, AttShape{2, 5, 8, 1},
                     AttShape{3, 17, 48, 3}, AttShape{2, 64, 96, 4}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH);
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    auto qkv = random_normal(size_t(B) * T * 3 * C, seed + 1);
    auto dout = random_normal(size_t(B) * T * C, seed + 2);
    auto dqkv = random_normal(qkv.size(), seed + 3);  // non-zero: the backward must add
    std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T, NAN);  // att must be overwritten
    std::vector<float> datt(att.size(), NAN);                                     // scratch: contents irrelevant

    std::vector<float> row_max(size_t(B) * NH * T, NAN);
    kernels::attention_forward(host_view(out, {B, T, C}), host_view(att, {B, NH, T, T}),
                               host_view(qkv, {B, T, 3 * C}), NH, host_view(row_max, {B, NH, T}));
    // Each row's largest causal logit, computed naively in double.
    const int hs = C / NH;
    std::vector<double> row_max_r(row_max.size(), -INFINITY);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t)
          for (int u = 0; u <= t; ++u) {
            double dot = 0;
            for (int i = 0; i < hs; ++i)
              dot += double(qkv[(size_t(b) * T + t) * 3 * C + h * hs + i]) * qkv[(size_t(b) * T + u) * 3 * C + C + h * hs + i];
            double& m = row_max_r[(size_t(b) * NH + h) * T + t];
            m = std::max(m, dot / std::sqrt(double(hs)));
          }
    // Scores are sgemm dot products of hs unit normals, scaled: a few ulp of their O(sqrt(hs)) size.
    EXPECT_LE(max_rel(row_max, row_max_r, 1.0), 1e-5);
    std::vector<double> out_r(out.size()), att_r(att.size());
    auto qkv_d = to_double(qkv);
    ref::attention_forward(out_r.data(), att_r.data(), qkv_d.data(), B, T, C, NH);
    // Probabilities in [0, 1] from exp of O(sqrt(hs)) scores: a few ulp of exp, relative to 1.
    // Outputs are convex combinations of unit normals, summed over <= 64 terms.
    EXPECT_LE(max_rel(att, att_r, 1.0), 2e-6);
    EXPECT_LE(max_rel(out, out_r, 1.0), 5e-6);
    for (int bh = 0; bh < B * NH; ++bh)
      for (int t = 0; t < T; ++t)
        for (int u = t + 1; u < T; ++u) ASSERT_EQ(att[(size_t(bh) * T + t) * T + u], 0.0f);

    auto dqkv_r = to_double(dqkv);
    kernels::attention_backward(host_view(dqkv, {B, T, 3 * C}), host_view(datt, {B, NH, T, T}),
                                host_view(dout, {B, T, C}), host_view(qkv, {B, T, 3 * C}),
                                host_view(att, {B, NH, T, T}), NH);
    ref::attention_backward(dqkv_r.data(), to_double(dout).data(), qkv_d.data(), att_r.data(), B, T, C, NH);
    // Gradients of O(1) size built from sums over T and hs terms of O(1) products.
    EXPECT_LE(max_rel(dqkv, dqkv_r, 1.0), 2e-5);
  }
}

TEST(NnAttention, ReferenceGradientMatchesFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (AttShape s : {AttShape{1, 4, 6, 2}, AttShape{2, 3, 3, 1}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH);
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    auto qkv = to_double(random_normal(B * T * 3 * C, seed + 1));
    auto dout = to_double(random_normal(B * T * C, seed + 2));
    std::vector<double> out(B * T * C), att(B * NH * T * T);
    auto loss = [&] {
      ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      return dot(out, dout);
    };
    loss();
    std::vector<double> dqkv(qkv.size());
    ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    // Smooth (softmax of bilinear scores); central differences good to ~1e-9 here.
    EXPECT_LE(max_rel(dqkv, numerical_gradient(qkv, loss), 1e-2), 1e-6);
  }
}

TEST(NnAttention, BackwardAccumulates) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int B = 2, T = 6, C = 12, NH = 4;
  auto qkv = random_normal(B * T * 3 * C, seed + 1), dout = random_normal(B * T * C, seed + 2);
  std::vector<float> out(B * T * C), att(B * NH * T * T), datt(att.size());
  kernels::attention_forward(host_view(out, {B, T, C}), host_view(att, {B, NH, T, T}), host_view(qkv, {B, T, 3 * C}),
                             NH);
  std::vector<float> once(qkv.size()), twice(qkv.size());
  auto backward = [&](std::vector<float>& dqkv) {
    kernels::attention_backward(host_view(dqkv, {B, T, 3 * C}), host_view(datt, {B, NH, T, T}),
                                host_view(dout, {B, T, C}), host_view(qkv, {B, T, 3 * C}),
                                host_view(att, {B, NH, T, T}), NH);
  };
  backward(once);
  backward(twice);
  backward(twice);
  auto doubled = to_double(once);
  for (double& x : doubled) x *= 2;
  // sgemm with beta = 1 may fold the old value into its own summation order: a few ulp.
  EXPECT_LE(max_rel(twice, doubled, 1.0), 1e-6);
}

TEST(NnAttention, RejectsBadInput) {
  const int B = 2, T = 3, C = 6, NH = 2;
  std::vector<float> qkv(B * T * 3 * C), out(B * T * C), att(B * NH * T * T), big(B * T * 4 * C);
  auto x = host_view(qkv, {B, T, 3 * C}), y = host_view(out, {B, T, C}), a = host_view(att, {B, NH, T, T});
  EXPECT_NO_THROW(kernels::attention_forward(y, a, x, NH));
  EXPECT_THROW(kernels::attention_forward(y, host_view(att, {B, 1, T, 2 * T}), x, 4), ShapeError);  // 6 % 4
  EXPECT_THROW(kernels::attention_forward(y, a, x, 0), ShapeError);
  EXPECT_THROW(kernels::attention_forward(y, a, x, -2), ShapeError);
  EXPECT_THROW(kernels::attention_forward(y, a, host_view(big, {B, T, 3 * C + 1}), NH), ShapeError);
  EXPECT_THROW(kernels::attention_forward(y, host_view(att, {B, NH, T * T}), x, NH), ShapeError);
  EXPECT_THROW(kernels::attention_forward(y, host_view(att, {B, 1, T, 2 * T}), x, NH), ShapeError);
  EXPECT_THROW(kernels::attention_forward(host_view(out, {B, C, T}), a, x, NH), ShapeError);
  EXPECT_THROW(kernels::attention_forward(as_bf16(y), as_bf16(a), as_bf16(x), NH), UnsupportedError);
  EXPECT_THROW(kernels::attention_forward(y, on_cuda(a), x, NH), ShapeError);
  std::vector<float> rm(B * NH * T);
  EXPECT_NO_THROW(kernels::attention_forward(y, a, x, NH, host_view(rm, {B, NH, T})));
  EXPECT_THROW(kernels::attention_forward(y, a, x, NH, host_view(rm, {B, T, NH})), ShapeError);
  EXPECT_THROW(kernels::attention_backward(x, a, host_view(big, {B, T, C + 1}), x, a, NH), ShapeError);
  EXPECT_THROW(kernels::attention_backward(host_view(big, {B, T, 3 * C + 3}), a, y, x, a, NH), ShapeError);
  EXPECT_THROW(kernels::attention_backward(x, a, y, x, a, 5), ShapeError);
  EXPECT_THROW(kernels::attention_backward(x, a, y, x, on_cuda(a), NH), ShapeError);
}

}  // namespace
}  // namespace precon::test
