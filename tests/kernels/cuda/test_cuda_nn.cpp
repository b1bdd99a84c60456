// CUDA NN ops against the CPU ops on the same random inputs, fp32 and bf16, at small odd shapes
// and a GPT-2-sized one. Backward outputs start from random values on both sides, which checks
// the accumulate (+=) convention. bf16 runs give the CPU the same bf16-rounded inputs; their
// tolerances cover rounding the GPU's results (and bf16 intermediates) to 8 significant bits.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <tuple>
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

TEST(CudaNN, Encoder) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  const int64_t B = 2, T = 5, C = 7, Vp = 11, maxT = 8;
  std::vector<int32_t> tokens = {3, 1, 3, 3, 10, 0, 1, 2, 3, 3};  // repeats exercise the atomics
  for (DType dt : kDtypes) {
    SCOPED_TRACE(str(dtype_name(dt)));
    Buffer dtok(Device::cuda, tokens.size() * 4);
    Tensor tok_cpu = test::host_view_i32(tokens, {B, T}), tok = dtok.view({B, T}, DType::i32);
    copy(tok, tok_cpu);
    auto wte = upload_pair(test::random_normal(Vp * C, seed), {Vp, C}, dt);
    auto wpe = upload_pair(test::random_normal(maxT * C, seed + 1), {maxT, C}, dt);
    auto out = upload_pair(std::vector<float>(B * T * C), {B, T, C}, dt);
    encoder_forward(hv(out, {B, T, C}), tok_cpu, hv(wte, {Vp, C}), hv(wpe, {maxT, C}));
    encoder_forward(out.dev, tok, wte.dev, wpe.dev);
    EXPECT_LE(compare(out), tol(dt)) << "out";

    auto dout = upload_pair(test::random_normal(B * T * C, seed + 2), {B, T, C}, dt);
    auto dwte = upload_pair(test::random_normal(Vp * C, seed + 3), {Vp, C}, dt);
    auto dwpe = upload_pair(test::random_normal(maxT * C, seed + 4), {maxT, C}, dt);
    encoder_backward(hv(dwte, {Vp, C}), hv(dwpe, {maxT, C}), hv(dout, {B, T, C}), tok_cpu);
    encoder_backward(dwte.dev, dwpe.dev, dout.dev, tok);
    EXPECT_LE(compare(dwte), 2 * tol(dt)) << "dwte";  // bf16 atomics round after every add
    EXPECT_LE(compare(dwpe), tol(dt)) << "dwpe";
  }
}

TEST(CudaNN, LayerNorm) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (auto [N, C] : {std::pair<int64_t, int64_t>{5, 7}, {3, 1}, {64, 768}}) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(str(N, "x", C, " ", dtype_name(dt)));
      auto inp = upload_pair(test::random_normal(N * C, seed, 2.0f), {N, C}, dt);
      auto w = upload_pair(test::random_normal(C, seed + 1), {C}, dt);
      auto b = upload_pair(test::random_normal(C, seed + 2), {C}, dt);
      auto out = upload_pair(std::vector<float>(N * C), {N, C}, dt);
      auto mean = upload_pair(std::vector<float>(N), {N}, DType::f32);
      auto rstd = upload_pair(std::vector<float>(N), {N}, DType::f32);
      layernorm_forward(hv(out, {N, C}), mean.cpu(), rstd.cpu(), hv(inp, {N, C}), w.cpu(), b.cpu());
      layernorm_forward(out.dev, mean.dev, rstd.dev, inp.dev, w.dev, b.dev);
      EXPECT_LE(compare(out), tol(dt)) << "out";
      EXPECT_LE(compare(mean), 1e-5) << "mean";  // fp32 statistics from the same inputs
      EXPECT_LE(compare(rstd), 1e-4) << "rstd";  // C = 1: rstd = 1/√eps amplifies rounding

      auto dout = upload_pair(test::random_normal(N * C, seed + 3), {N, C}, dt);
      auto dinp = upload_pair(test::random_normal(N * C, seed + 4), {N, C}, dt);
      auto dw = upload_pair(test::random_normal(C, seed + 5), {C}, dt);
      auto db = upload_pair(test::random_normal(C, seed + 6), {C}, dt);
      layernorm_backward(hv(dinp, {N, C}), dw.cpu(), db.cpu(), hv(dout, {N, C}), hv(inp, {N, C}), w.cpu(),
                         mean.cpu(), rstd.cpu());
      layernorm_backward(dinp.dev, dw.dev, db.dev, dout.dev, inp.dev, w.dev, mean.dev, rstd.dev);
      EXPECT_LE(compare(dinp), C == 1 ? 1e-3 : tol(dt)) << "dinp";  // C = 1: dinp ~ 0, pure cancellation
      EXPECT_LE(compare(dw), tol(dt)) << "dweight";
      EXPECT_LE(compare(db), tol(dt)) << "dbias";
    }
  }
}

TEST(CudaNN, Gelu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  const int64_t n = 4099;
  for (DType dt : kDtypes) {
    SCOPED_TRACE(str(dtype_name(dt)));
    auto inp = upload_pair(test::random_uniform(n, seed, -6.0f, 6.0f), {n}, dt);
    auto out = upload_pair(std::vector<float>(n), {n}, dt);
    gelu_forward(out.cpu(), inp.cpu());
    gelu_forward(out.dev, inp.dev);
    EXPECT_LE(compare(out), tol(dt)) << "forward";
    auto dout = upload_pair(test::random_normal(n, seed + 1), {n}, dt);
    auto dinp = upload_pair(test::random_normal(n, seed + 2), {n}, dt);
    gelu_backward(dinp.cpu(), inp.cpu(), dout.cpu());
    gelu_backward(dinp.dev, inp.dev, dout.dev);
    EXPECT_LE(compare(dinp), tol(dt)) << "backward";
  }
}

TEST(CudaNN, Matmul) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  struct Shape {
    int64_t B, T, C, OC;
  };
  for (Shape s : {Shape{2, 3, 5, 7}, Shape{1, 1, 1, 3}, Shape{4, 16, 96, 80}}) {
    for (WeightLayout layout : {WeightLayout::in_out, WeightLayout::out_in}) {
      for (bool with_bias : {true, false}) {
        for (DType dt : kDtypes) {
          SCOPED_TRACE(str(s.B * s.T, "x", s.C, "->", s.OC, layout == WeightLayout::in_out ? " in_out " : " out_in ",
                           with_bias ? "bias " : "", dtype_name(dt)));
          int64_t N = s.B * s.T, wr = layout == WeightLayout::in_out ? s.C : s.OC;
          int64_t wc = layout == WeightLayout::in_out ? s.OC : s.C;
          auto inp = upload_pair(test::random_normal(N * s.C, seed), {s.B, s.T, s.C}, dt);
          auto w = upload_pair(test::random_normal(wr * wc, seed + 1, 0.3f), {wr, wc}, dt);
          auto b = upload_pair(test::random_normal(s.OC, seed + 2), {s.OC}, dt);
          auto out = upload_pair(std::vector<float>(N * s.OC), {s.B, s.T, s.OC}, dt);
          Tensor no_bias;
          matmul_forward(hv(out, {s.B, s.T, s.OC}), hv(inp, {s.B, s.T, s.C}), hv(w, {wr, wc}),
                         with_bias ? b.cpu() : no_bias, layout);
          matmul_forward(out.dev, inp.dev, w.dev, with_bias ? b.dev : no_bias, layout);
          EXPECT_LE(compare(out), tol(dt)) << "out";

          auto dout = upload_pair(test::random_normal(N * s.OC, seed + 3), {s.B, s.T, s.OC}, dt);
          auto dinp = upload_pair(test::random_normal(N * s.C, seed + 4), {s.B, s.T, s.C}, dt);
          auto dw = upload_pair(test::random_normal(wr * wc, seed + 5), {wr, wc}, dt);
          auto db = upload_pair(test::random_normal(s.OC, seed + 6), {s.OC}, dt);
          matmul_backward(hv(dinp, {s.B, s.T, s.C}), hv(dw, {wr, wc}), with_bias ? db.cpu() : no_bias,
                          hv(dout, {s.B, s.T, s.OC}), hv(inp, {s.B, s.T, s.C}), hv(w, {wr, wc}), layout);
          matmul_backward(dinp.dev, dw.dev, with_bias ? db.dev : no_bias, dout.dev, inp.dev, w.dev, layout);
          EXPECT_LE(compare(dinp), tol(dt)) << "dinp";
          EXPECT_LE(compare(dw), tol(dt)) << "dweight";
          EXPECT_LE(compare(db), tol(dt)) << "dbias";
        }
      }
    }
  }
}

TEST(CudaNN, Attention) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  struct Shape {
    int64_t B, T, C;
    int NH;
  };
  for (Shape s : {Shape{2, 5, 12, 3}, Shape{1, 1, 4, 1}, Shape{2, 33, 64, 4}}) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(str("B", s.B, " T", s.T, " C", s.C, " NH", s.NH, " ", dtype_name(dt)));
      int64_t B = s.B, T = s.T, C = s.C, NH = s.NH;
      auto qkv = upload_pair(test::random_normal(B * T * 3 * C, seed), {B, T, 3 * C}, dt);
      auto out = upload_pair(std::vector<float>(B * T * C), {B, T, C}, dt);
      auto att = upload_pair(std::vector<float>(B * NH * T * T, 7.0f), {B, NH, T, T}, dt);
      auto row_max = upload_pair(std::vector<float>(B * NH * T, 7.0f), {B, NH, T}, DType::f32);
      attention_forward(hv(out, {B, T, C}), hv(att, {B, NH, T, T}), hv(qkv, {B, T, 3 * C}), s.NH, hv(row_max, {B, NH, T}));
      attention_forward(out.dev, att.dev, qkv.dev, s.NH, row_max.dev);
      EXPECT_LE(compare(out), tol(dt)) << "out";
      EXPECT_LE(compare(row_max), tol(dt)) << "row_max";
      EXPECT_LE(compare(att), tol(dt)) << "att (zeros above the diagonal)";

      auto dout = upload_pair(test::random_normal(B * T * C, seed + 1), {B, T, C}, dt);
      auto dqkv = upload_pair(test::random_normal(B * T * 3 * C, seed + 2), {B, T, 3 * C}, dt);
      auto datt = upload_pair(std::vector<float>(B * NH * T * T), {B, NH, T, T}, dt);
      // Both sides start from the CPU's att, so only the backward is compared.
      auto att_in = upload_pair(att.host, {B, NH, T, T}, dt);
      attention_backward(hv(dqkv, {B, T, 3 * C}), hv(datt, {B, NH, T, T}), hv(dout, {B, T, C}),
                         hv(qkv, {B, T, 3 * C}), hv(att_in, {B, NH, T, T}), s.NH);
      attention_backward(dqkv.dev, datt.dev, dout.dev, qkv.dev, att_in.dev, s.NH);
      EXPECT_LE(compare(dqkv), 2 * tol(dt)) << "dqkv";  // bf16: probabilities and dpre rounded too
    }
  }
}

TEST(CudaNN, CrossEntropy) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (auto [N, V, Vp] : {std::tuple<int64_t, int, int64_t>{7, 11, 13}, {1, 1, 1}, {64, 1000, 1024}}) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(str(N, " rows V ", V, " Vp ", Vp, " ", dtype_name(dt)));
      std::vector<int32_t> targets(N);
      for (int64_t i = 0; i < N; ++i) targets[i] = i % 3 == 1 ? -1 : static_cast<int32_t>((i * 7919) % V);
      if (N == 1) targets[0] = 0;
      Buffer dtargets(Device::cuda, N * 4);
      Tensor tgt_cpu = test::host_view_i32(targets, {N}), tgt = dtargets.view({N}, DType::i32);
      copy(tgt, tgt_cpu);
      auto logits = upload_pair(test::random_normal(N * Vp, seed, 3.0f), {N, Vp}, dt);
      auto losses = upload_pair(std::vector<float>(N), {N}, DType::f32);
      crossentropy_forward(losses.cpu(), hv(logits, {N, Vp}), tgt_cpu, V);
      crossentropy_forward(losses.dev, logits.dev, tgt, V);
      EXPECT_LE(compare(losses), 1e-5) << "forward losses";  // fp32 math on identical inputs

      const float dloss = 1.0f / N;
      auto dlogits = upload_pair(test::random_normal(N * Vp, seed + 1), {N, Vp}, dt);
      crossentropy_backward(hv(dlogits, {N, Vp}), losses.cpu(), hv(logits, {N, Vp}), tgt_cpu, V, dloss);
      crossentropy_backward(dlogits.dev, losses.dev, logits.dev, tgt, V, dloss);
      EXPECT_LE(compare(dlogits), tol(dt)) << "dlogits";
      EXPECT_LE(compare(losses), 1e-5) << "backward losses";
      // In place: dlogits aliasing logits gives the same result.
      crossentropy_backward(logits.dev, losses.dev, logits.dev, tgt, V, dloss);
      EXPECT_LE(test::rel_frobenius(test::to_host(logits.dev), dlogits.host), tol(dt)) << "in place";
    }
  }
}

TEST(CudaNN, AdamW) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  const int64_t n = 10007;
  AdamWParams hp;
  hp.lr = 3e-3f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.5f;
  for (int step : {1, 3, 100}) {
    for (bool bias_correction : {true, false}) {
      hp.step = step;
      hp.bias_correction = bias_correction;
      auto p = upload_pair(test::random_normal(n, seed), {n}, DType::f32);
      auto g = upload_pair(test::random_normal(n, seed + 1), {n}, DType::f32);
      auto m = upload_pair(test::random_normal(n, seed + 2, 0.1f), {n}, DType::f32);
      auto v = upload_pair(test::random_uniform(n, seed + 3, 0.0f, 0.01f), {n}, DType::f32);
      adamw_update(p.cpu(), g.cpu(), m.cpu(), v.cpu(), hp);
      adamw_update(p.dev, g.dev, m.dev, v.dev, hp);
      // Same fp32 formula; bias corrections may be computed in float or double (1 ulp apart).
      EXPECT_LE(compare(p), 1e-6) << "params step " << step;
      EXPECT_LE(compare(m), 1e-6) << "m";
      EXPECT_LE(compare(v), 1e-6) << "v";
    }
  }
}

}  // namespace
}  // namespace precon::kernels
