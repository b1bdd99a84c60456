// The mixture-of-experts ops: top-k softmax routing, the row gather/scatter that groups tokens by
// expert, and the weighted combine of the experts' outputs. Tokens (or rows) are spread over
// threads; the inner loops run over experts or channels and vectorise.
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/fast_math.h"

namespace precon::kernels::cpu {

namespace {

// The K largest of p[0, E) in the order (probability descending, index ascending). Probabilities
// are >= 0, so their bits read as an integer order like them, and key = bits(p)·2^32 + (2^32 − 1 − e)
// orders the experts exactly so (an equal probability ranks the lower index first). Step j takes
// the largest key below step j−1's: a max-reduction that vectorises. NaN probabilities (a NaN or
// +inf logit makes its whole row NaN) get key −1 and are never taken; a step that finds no key
// takes index j so that the indices stay in range for the gathers.
void moe_top_k(int32_t* idx, float* w, int64_t* key, const float* p, int64_t E, int64_t K) {
  constexpr int64_t kLow = 0xffffffff;
#pragma omp simd
  for (int64_t e = 0; e < E; ++e)
    key[e] = std::isnan(p[e]) ? -1 : int64_t(std::bit_cast<uint32_t>(p[e])) << 32 | (kLow - e);
  int64_t prev = std::numeric_limits<int64_t>::max();
  float sum = 0.0f;
  for (int64_t j = 0; j < K; ++j) {
    int64_t best = -1;
#pragma omp simd reduction(max : best)
    for (int64_t e = 0; e < E; ++e) best = key[e] < prev && key[e] > best ? key[e] : best;
    const int64_t e = best >= 0 ? kLow - (best & kLow) : j;
    idx[j] = static_cast<int32_t>(e);
    w[j] = best >= 0 ? p[e] : NAN;
    sum += w[j];
    prev = best;
  }
  for (int64_t j = 0; j < K; ++j) w[j] /= sum;
}

}  // namespace

void moe_router_forward(Tensor probs, Tensor topk_idx, Tensor topk_w, const Tensor& logits) {
  const int64_t N = logits.shape[0], E = logits.shape[1], K = topk_idx.shape[1];
  const float* x_all = logits.f32();
  float* p_all = probs.f32();
  int32_t* idx_all = topk_idx.i32();
  float* w_all = topk_w.f32();
#pragma omp parallel
  {
    std::vector<int64_t> key(static_cast<size_t>(E));  // moe_top_k's scratch
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = x_all + n * E;
      float* p = p_all + n * E;
      float maxv = x[0];
#pragma omp simd reduction(max : maxv)
      for (int64_t e = 1; e < E; ++e) maxv = maxv > x[e] ? maxv : x[e];
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t e = 0; e < E; ++e) {
        p[e] = fast_exp(x[e] - maxv);
        sum += p[e];
      }
#pragma omp simd
      for (int64_t e = 0; e < E; ++e) p[e] /= sum;
      moe_top_k(idx_all + n * K, w_all + n * K, key.data(), p, E, K);
    }
  }
}

void moe_router_backward(Tensor dlogits, const Tensor& dw, const Tensor& probs, const Tensor& topk_idx,
                         const Tensor& topk_w, const Tensor& aux_dprobs) {
  const int64_t N = probs.shape[0], E = probs.shape[1], K = topk_idx.shape[1];
  const float* p_all = probs.f32();
  const int32_t* idx_all = topk_idx.i32();
  const float* w_all = topk_w.f32();
  const float* g_all = dw.f32();
  const float* aux = aux_dprobs.data ? aux_dprobs.f32() : nullptr;
  float* dl_all = dlogits.f32();
#pragma omp parallel
  {
    std::vector<float> dp(static_cast<size_t>(E));  // d loss / d probs of one token
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* p = p_all + n * E;
      const int32_t* idx = idx_all + n * K;
      const float* w = w_all + n * K;
      const float* g = g_all + n * K;
      // Through the renormalisation w_j = p_idx[j] / S: d p_idx[j] = (g_j − Σ_m g_m w_m) / S.
      float S = 0.0f, gw = 0.0f;
      for (int64_t j = 0; j < K; ++j) {
        S += p[idx[j]];
        gw += g[j] * w[j];
      }
      for (int64_t e = 0; e < E; ++e) dp[e] = aux ? aux[e] : 0.0f;
      for (int64_t j = 0; j < K; ++j) dp[idx[j]] += (g[j] - gw) / S;
      // Through the softmax: dlogits = p ⊙ (dp − ⟨p, dp⟩).
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t e = 0; e < E; ++e) dot += p[e] * dp[e];
      float* dl = dl_all + n * E;
#pragma omp simd
      for (int64_t e = 0; e < E; ++e) dl[e] += p[e] * (dp[e] - dot);
    }
  }
}

void gather_rows(Tensor out, const Tensor& inp, const Tensor& rows) {
  const int64_t M = out.shape[0], C = out.shape[1];
  const float* src_all = inp.f32();
  const int32_t* r = rows.i32();
  float* dst_all = out.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    const float* src = src_all + int64_t(r[i]) * C;
    float* dst = dst_all + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dst[c] = src[c];
  }
}

// Parallel over destination rows through an inverse index (the sources of each row, ascending),
// so no two threads add into one row and each row's sum runs in source order. Rows may repeat
// unevenly (a hot row has many sources), hence the dynamic schedule.
void scatter_add_rows(Tensor dinp, const Tensor& dout, const Tensor& rows) {
  const int64_t N = dinp.shape[0], C = dinp.shape[1], M = dout.shape[0];
  const int32_t* r = rows.i32();
  std::vector<int64_t> start(static_cast<size_t>(N + 1), 0);
  for (int64_t i = 0; i < M; ++i) ++start[r[i] + 1];
  for (int64_t n = 0; n < N; ++n) start[n + 1] += start[n];
  std::vector<int64_t> sources(static_cast<size_t>(M));
  std::vector<int64_t> cursor(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < M; ++i) sources[cursor[r[i]]++] = i;
  const float* src_all = dout.f32();
  float* dst_all = dinp.f32();
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t n = 0; n < N; ++n) {
    float* dst = dst_all + n * C;
    for (int64_t s = start[n]; s < start[n + 1]; ++s) {
      const float* src = src_all + sources[s] * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  }
}

void moe_combine_forward(Tensor out, const Tensor& y, const Tensor& pos, const Tensor& w) {
  const int64_t N = out.shape[0], C = out.shape[1], K = w.shape[1];
  const float* y_all = y.f32();
  const int32_t* pos_all = pos.i32();
  const float* w_all = w.f32();
  float* o_all = out.f32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* o = o_all + n * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      const float wj = w_all[n * K + j];
      const float* yr = y_all + int64_t(pos_all[n * K + j]) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] += wj * yr[c];
    }
  }
}

// Each row of y belongs to one (n, j) (checked by the front-end), so the tokens' threads write
// disjoint rows of dy.
void moe_combine_backward(Tensor dy, Tensor dw, const Tensor& dout, const Tensor& y, const Tensor& pos,
                          const Tensor& w) {
  const int64_t N = dout.shape[0], C = dout.shape[1], K = w.shape[1];
  const float* d_all = dout.f32();
  const float* y_all = y.f32();
  const int32_t* pos_all = pos.i32();
  const float* w_all = w.f32();
  float* dy_all = dy.f32();
  float* dw_all = dw.f32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* d = d_all + n * C;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t row = int64_t(pos_all[n * K + j]) * C;
      const float* yr = y_all + row;
      float* dyr = dy_all + row;
      const float wj = w_all[n * K + j];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c) {
        dot += d[c] * yr[c];
        dyr[c] += wj * d[c];
      }
      dw_all[n * K + j] += dot;
    }
  }
}

}  // namespace precon::kernels::cpu
