// qkv_pack_forward / qkv_pack_backward (grouped-query attention's kv repeat) against the double
// reference, a hand-written layout and finite differences.
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

struct PackShape {
  int B, T, NH, NKV, hd;
};

TEST(NnQkvPack, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  // Grouped (4/2, 12/4), multi-query (6/1) and plain multi-head (8/8) attention.
  for (PackShape s : {PackShape{1, 1, 1, 1, 1}, PackShape{2, 3, 4, 2, 5}, PackShape{2, 5, 6, 1, 3},
                      PackShape{1, 4, 8, 8, 4}, PackShape{2, 7, 12, 4, 16}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV
                                      << " hd=" << s.hd);
    const int BT = s.B * s.T, C = s.NH * s.hd, Ckv = s.NKV * s.hd;
    auto q = random_normal(size_t(BT) * C, seed + 1);
    auto k = random_normal(size_t(BT) * Ckv, seed + 2), v = random_normal(size_t(BT) * Ckv, seed + 3);
    std::vector<float> qkv(size_t(BT) * 3 * C);
    kernels::qkv_pack_forward(host_view(qkv, {s.B, s.T, 3 * C}), host_view(q, {s.B, s.T, C}),
                              host_view(k, {s.B, s.T, Ckv}), host_view(v, {s.B, s.T, Ckv}), s.NH, s.NKV);
    std::vector<double> qkv_r(qkv.size());
    ref::qkv_pack_forward(qkv_r.data(), to_double(q).data(), to_double(k).data(), to_double(v).data(), s.B, s.T, s.NH,
                          s.NKV, s.hd);
    EXPECT_EQ(qkv, to_float(qkv_r));  // a copy

    auto dqkv = random_normal(qkv.size(), seed + 4);
    auto dq = random_normal(q.size(), seed + 5);  // non-zero: the backward must add
    auto dk = random_normal(k.size(), seed + 6), dv = random_normal(v.size(), seed + 7);
    auto dq_r = to_double(dq), dk_r = to_double(dk), dv_r = to_double(dv);
    kernels::qkv_pack_backward(host_view(dq, {s.B, s.T, C}), host_view(dk, {s.B, s.T, Ckv}),
                               host_view(dv, {s.B, s.T, Ckv}), host_view(dqkv, {s.B, s.T, 3 * C}), s.NH, s.NKV);
    ref::qkv_pack_backward(dq_r.data(), dk_r.data(), dv_r.data(), to_double(dqkv).data(), s.B, s.T, s.NH, s.NKV, s.hd);
    EXPECT_EQ(dq, to_float(dq_r));  // one fp32 addition, correctly rounded
    // dk, dv: sequential fp32 sums of up to 7 unit-normal terms (6 heads onto the start).
    EXPECT_LE(max_rel(dk, dk_r, 1.0), 2e-6);
    EXPECT_LE(max_rel(dv, dv_r, 1.0), 2e-6);
  }
}

TEST(NnQkvPack, RepeatsKvHeadsInHfOrder) {
  // NH = 4, NKV = 2, hd = 2: query heads 0, 1 read kv head 0 and heads 2, 3 read kv head 1.
  std::vector<float> q = {0, 1, 2, 3, 4, 5, 6, 7}, k = {10, 11, 12, 13}, v = {20, 21, 22, 23};
  std::vector<float> qkv(24);
  kernels::qkv_pack_forward(host_view(qkv, {1, 1, 24}), host_view(q, {1, 1, 8}), host_view(k, {1, 1, 4}),
                            host_view(v, {1, 1, 4}), 4, 2);
  const std::vector<float> want = {0,  1,  2,  3,  4,  5,  6,  7,  10, 11, 10, 11,
                                   12, 13, 12, 13, 20, 21, 20, 21, 22, 23, 22, 23};
  EXPECT_EQ(qkv, want);

  std::vector<float> dq(8), dk(4), dv(4);
  std::vector<float> dqkv(24);
  for (int i = 0; i < 24; ++i) dqkv[i] = float(i);
  kernels::qkv_pack_backward(host_view(dq, {1, 1, 8}), host_view(dk, {1, 1, 4}), host_view(dv, {1, 1, 4}),
                             host_view(dqkv, {1, 1, 24}), 4, 2);
  EXPECT_EQ(dq, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(dk, (std::vector<float>{8 + 10, 9 + 11, 12 + 14, 13 + 15}));
  EXPECT_EQ(dv, (std::vector<float>{16 + 18, 17 + 19, 20 + 22, 21 + 23}));
}

TEST(NnQkvPack, ReferenceGradientsMatchFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int B = 2, T = 2, NH = 6, NKV = 2, hd = 3, C = NH * hd, Ckv = NKV * hd;
  auto q = to_double(random_normal(B * T * C, seed + 1));
  auto k = to_double(random_normal(B * T * Ckv, seed + 2)), v = to_double(random_normal(B * T * Ckv, seed + 3));
  auto dqkv = to_double(random_normal(B * T * 3 * C, seed + 4));
  std::vector<double> qkv(dqkv.size());
  auto loss = [&] {
    ref::qkv_pack_forward(qkv.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, hd);
    return dot(qkv, dqkv);
  };
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  ref::qkv_pack_backward(dq.data(), dk.data(), dv.data(), dqkv.data(), B, T, NH, NKV, hd);
  // Linear, so central differences are exact up to rounding.
  EXPECT_LE(max_rel(dq, numerical_gradient(q, loss), 1e-2), 1e-6);
  EXPECT_LE(max_rel(dk, numerical_gradient(k, loss), 1e-2), 1e-6);
  EXPECT_LE(max_rel(dv, numerical_gradient(v, loss), 1e-2), 1e-6);
}

TEST(NnQkvPack, BackwardAccumulates) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int B = 2, T = 3, NH = 6, NKV = 2, hd = 4, C = NH * hd, Ckv = NKV * hd;
  auto dqkv = random_normal(B * T * 3 * C, seed + 1);
  auto run = [&](std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv) {
    kernels::qkv_pack_backward(host_view(dq, {B, T, C}), host_view(dk, {B, T, Ckv}), host_view(dv, {B, T, Ckv}),
                               host_view(dqkv, {B, T, 3 * C}), NH, NKV);
  };
  std::vector<float> dq1(B * T * C), dk1(B * T * Ckv), dv1(B * T * Ckv);
  std::vector<float> dq2(dq1.size()), dk2(dk1.size()), dv2(dv1.size());
  run(dq1, dk1, dv1);
  run(dq2, dk2, dv2);
  run(dq2, dk2, dv2);
  auto doubled = [](const std::vector<float>& x) {
    auto d = to_double(x);
    for (double& e : d) e *= 2;
    return d;
  };
  EXPECT_EQ(max_rel(dq2, doubled(dq1), 1.0), 0.0);  // one add per element and call
  // dk and dv add head by head onto the previous sum: a few ulp from 2x.
  EXPECT_LE(max_rel(dk2, doubled(dk1), 1.0), 1e-6);
  EXPECT_LE(max_rel(dv2, doubled(dv1), 1.0), 1e-6);
}

TEST(NnQkvPack, RejectsBadInput) {
  const int B = 2, T = 3, NH = 4, NKV = 2, hd = 2, C = NH * hd, Ckv = NKV * hd;
  std::vector<float> q(B * T * C), k(B * T * Ckv), v(B * T * Ckv), qkv(B * T * 3 * C), big(B * T * 4 * C);
  auto qv = host_view(q, {B, T, C}), kv = host_view(k, {B, T, Ckv}), vv = host_view(v, {B, T, Ckv});
  auto out = host_view(qkv, {B, T, 3 * C});
  EXPECT_NO_THROW(kernels::qkv_pack_forward(out, qv, kv, vv, NH, NKV));
  EXPECT_NO_THROW(kernels::qkv_pack_backward(qv, kv, vv, out, NH, NKV));
  EXPECT_THROW(kernels::qkv_pack_forward(out, qv, kv, vv, NH, 3), ShapeError);  // 3 does not divide 4
  EXPECT_THROW(kernels::qkv_pack_forward(out, qv, kv, vv, NH, 0), ShapeError);
  EXPECT_THROW(kernels::qkv_pack_forward(out, qv, kv, vv, 3, 1), ShapeError);  // C = 8 % 3
  EXPECT_THROW(kernels::qkv_pack_forward(out, qv, kv, vv, 0, 1), ShapeError);
  EXPECT_THROW(kernels::qkv_pack_forward(out, qv, kv, vv, NH, 1), ShapeError);  // k has 2 kv heads
  EXPECT_THROW(kernels::qkv_pack_forward(host_view(big, {B, T, 4 * C}), qv, kv, vv, NH, NKV), ShapeError);
  EXPECT_THROW(kernels::qkv_pack_forward(out, qv, kv, host_view(big, {B, T, Ckv + 1}), NH, NKV), ShapeError);
  EXPECT_THROW(kernels::qkv_pack_forward(out, host_view(q, {B * T, C}), kv, vv, NH, NKV), ShapeError);
  EXPECT_THROW(kernels::qkv_pack_forward(out, qv, host_view(k, {B, Ckv, T}).transposed(), vv, NH, NKV), ShapeError);
  EXPECT_THROW(kernels::qkv_pack_forward(out, as_bf16(qv), kv, vv, NH, NKV), UnsupportedError);
  EXPECT_THROW(kernels::qkv_pack_forward(out, qv, as_bf16(kv), vv, NH, NKV), UnsupportedError);
  EXPECT_THROW(kernels::qkv_pack_forward(out, qv, kv, on_cuda(vv), NH, NKV), ShapeError);
  EXPECT_THROW(kernels::qkv_pack_backward(qv, kv, vv, host_view(big, {B, T, 4 * C}), NH, NKV), ShapeError);
  EXPECT_THROW(kernels::qkv_pack_backward(qv, kv, kernels::Tensor{}, out, NH, NKV), ShapeError);
  EXPECT_THROW(kernels::qkv_pack_backward(qv, kv, vv, out, NH, 8), ShapeError);
}

}  // namespace
}  // namespace precon::test
