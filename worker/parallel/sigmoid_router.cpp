#include "worker/parallel/sigmoid_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/backend.h"

namespace precon::worker {

namespace {

// Sorts `order` (ascending indices into v) by (v descending, index ascending).
void best_first(std::vector<int64_t>& order, const std::vector<float>& v) {
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
}

}  // namespace

void sigmoid_route_forward(float* scores, int32_t* idx, float* weights, const float* logits, const float* bias,
                           int64_t N, int64_t E, const SigmoidRouting& r) {
  const int64_t K = r.top_k, G = r.n_group, size = E / G;
  std::vector<float> choice(static_cast<size_t>(E)), group_score(static_cast<size_t>(G));
  std::vector<int64_t> experts(static_cast<size_t>(E)), groups(static_cast<size_t>(G)), pair(static_cast<size_t>(size));
  for (int64_t n = 0; n < N; ++n) {
    float* s = scores + n * E;
    for (int64_t e = 0; e < E; ++e) {
      s[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logits[n * E + e]))));
      choice[e] = s[e] + bias[e];
    }
    // Group-limited routing: the experts of the groups left out cannot be chosen.
    if (G > 1) {
      for (int64_t g = 0; g < G; ++g) {
        std::iota(pair.begin(), pair.end(), g * size);
        std::partial_sort(pair.begin(), pair.begin() + std::min<int64_t>(2, size), pair.end(), [&](int64_t a, int64_t b) {
          return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
        });
        group_score[g] = choice[pair[0]] + (size > 1 ? choice[pair[1]] : 0.0f);
      }
      std::iota(groups.begin(), groups.end(), 0);
      best_first(groups, group_score);
      for (int64_t j = r.topk_group; j < G; ++j)
        for (int64_t e = groups[j] * size; e < (groups[j] + 1) * size; ++e) choice[e] = -INFINITY;
    }
    std::iota(experts.begin(), experts.end(), 0);
    best_first(experts, choice);
    double sum = 0;
    for (int64_t j = 0; j < K; ++j) {
      idx[n * K + j] = static_cast<int32_t>(experts[j]);
      sum += s[experts[j]];
    }
    for (int64_t j = 0; j < K; ++j)
      weights[n * K + j] = static_cast<float>(r.route_scale * static_cast<double>(s[experts[j]]) / sum);
  }
}

void sigmoid_route_backward(float* dlogits, const float* dw, const float* dscores, const float* scores,
                            const int32_t* idx, const float* weights, int64_t N, int64_t E, const SigmoidRouting& r) {
  const int64_t K = r.top_k;
  std::vector<double> ds(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const float* s = scores + n * E;
    const float* g = dw + n * K;
    const float* w = weights + n * K;
    const int32_t* chosen = idx + n * K;
    for (int64_t e = 0; e < E; ++e) ds[e] = dscores ? dscores[n * E + e] : 0.0;
    // w_j = scale · s_j / S over the chosen: d s_j = (scale · g_j − Σ_m g_m w_m) / S.
    double S = 0, gw = 0;
    for (int64_t j = 0; j < K; ++j) {
      S += s[chosen[j]];
      gw += static_cast<double>(g[j]) * w[j];
    }
    for (int64_t j = 0; j < K; ++j) ds[chosen[j]] += (r.route_scale * g[j] - gw) / S;
    for (int64_t e = 0; e < E; ++e) dlogits[n * E + e] = static_cast<float>(ds[e] * s[e] * (1.0 - s[e]));
  }
}

double seq_balance_loss(std::vector<float>& dscores, const float* scores, const int32_t* idx, int64_t B, int64_t T,
                        int64_t E, int64_t K, double coeff) {
  dscores.assign(static_cast<size_t>(B * T * E), 0.0f);
  std::vector<double> f(static_cast<size_t>(E)), P(static_cast<size_t>(E)), sum(static_cast<size_t>(T));
  double loss = 0;
  for (int64_t b = 0; b < B; ++b) {
    std::fill(f.begin(), f.end(), 0.0);
    std::fill(P.begin(), P.end(), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = b * T + t;
      for (int64_t j = 0; j < K; ++j) f[idx[n * K + j]] += static_cast<double>(E) / static_cast<double>(K * T);
      double S = 0;
      for (int64_t e = 0; e < E; ++e) S += scores[n * E + e];
      sum[t] = S;
      for (int64_t e = 0; e < E; ++e) P[e] += scores[n * E + e] / S / static_cast<double>(T);
    }
    for (int64_t e = 0; e < E; ++e) loss += coeff * f[e] * P[e] / static_cast<double>(B);
    // d loss / d s'_{t,e} = coeff · f_e / (B·T) through s'_e = s_e / S: d s_e = (g_e − Σ_i g_i s'_i) / S.
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = b * T + t;
      const double S = sum[t];
      double gs = 0;
      for (int64_t e = 0; e < E; ++e) gs += coeff * f[e] / static_cast<double>(B * T) * scores[n * E + e] / S;
      for (int64_t e = 0; e < E; ++e)
        dscores[n * E + e] = static_cast<float>((coeff * f[e] / static_cast<double>(B * T) - gs) / S);
    }
  }
  return loss;
}

std::vector<float> update_router_biases(ParamStore& params, const ModelConfig& config,
                                        const std::vector<std::vector<double>>& counts) {
  std::vector<float> absmax(static_cast<size_t>(config.blocks()), 0.0f);
  if (!config.moe.sigmoid()) return absmax;
  const int64_t E = config.moe.experts;
  const float rate = static_cast<float>(config.moe.bias_update_rate);
  std::vector<float> bias(static_cast<size_t>(E));
  for (int64_t l = 0; l < config.blocks(); ++l) {
    if (!config.moe_layer(l)) continue;
    const size_t row = params.index("model.layers." + std::to_string(l) + ".mlp.gate.e_score_correction_bias");
    if (!params.resident(row)) continue;
    const kernels::Tensor b = params.param(row);
    const kernels::Tensor host = kernels::Tensor::view(bias.data(), {E});
    kernels::copy(host, b);
    const std::vector<double>& c = counts.at(static_cast<size_t>(l));
    if (rate > 0 && static_cast<int64_t>(c.size()) == E) {
      // sign(mean − c_e) = sign(total − E·c_e): exact on the integer counts.
      const double total = std::accumulate(c.begin(), c.end(), 0.0);
      for (int64_t e = 0; e < E; ++e) {
        const double gap = total - static_cast<double>(E) * c[e];
        bias[e] += rate * static_cast<float>((gap > 0) - (gap < 0));
      }
      kernels::copy(b, host);
    }
    for (float v : bias) absmax[l] = std::max(absmax[l], std::fabs(v));
  }
  return absmax;
}

}  // namespace precon::worker
