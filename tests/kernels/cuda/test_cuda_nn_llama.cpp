// The Llama-family CUDA ops (embedding, RMSNorm, RoPE, SwiGLU, qkv packing) against the CPU ops
// on the same random inputs, fp32 and bf16, as test_cuda_nn.cpp does for the GPT-2 ops: small odd
// shapes and a Llama-sized one; backward outputs start from random values on both sides (the +=
// convention). Skipped without a GPU.
#include <gtest/gtest.h>

#include <tuple>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/nn.h"
#include "tests/common/test_util.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace precon::kernels {
namespace {

using testing::compare;
using testing::hv;
using testing::kDtypes;
using testing::str;
using testing::tol;
using testing::upload_pair;

TEST(CudaNN, Embedding) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  const int64_t B = 2, T = 5, C = 7, Vp = 11;
  std::vector<int32_t> tokens = {3, 1, 3, 3, 10, 0, 1, 2, 3, 3};  // repeats exercise the atomics
  for (DType dt : kDtypes) {
    SCOPED_TRACE(str(dtype_name(dt)));
    Buffer dtok(Device::cuda, tokens.size() * 4);
    Tensor tok_cpu = test::host_view_i32(tokens, {B, T}), tok = dtok.view({B, T}, DType::i32);
    copy(tok, tok_cpu);
    auto wte = upload_pair(test::random_normal(Vp * C, seed), {Vp, C}, dt);
    auto out = upload_pair(std::vector<float>(B * T * C), {B, T, C}, dt);
    embedding_forward(hv(out, {B, T, C}), tok_cpu, hv(wte, {Vp, C}));
    embedding_forward(out.dev, tok, wte.dev);
    EXPECT_LE(compare(out), tol(dt)) << "out";

    auto dout = upload_pair(test::random_normal(B * T * C, seed + 1), {B, T, C}, dt);
    auto dwte = upload_pair(test::random_normal(Vp * C, seed + 2), {Vp, C}, dt);
    embedding_backward(hv(dwte, {Vp, C}), hv(dout, {B, T, C}), tok_cpu);
    embedding_backward(dwte.dev, dout.dev, tok);
    EXPECT_LE(compare(dwte), 2 * tol(dt)) << "dwte";  // bf16 atomics round after every add
  }
}

TEST(CudaNN, RmsNorm) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  // C = 1 takes eps = 1: with a small eps its dinp is a cancellation (~eps·rstd³) that fp32
  // rounding and FMA contraction decide differently on the two sides.
  for (auto [N, C, eps] : {std::tuple<int64_t, int64_t, float>{5, 7, 1e-5f}, {3, 1, 1.0f}, {64, 768, 1e-6f}}) {
    // Activations and weights: both fp32, both bf16, bf16 activations with fp32 weights.
    for (auto [act, wdt] : {std::pair{DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::bf16, DType::f32}}) {
      SCOPED_TRACE(str(N, "x", C, " eps ", eps, " ", dtype_name(act), " weight ", dtype_name(wdt)));
      const double t = tol(act == DType::bf16 || wdt == DType::bf16 ? DType::bf16 : DType::f32);
      auto inp = upload_pair(test::random_normal(N * C, seed, 2.0f), {N, C}, act);
      auto w = upload_pair(test::random_normal(C, seed + 1), {C}, wdt);
      auto out = upload_pair(std::vector<float>(N * C), {N, C}, act);
      auto rstd = upload_pair(std::vector<float>(N), {N}, DType::f32);
      rmsnorm_forward(hv(out, {N, C}), rstd.cpu(), hv(inp, {N, C}), w.cpu(), eps);
      rmsnorm_forward(out.dev, rstd.dev, inp.dev, w.dev, eps);
      EXPECT_LE(compare(out), t) << "out";
      EXPECT_LE(compare(rstd), 1e-5) << "rstd";  // fp32 statistics from the same inputs

      auto dout = upload_pair(test::random_normal(N * C, seed + 2), {N, C}, act);
      auto dinp = upload_pair(test::random_normal(N * C, seed + 3), {N, C}, act);
      auto dw = upload_pair(test::random_normal(C, seed + 4), {C}, wdt);
      rmsnorm_backward(hv(dinp, {N, C}), dw.cpu(), hv(dout, {N, C}), hv(inp, {N, C}), w.cpu(), rstd.cpu());
      rmsnorm_backward(dinp.dev, dw.dev, dout.dev, inp.dev, w.dev, rstd.dev);
      EXPECT_LE(compare(dinp), t) << "dinp";
      EXPECT_LE(compare(dw), t) << "dweight";
    }
  }
}

TEST(CudaNN, Rope) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  struct Shape {
    int64_t B, T;
    int NH;
    int64_t hd;
    double theta;
  };
  // T = 2048: angles up to 2047 rad, where both sides' double angles must agree.
  for (Shape s : {Shape{2, 5, 3, 6, 10000}, Shape{1, 1, 1, 2, 10000}, Shape{2, 300, 12, 64, 10000},
                  Shape{1, 2048, 2, 128, 500000}}) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(str("B", s.B, " T", s.T, " NH", s.NH, " hd", s.hd, " theta ", s.theta, " ", dtype_name(dt)));
      const int64_t B = s.B, T = s.T, C = s.NH * s.hd;
      auto x = upload_pair(test::random_normal(B * T * C, seed), {B, T, C}, dt);
      rope_forward(hv(x, {B, T, C}), s.NH, s.theta);
      rope_forward(x.dev, s.NH, s.theta);
      EXPECT_LE(compare(x), tol(dt)) << "forward";

      auto dx = upload_pair(test::random_normal(B * T * C, seed + 1), {B, T, C}, dt);
      rope_backward(hv(dx, {B, T, C}), s.NH, s.theta);
      rope_backward(dx.dev, s.NH, s.theta);
      EXPECT_LE(compare(dx), tol(dt)) << "backward";
    }
  }
}

TEST(CudaNN, Swiglu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (auto [N, F] : {std::pair<int64_t, int64_t>{7, 13}, {1, 1}, {64, 2048}}) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(str(N, "x", F, " ", dtype_name(dt)));
      auto g = test::random_normal(N * F, seed, 4.0f);
      const float extremes[] = {-100.0f, 100.0f, -88.0f, 20.0f};  // exp's overflow, saturation
      for (size_t i = 0; i < g.size() && i < 4; ++i) g[i] = extremes[i];
      auto gate = upload_pair(g, {N, F}, dt);
      auto up = upload_pair(test::random_normal(N * F, seed + 1), {N, F}, dt);
      auto out = upload_pair(std::vector<float>(N * F), {N, F}, dt);
      swiglu_forward(hv(out, {N, F}), hv(gate, {N, F}), hv(up, {N, F}));
      swiglu_forward(out.dev, gate.dev, up.dev);
      EXPECT_LE(compare(out), tol(dt)) << "out";

      auto dout = upload_pair(test::random_normal(N * F, seed + 2), {N, F}, dt);
      auto dgate = upload_pair(test::random_normal(N * F, seed + 3), {N, F}, dt);
      auto dup = upload_pair(test::random_normal(N * F, seed + 4), {N, F}, dt);
      swiglu_backward(hv(dgate, {N, F}), hv(dup, {N, F}), hv(dout, {N, F}), hv(gate, {N, F}), hv(up, {N, F}));
      swiglu_backward(dgate.dev, dup.dev, dout.dev, gate.dev, up.dev);
      EXPECT_LE(compare(dgate), tol(dt)) << "dgate";
      EXPECT_LE(compare(dup), tol(dt)) << "dup";
    }
  }
}

TEST(CudaNN, QkvPack) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  struct Shape {
    int64_t B, T;
    int NH, NKV;
    int64_t hd;
  };
  for (Shape s : {Shape{2, 5, 4, 2, 5}, Shape{1, 1, 1, 1, 1}, Shape{2, 3, 6, 1, 8}, Shape{2, 33, 12, 4, 64}}) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(str("B", s.B, " T", s.T, " NH", s.NH, " NKV", s.NKV, " hd", s.hd, " ", dtype_name(dt)));
      const int64_t B = s.B, T = s.T, C = s.NH * s.hd, Ckv = s.NKV * s.hd;
      auto q = upload_pair(test::random_normal(B * T * C, seed), {B, T, C}, dt);
      auto k = upload_pair(test::random_normal(B * T * Ckv, seed + 1), {B, T, Ckv}, dt);
      auto v = upload_pair(test::random_normal(B * T * Ckv, seed + 2), {B, T, Ckv}, dt);
      auto qkv = upload_pair(std::vector<float>(B * T * 3 * C, 7.0f), {B, T, 3 * C}, dt);
      qkv_pack_forward(hv(qkv, {B, T, 3 * C}), hv(q, {B, T, C}), hv(k, {B, T, Ckv}), hv(v, {B, T, Ckv}), s.NH, s.NKV);
      qkv_pack_forward(qkv.dev, q.dev, k.dev, v.dev, s.NH, s.NKV);
      EXPECT_EQ(test::max_abs_diff(test::to_host(qkv.dev), qkv.host), 0.0) << "qkv (a copy)";

      auto dqkv = upload_pair(test::random_normal(B * T * 3 * C, seed + 3), {B, T, 3 * C}, dt);
      auto dq = upload_pair(test::random_normal(B * T * C, seed + 4), {B, T, C}, dt);
      auto dk = upload_pair(test::random_normal(B * T * Ckv, seed + 5), {B, T, Ckv}, dt);
      auto dv = upload_pair(test::random_normal(B * T * Ckv, seed + 6), {B, T, Ckv}, dt);
      qkv_pack_backward(hv(dq, {B, T, C}), hv(dk, {B, T, Ckv}), hv(dv, {B, T, Ckv}), hv(dqkv, {B, T, 3 * C}), s.NH,
                        s.NKV);
      qkv_pack_backward(dq.dev, dk.dev, dv.dev, dqkv.dev, s.NH, s.NKV);
      EXPECT_LE(compare(dq), tol(dt)) << "dq";
      EXPECT_LE(compare(dk), tol(dt)) << "dk";  // the GPU sums a group before adding, the CPU head by head
      EXPECT_LE(compare(dv), tol(dt)) << "dv";
    }
  }
}

}  // namespace
}  // namespace precon::kernels
