// The Llama-family ops: embedding, RMSNorm, rotary embeddings, SwiGLU and the grouped-query qkv
// packing, forward and backward. Rows are spread over threads; the inner loops run over channels
// and vectorise.
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/fast_math.h"

namespace precon::kernels::cpu {

void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte) {
  const int64_t C = out.shape[2], BT = out.shape[0] * out.shape[1];
  float* o = out.f32();
  const int32_t* tok = tokens.i32();
  const float* te = wte.f32();
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const float* e = te + tok[bt] * C;
    float* y = o + bt * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = e[c];
  }
}

void embedding_backward(Tensor dwte, const Tensor& dout, const Tensor& tokens) {
  const int64_t C = dout.shape[2], BT = dout.shape[0] * dout.shape[1];
  const float* d = dout.f32();
  const int32_t* tok = tokens.i32();
  float* dte = dwte.f32();
  // As in encoder_backward: each thread owns the rows whose token id is congruent to its thread
  // number, so repeated tokens do not race and each row's sum runs in position order.
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    for (int64_t bt = 0; bt < BT; ++bt) {
      if (tok[bt] % nt != tid) continue;
      float* dst = dte + tok[bt] * C;
      const float* src = d + bt * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  }
}

void rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& inp, const Tensor& weight, float eps) {
  const int64_t C = inp.shape[inp.ndim - 1], N = inp.numel() / C;
  const float* x_all = inp.f32();
  const float* w = weight.f32();
  float* y_all = out.f32();
  float* rstd_all = rstd.f32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = x_all + n * C;
    float* y = y_all + n * C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < C; ++c) sq += x[c] * x[c];
    const float s = 1.0f / std::sqrt(sq / C + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = x[c] * s * w[c];
    rstd_all[n] = s;
  }
}

void rmsnorm_backward(Tensor dinp, Tensor dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd) {
  const int64_t C = inp.shape[inp.ndim - 1], N = inp.numel() / C;
  const float* x_all = inp.f32();
  const float* dy_all = dout.f32();
  const float* w = weight.f32();
  const float* rstd_all = rstd.f32();
  float* dx_all = dinp.data ? dinp.f32() : nullptr;
  float* dw = dweight.data ? dweight.f32() : nullptr;
  // dweight sums over rows: per-thread slices added in thread order, as in layernorm_backward.
  const int max_threads = omp_get_max_threads();
  std::vector<float> partial(dw ? size_t(max_threads) * C : 0, 0.0f);
  int used_threads = 1;
#pragma omp parallel
  {
    const int tid = omp_get_thread_num();
#pragma omp single
    used_threads = omp_get_num_threads();
    float* pw = dw ? partial.data() + size_t(tid) * C : nullptr;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = x_all + n * C;
      const float* dy = dy_all + n * C;
      const float s = rstd_all[n];
      if (dx_all) {
        // dx = s w dy - (s³ / C) x Σ_c dy_c w_c x_c
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < C; ++c) dot += dy[c] * w[c] * x[c];
        const float k = s * s * s * dot / C;
        float* dx = dx_all + n * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dx[c] += s * w[c] * dy[c] - k * x[c];
      }
      if (pw) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) pw[c] += dy[c] * x[c] * s;
      }
    }
  }
  if (!dw) return;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    float sum = 0.0f;
    for (int t = 0; t < used_threads; ++t) sum += partial[size_t(t) * C + c];
    dw[c] += sum;
  }
}

namespace {

// Rotates each pair (x[i], x[i + hd/2]) of every head of x (B,T,NH·hd) by sign · t · theta^(−2i/hd).
// The angles and their cos/sin are computed once per (t, i) in double, rounded to fp32 into a
// table; the rotation itself is fp32 and vectorises over i.
void rope_rotate(Tensor x, int n_head, const Rope& rope, float sign) {
  const int64_t T = x.shape[1], C = x.shape[2], BT = x.shape[0] * T;
  const int64_t hd = C / n_head, half = hd / 2;
  std::vector<float> cos_table(size_t(T * half)), sin_table(size_t(T * half));
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = rope.inv_freq(i, hd);
  const double a = rope.attention_factor;
  float* data = x.f32();
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(t) * inv_freq[i];
        cos_table[t * half + i] = static_cast<float>(a * std::cos(angle));
        sin_table[t * half + i] = sign * static_cast<float>(a * std::sin(angle));
      }
#pragma omp for schedule(static)
    for (int64_t bt = 0; bt < BT; ++bt) {
      const float* cs = cos_table.data() + (bt % T) * half;
      const float* sn = sin_table.data() + (bt % T) * half;
      for (int64_t h = 0; h < n_head; ++h) {
        float* lo = data + bt * C + h * hd;
        float* hi = lo + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = lo[i], b = hi[i];
          lo[i] = a * cs[i] - b * sn[i];
          hi[i] = b * cs[i] + a * sn[i];
        }
      }
    }
  }
}

}  // namespace

void rope_forward(Tensor x, int n_head, const Rope& rope) { rope_rotate(x, n_head, rope, 1.0f); }

// The forward rotates each pair by a·R(angle), so the gradient is a·R(angle)ᵀ dy = a·R(−angle) dy.
void rope_backward(Tensor dx, int n_head, const Rope& rope) { rope_rotate(dx, n_head, rope, -1.0f); }

// sigmoid(g) = 1 / (1 + e^−g) with the vectorisable fast_exp; e^−g overflowing to inf for very
// negative g gives the right limit (sigmoid 0, silu −0).
void swiglu_forward(Tensor out, const Tensor& gate, const Tensor& up) {
  const int64_t n = gate.numel();
  const float* g = gate.f32();
  const float* u = up.f32();
  float* y = out.f32();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + fast_exp(-g[i])) * u[i];
}

void swiglu_backward(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  const int64_t n = gate.numel();
  const float* g = gate.f32();
  const float* u = up.f32();
  const float* dy = dout.f32();
  float* dg = dgate.f32();
  float* du = dup.f32();
  // d silu/dg = sigmoid(g) (1 + g (1 − sigmoid(g))). For g >= 0, 1 − sigmoid(g) is computed as
  // e^−g·sigmoid(g): 1 − sigmoid cancels there and g times the cancellation error is visible.
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float e = fast_exp(-g[i]);
    const float sig = 1.0f / (1.0f + e);
    const float sig_neg = g[i] >= 0.0f ? e * sig : 1.0f - sig;
    dg[i] += dy[i] * u[i] * sig * (1.0f + g[i] * sig_neg);
    du[i] += dy[i] * g[i] * sig;
  }
}

void qkv_pack_forward(Tensor qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head) {
  const int64_t C = q.shape[2], BT = q.shape[0] * q.shape[1];
  const int64_t hd = C / n_head, Ckv = hd * n_kv_head, group = n_head / n_kv_head;
  const float* q_all = q.f32();
  const float* k_all = k.f32();
  const float* v_all = v.f32();
  float* out = qkv.f32();
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < BT; ++bt) {
    float* dst = out + bt * 3 * C;
    const float* qs = q_all + bt * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dst[c] = qs[c];
    for (int64_t h = 0; h < n_head; ++h) {
      const float* ks = k_all + bt * Ckv + (h / group) * hd;
      const float* vs = v_all + bt * Ckv + (h / group) * hd;
      float* kd = dst + C + h * hd;
      float* vd = dst + 2 * C + h * hd;
#pragma omp simd
      for (int64_t d = 0; d < hd; ++d) {
        kd[d] = ks[d];
        vd[d] = vs[d];
      }
    }
  }
}

void qkv_pack_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dqkv, int n_head, int n_kv_head) {
  const int64_t C = dq.shape[2], BT = dq.shape[0] * dq.shape[1];
  const int64_t hd = C / n_head, Ckv = hd * n_kv_head, group = n_head / n_kv_head;
  const float* src_all = dqkv.f32();
  float* dq_all = dq.f32();
  float* dk_all = dk.f32();
  float* dv_all = dv.f32();
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const float* src = src_all + bt * 3 * C;
    float* dqs = dq_all + bt * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dqs[c] += src[c];
    // Query heads h = g·group + r, r in [0, group), add into kv head g in order of r.
    for (int64_t h = 0; h < n_head; ++h) {
      float* dks = dk_all + bt * Ckv + (h / group) * hd;
      float* dvs = dv_all + bt * Ckv + (h / group) * hd;
      const float* ks = src + C + h * hd;
      const float* vs = src + 2 * C + h * hd;
#pragma omp simd
      for (int64_t d = 0; d < hd; ++d) {
        dks[d] += ks[d];
        dvs[d] += vs[d];
      }
    }
  }
}

}  // namespace precon::kernels::cpu
