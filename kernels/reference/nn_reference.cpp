#include "kernels/reference/nn_reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace precon::kernels::reference {

void encoder_forward(double* out, const int32_t* tokens, const double* wte, const double* wpe, int B, int T,
                     int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        out[(b * T + t) * C + c] = wte[int64_t(tokens[b * T + t]) * C + c] + wpe[t * C + c];
}

void encoder_backward(double* dwte, double* dwpe, const double* dout, const int32_t* tokens, int B, int T,
                      int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        double d = dout[(b * T + t) * C + c];
        if (dwte) dwte[int64_t(tokens[b * T + t]) * C + c] += d;
        if (dwpe) dwpe[t * C + c] += d;
      }
}

void layernorm_forward(double* out, double* mean, double* rstd, const double* inp, const double* weight,
                       const double* bias, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const double* x = inp + int64_t(n) * C;
    double m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    double var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;
    double s = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; ++c) out[int64_t(n) * C + c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

// y = (x - mean) * rstd * w + b with mean and rstd functions of the whole row, so
// dx_i = rstd * (g_i - mean_j(g_j) - xhat_i * mean_j(g_j xhat_j)) where g = w * dy.
void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout, const double* inp,
                        const double* weight, const double* mean, const double* rstd, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const double* x = inp + int64_t(n) * C;
    const double* dy = dout + int64_t(n) * C;
    double g_mean = 0, gx_mean = 0;
    for (int c = 0; c < C; ++c) {
      double xhat = (x[c] - mean[n]) * rstd[n];
      g_mean += weight[c] * dy[c];
      gx_mean += weight[c] * dy[c] * xhat;
    }
    g_mean /= C;
    gx_mean /= C;
    for (int c = 0; c < C; ++c) {
      double xhat = (x[c] - mean[n]) * rstd[n];
      if (dinp) dinp[int64_t(n) * C + c] += rstd[n] * (weight[c] * dy[c] - g_mean - xhat * gx_mean);
      if (dweight) dweight[c] += xhat * dy[c];
      if (dbias) dbias[c] += dy[c];
    }
  }
}

namespace {
const double kGeluScale = std::sqrt(2.0 / M_PI);
}

void gelu_forward(double* out, const double* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double x = inp[i];
    out[i] = 0.5 * x * (1.0 + std::tanh(kGeluScale * (x + 0.044715 * x * x * x)));
  }
}

void gelu_backward(double* dinp, const double* inp, const double* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double x = inp[i];
    double th = std::tanh(kGeluScale * (x + 0.044715 * x * x * x));
    double du_dx = kGeluScale * (1.0 + 3.0 * 0.044715 * x * x);
    dinp[i] += (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du_dx) * dout[i];
  }
}

void embedding_forward(double* out, const int32_t* tokens, const double* wte, int B, int T, int C) {
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = 0; c < C; ++c) out[int64_t(bt) * C + c] = wte[int64_t(tokens[bt]) * C + c];
}

void embedding_backward(double* dwte, const double* dout, const int32_t* tokens, int B, int T, int C) {
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = 0; c < C; ++c) dwte[int64_t(tokens[bt]) * C + c] += dout[int64_t(bt) * C + c];
}

void rmsnorm_forward(double* out, double* rstd, const double* inp, const double* weight, int N, int C, double eps) {
  for (int n = 0; n < N; ++n) {
    const double* x = inp + int64_t(n) * C;
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[c] * x[c];
    ms /= C;
    rstd[n] = 1.0 / std::sqrt(ms + eps);
    for (int c = 0; c < C; ++c) out[int64_t(n) * C + c] = x[c] * rstd[n] * weight[c];
  }
}

// y_c = x_c s w_c with s = (mean_j x_j² + eps)^(-1/2), so ds/dx_j = -s³ x_j / C and
// dx_j = s w_j dy_j - (s³ / C) x_j sum_c dy_c w_c x_c.
void rmsnorm_backward(double* dinp, double* dweight, const double* dout, const double* inp, const double* weight,
                      const double* rstd, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const double* x = inp + int64_t(n) * C;
    const double* dy = dout + int64_t(n) * C;
    const double s = rstd[n];
    double dot = 0;
    for (int c = 0; c < C; ++c) dot += dy[c] * weight[c] * x[c];
    for (int c = 0; c < C; ++c) {
      if (dinp) dinp[int64_t(n) * C + c] += s * weight[c] * dy[c] - s * s * s / C * x[c] * dot;
      if (dweight) dweight[c] += dy[c] * x[c] * s;
    }
  }
}

namespace {
// Rotates each pair (x[i], x[i + hd/2]) of every head by sign * t * theta^(-2i/hd).
// Pair i's frequency: theta^(−2i/hd); with YaRN the pairs that turn more than beta_fast times over
// the original context keep it, those turning fewer than beta_slow times take it / factor, and a
// linear ramp over the pairs between blends the two.
double rope_frequency(const Rope& r, int i, int hd) {
  const double base = std::pow(r.theta, -2.0 * i / hd);
  if (r.factor == 1.0) return base;
  auto pair_turning = [&](double turns) {  // the (fractional) pair that turns `turns` times
    return hd * std::log(r.original_max / (2.0 * M_PI * turns)) / (2.0 * std::log(r.theta));
  };
  const double low = std::max(std::floor(pair_turning(r.beta_fast)), 0.0);
  double high = std::min(std::ceil(pair_turning(r.beta_slow)), double(hd - 1));
  if (high == low) high = low + 0.001;
  const double interpolate = std::clamp((i - low) / (high - low), 0.0, 1.0);
  return (1.0 - interpolate) * base + interpolate * base / r.factor;
}

void rope_rotate(double* x, int B, int T, int NH, int hd, const Rope& rope, double sign) {
  const int half = hd / 2;
  const double a = rope.attention_factor;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        double* head = x + (int64_t(b) * T + t) * NH * hd + int64_t(h) * hd;
        for (int i = 0; i < half; ++i) {
          const double angle = sign * t * rope_frequency(rope, i, hd);
          const double x1 = head[i], x2 = head[i + half];
          head[i] = a * (x1 * std::cos(angle) - x2 * std::sin(angle));
          head[i + half] = a * (x2 * std::cos(angle) + x1 * std::sin(angle));
        }
      }
}
}  // namespace

void rope_forward(double* x, int B, int T, int NH, int hd, const Rope& rope) {
  rope_rotate(x, B, T, NH, hd, rope, 1.0);
}

// The forward is a·R per pair, so the gradient is a·Rᵀ dy, a times the rotation by minus the angle.
void rope_backward(double* dx, int B, int T, int NH, int hd, const Rope& rope) {
  rope_rotate(dx, B, T, NH, hd, rope, -1.0);
}

void swiglu_forward(double* out, const double* gate, const double* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
}

// d silu(g)/dg = sigmoid(g) (1 + g (1 - sigmoid(g))).
void swiglu_backward(double* dgate, double* dup, const double* dout, const double* gate, const double* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], sig = 1.0 / (1.0 + std::exp(-g));
    dgate[i] += dout[i] * up[i] * sig * (1.0 + g * (1.0 - sig));
    dup[i] += dout[i] * g * sig;
  }
}

void qkv_pack_forward(double* qkv, const double* q, const double* k, const double* v, int B, int T, int NH, int NKV,
                      int hd) {
  const int64_t C = int64_t(NH) * hd, Ckv = int64_t(NKV) * hd;
  const int group = NH / NKV;
  for (int64_t bt = 0; bt < int64_t(B) * T; ++bt)
    for (int h = 0; h < NH; ++h)
      for (int d = 0; d < hd; ++d) {
        const int64_t kv = bt * Ckv + int64_t(h / group) * hd + d;
        qkv[bt * 3 * C + h * hd + d] = q[bt * C + h * hd + d];
        qkv[bt * 3 * C + C + h * hd + d] = k[kv];
        qkv[bt * 3 * C + 2 * C + h * hd + d] = v[kv];
      }
}

void qkv_pack_backward(double* dq, double* dk, double* dv, const double* dqkv, int B, int T, int NH, int NKV, int hd) {
  const int64_t C = int64_t(NH) * hd, Ckv = int64_t(NKV) * hd;
  const int group = NH / NKV;
  for (int64_t bt = 0; bt < int64_t(B) * T; ++bt)
    for (int h = 0; h < NH; ++h)
      for (int d = 0; d < hd; ++d) {
        const int64_t kv = bt * Ckv + int64_t(h / group) * hd + d;
        dq[bt * C + h * hd + d] += dqkv[bt * 3 * C + h * hd + d];
        dk[kv] += dqkv[bt * 3 * C + C + h * hd + d];
        dv[kv] += dqkv[bt * 3 * C + 2 * C + h * hd + d];
      }
}

namespace {
// W[c, o] in the math of out = inp @ W, whatever the storage layout.
double weight_at(const double* w, int c, int o, int C, int OC, WeightLayout layout) {
  return layout == WeightLayout::in_out ? w[int64_t(c) * OC + o] : w[int64_t(o) * C + c];
}
double& weight_at(double* w, int c, int o, int C, int OC, WeightLayout layout) {
  return layout == WeightLayout::in_out ? w[int64_t(c) * OC + o] : w[int64_t(o) * C + c];
}
}  // namespace

void moe_router_forward(double* probs, int32_t* topk_idx, double* topk_w, const double* logits, int N, int E,
                        int K) {
  std::vector<int32_t> order(E);
  for (int n = 0; n < N; ++n) {
    const double* x = logits + int64_t(n) * E;
    double* p = probs + int64_t(n) * E;
    const double m = *std::max_element(x, x + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(x[e] - m);
    for (int e = 0; e < E; ++e) p[e] = std::exp(x[e] - m) / sum;
    for (int e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double S = 0;
    for (int j = 0; j < K; ++j) S += p[order[j]];
    for (int j = 0; j < K; ++j) {
      topk_idx[int64_t(n) * K + j] = order[j];
      topk_w[int64_t(n) * K + j] = p[order[j]] / S;
    }
  }
}

// w_j = p_idx[j] / S with S = sum_m p_idx[m], so dw_j / dp_idx[i] = (delta_ij - w_j) / S; the softmax's
// Jacobian is dp_e / dx_f = p_e (delta_ef - p_f).
void moe_router_backward(double* dlogits, const double* dw, const double* probs, const int32_t* topk_idx,
                         const double* topk_w, const double* aux_dprobs, int N, int E, int K) {
  std::vector<double> dp(E);
  for (int n = 0; n < N; ++n) {
    const double* p = probs + int64_t(n) * E;
    const int32_t* idx = topk_idx + int64_t(n) * K;
    const double* w = topk_w + int64_t(n) * K;
    const double* g = dw + int64_t(n) * K;
    for (int e = 0; e < E; ++e) dp[e] = aux_dprobs ? aux_dprobs[e] : 0.0;
    double S = 0;
    for (int j = 0; j < K; ++j) S += p[idx[j]];
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < K; ++j) dp[idx[i]] += g[j] * ((i == j ? 1.0 : 0.0) - w[j]) / S;
    for (int e = 0; e < E; ++e)
      for (int f = 0; f < E; ++f) dlogits[int64_t(n) * E + f] += dp[e] * p[e] * ((e == f ? 1.0 : 0.0) - p[f]);
  }
}

void gather_rows(double* out, const double* inp, const int32_t* rows, int M, int C) {
  for (int i = 0; i < M; ++i)
    for (int c = 0; c < C; ++c) out[int64_t(i) * C + c] = inp[int64_t(rows[i]) * C + c];
}

void scatter_add_rows(double* dinp, const double* dout, const int32_t* rows, int M, int C) {
  for (int i = 0; i < M; ++i)
    for (int c = 0; c < C; ++c) dinp[int64_t(rows[i]) * C + c] += dout[int64_t(i) * C + c];
}

void moe_combine_forward(double* out, const double* y, const int32_t* pos, const double* w, int N, int K, int C) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int j = 0; j < K; ++j) s += w[int64_t(n) * K + j] * y[int64_t(pos[int64_t(n) * K + j]) * C + c];
      out[int64_t(n) * C + c] = s;
    }
}

void moe_combine_backward(double* dy, double* dw, const double* dout, const double* y, const int32_t* pos,
                          const double* w, int N, int K, int C) {
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < K; ++j) {
      const int64_t nj = int64_t(n) * K + j, row = int64_t(pos[nj]) * C;
      for (int c = 0; c < C; ++c) {
        dy[row + c] += w[nj] * dout[int64_t(n) * C + c];
        dw[nj] += dout[int64_t(n) * C + c] * y[row + c];
      }
    }
}

void matmul_forward(double* out, const double* inp, const double* weight, const double* bias, int N, int C,
                    int OC, WeightLayout layout) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double acc = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; ++c) acc += inp[int64_t(n) * C + c] * weight_at(weight, c, o, C, OC, layout);
      out[int64_t(n) * OC + o] = acc;
    }
}

void matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout, const double* inp,
                     const double* weight, int N, int C, int OC, WeightLayout layout) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double d = dout[int64_t(n) * OC + o];
      if (dbias) dbias[o] += d;
      for (int c = 0; c < C; ++c) {
        if (dinp) dinp[int64_t(n) * C + c] += d * weight_at(weight, c, o, C, OC, layout);
        if (dweight) weight_at(dweight, c, o, C, OC, layout) += d * inp[int64_t(n) * C + c];
      }
    }
}

void attention_forward(double* out, double* att, const double* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(double(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const double* q = qkv + (int64_t(b) * T + t) * 3 * C + h * hs;
        double* a = att + ((int64_t(b) * NH + h) * T + t) * T;
        double maxv = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          const double* k = qkv + (int64_t(b) * T + s) * 3 * C + C + h * hs;
          double dot = 0;
          for (int i = 0; i < hs; ++i) dot += q[i] * k[i];
          a[s] = dot * scale;
          maxv = std::max(maxv, a[s]);
        }
        double sum = 0;
        for (int s = 0; s <= t; ++s) sum += (a[s] = std::exp(a[s] - maxv));
        for (int s = 0; s < T; ++s) a[s] = s <= t ? a[s] / sum : 0.0;
        double* o = out + (int64_t(b) * T + t) * C + h * hs;
        for (int i = 0; i < hs; ++i) {
          double acc = 0;
          for (int s = 0; s <= t; ++s) acc += a[s] * qkv[(int64_t(b) * T + s) * 3 * C + 2 * C + h * hs + i];
          o[i] = acc;
        }
      }
}

void attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att, int B, int T,
                        int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(double(hs));
  std::vector<double> datt(T), dpre(T);
  auto at = [&](int b, int t, int part, int h) { return (int64_t(b) * T + t) * 3 * C + part * C + h * hs; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const double* a = att + ((int64_t(b) * NH + h) * T + t) * T;
        const double* dy = dout + (int64_t(b) * T + t) * C + h * hs;
        // out_t = sum_s a_s v_s
        for (int s = 0; s <= t; ++s) {
          datt[s] = 0;
          for (int i = 0; i < hs; ++i) {
            datt[s] += dy[i] * qkv[at(b, s, 2, h) + i];
            dqkv[at(b, s, 2, h) + i] += a[s] * dy[i];
          }
        }
        // a = softmax(pre): dpre_s = a_s (datt_s - sum_r a_r datt_r)
        double dot = 0;
        for (int s = 0; s <= t; ++s) dot += a[s] * datt[s];
        for (int s = 0; s <= t; ++s) dpre[s] = a[s] * (datt[s] - dot);
        // pre_s = scale * q_t . k_s
        for (int s = 0; s <= t; ++s)
          for (int i = 0; i < hs; ++i) {
            dqkv[at(b, t, 0, h) + i] += scale * dpre[s] * qkv[at(b, s, 1, h) + i];
            dqkv[at(b, s, 1, h) + i] += scale * dpre[s] * qkv[at(b, t, 0, h) + i];
          }
      }
}

namespace {
// log sum_{v<V} exp(x_v), stabilised by the maximum.
double log_sum_exp(const double* x, int V) {
  double maxv = -INFINITY;
  for (int v = 0; v < V; ++v) maxv = std::max(maxv, x[v]);
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += std::exp(x[v] - maxv);
  return maxv + std::log(sum);
}
}  // namespace

void crossentropy_forward(double* losses, const double* logits, const int32_t* targets, int N, int V, int Vp) {
  for (int n = 0; n < N; ++n) {
    const double* x = logits + int64_t(n) * Vp;
    losses[n] = targets[n] < 0 ? 0.0 : log_sum_exp(x, V) - x[targets[n]];
  }
}

void crossentropy_backward(double* dlogits, double* losses, const double* logits, const int32_t* targets,
                           int N, int V, int Vp, double dloss) {
  for (int n = 0; n < N; ++n) {
    const double* x = logits + int64_t(n) * Vp;
    double* dx = dlogits + int64_t(n) * Vp;
    if (targets[n] < 0) {
      losses[n] = 0.0;
      for (int v = 0; v < Vp; ++v) dx[v] = 0.0;
      continue;
    }
    double lse = log_sum_exp(x, V);
    losses[n] = lse - x[targets[n]];
    for (int v = 0; v < Vp; ++v)
      dx[v] = v < V ? dloss * (std::exp(x[v] - lse) - (v == targets[n] ? 1.0 : 0.0)) : 0.0;
  }
}

void adamw_update(double* params, const double* grads, double* m, double* v, int64_t n, const AdamWParams& hp) {
  const double b1 = hp.beta1, b2 = hp.beta2;
  const double bc1 = hp.bias_correction ? 1.0 - std::pow(b1, hp.step) : 1.0;
  const double bc2 = hp.bias_correction ? 1.0 - std::pow(b2, hp.step) : 1.0;
  for (int64_t i = 0; i < n; ++i) {
    double g = double(hp.grad_scale) * grads[i];
    params[i] -= double(hp.lr) * hp.weight_decay * params[i];
    m[i] = b1 * m[i] + (1.0 - b1) * g;
    v[i] = b2 * v[i] + (1.0 - b2) * g * g;
    params[i] -= double(hp.lr) * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + hp.eps);
  }
}

}  // namespace precon::kernels::reference
