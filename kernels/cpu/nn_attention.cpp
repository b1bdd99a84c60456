// Causal multi-head self-attention. Each (batch, head) pair is independent: its Q, K, V are
// strided (T, hs) views into qkv, and the products QKᵀ, PV and their gradients are sgemm calls
// on those views. The pairs run in parallel, so each sgemm runs on one thread (the OpenMP
// OpenBLAS does not nest inside a parallel region).
#include <cmath>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/fast_math.h"

namespace precon::kernels::cpu {

namespace {

struct Head {
  Tensor q, k, v;  // (T, hs) views with row stride 3C
};

Head head_views(const Tensor& qkv, int64_t b, int64_t h, int64_t C, int64_t hs) {
  const Tensor x = qkv.select(b);
  return {x.narrow(1, h * hs, hs), x.narrow(1, C + h * hs, hs), x.narrow(1, 2 * C + h * hs, hs)};
}

}  // namespace

void attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head, Tensor row_max) {
  const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3, NH = n_head, hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const Head x = head_views(qkv, b, h, C, hs);
    const Tensor p = att.select(b).select(h);  // (T, T)
    // Scores for all (t, s); the causal mask is applied in the softmax. Computing the upper
    // triangle too wastes up to half the flops but keeps one large sgemm.
    cpu::gemm(p, x.q, x.k, Trans::no, Trans::yes, scale, 0.0f);
    float* rows = p.f32();
    for (int64_t t = 0; t < T; ++t) {
      float* row = rows + t * T;
      float maxv = row[0];
      for (int64_t s = 1; s <= t; ++s) maxv = std::fmax(maxv, row[s]);
      if (row_max.data) row_max.f32()[bh * T + t] = maxv;
      float sum = 0.0f;
      for (int64_t s = 0; s <= t; ++s) {
        row[s] = fast_exp(row[s] - maxv);
        sum += row[s];
      }
      const float inv = 1.0f / sum;
      for (int64_t s = 0; s <= t; ++s) row[s] *= inv;
      for (int64_t s = t + 1; s < T; ++s) row[s] = 0.0f;
    }
    cpu::gemm(out.select(b).narrow(1, h * hs, hs), p, x.v, Trans::no, Trans::no, 1.0f, 0.0f);
  }
}

void attention_backward(Tensor dqkv, Tensor datt, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int n_head) {
  const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3, NH = n_head, hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const Head x = head_views(qkv, b, h, C, hs);
    const Head dx = head_views(dqkv, b, h, C, hs);
    const Tensor p = att.select(b).select(h);
    const Tensor dp = datt.select(b).select(h);
    const Tensor dy = dout.select(b).narrow(1, h * hs, hs);
    // Y = P V: dP = dY Vᵀ, dV += Pᵀ dY.
    cpu::gemm(dp, dy, x.v, Trans::no, Trans::yes, 1.0f, 0.0f);
    cpu::gemm(dx.v, p, dy, Trans::yes, Trans::no, 1.0f, 1.0f);
    // P = softmax(S) row-wise: dS = P ⊙ (dP - rowsum(P ⊙ dP)), zero above the diagonal.
    const float* prow_all = p.f32();
    float* drow_all = dp.f32();
    for (int64_t t = 0; t < T; ++t) {
      const float* pr = prow_all + t * T;
      float* dr = drow_all + t * T;
      float dot = 0.0f;
      for (int64_t s = 0; s <= t; ++s) dot += pr[s] * dr[s];
      for (int64_t s = 0; s <= t; ++s) dr[s] = pr[s] * (dr[s] - dot);
      for (int64_t s = t + 1; s < T; ++s) dr[s] = 0.0f;
    }
    // S = scale Q Kᵀ: dQ += scale dS K, dK += scale dSᵀ Q.
    cpu::gemm(dx.q, dp, x.k, Trans::no, Trans::no, scale, 1.0f);
    cpu::gemm(dx.k, dp, x.q, Trans::yes, Trans::no, scale, 1.0f);
  }
}

}  // namespace precon::kernels::cpu
