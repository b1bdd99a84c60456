// DeepSeek-V3's sigmoid router (model.moe.router = "sigmoid"), on the host: N tokens, E experts, K
// chosen per token. The scores s = sigmoid(logits) pick the experts through s + bias, a per-expert
// bias no gradient reaches (auxiliary-loss-free balancing); the chosen experts' weights come from
// the scores alone, normalised over the K and times route_scale. With n_group > 1 the experts form
// n_group equal groups of consecutive indices, a group's score is the sum of its two largest
// s + bias (its one value for a group of one), and a token chooses among the topk_group best groups
// only. Every order is (value descending, index ascending): ties go to the lower index.
//
// The router is a few numbers per token: the MoE layer copies its logits here and the routing back
// (one round trip per layer, also on a GPU), and its backward the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/config/config.h"
#include "worker/model/params.h"

namespace precon::worker {

struct SigmoidRouting {
  int64_t top_k = 1;
  int64_t n_group = 1, topk_group = 1;
  double route_scale = 1;
};

// scores (N,E) = sigmoid(logits (N,E)); idx (N,K) the chosen experts, in decreasing order of
// s + bias; weights (N,K) = route_scale · s[idx] / Σ s[idx]. bias (E).
void sigmoid_route_forward(float* scores, int32_t* idx, float* weights, const float* logits, const float* bias,
                           int64_t N, int64_t E, const SigmoidRouting& r);
// dlogits (N,E) = the gradient through the weights and the sigmoid of dw (N,K) = d loss / d weights
// and dscores (N,E) = d loss / d scores from elsewhere (the balance loss; null for none). Written.
void sigmoid_route_backward(float* dlogits, const float* dw, const float* dscores, const float* scores,
                            const int32_t* idx, const float* weights, int64_t N, int64_t E, const SigmoidRouting& r);

// DeepSeek-V3's sequence-wise balance loss over B sequences of T tokens (N = B·T, token n of
// sequence n / T): per sequence fᵢ = E / (K·T) · (its tokens that chose i) and
// Pᵢ = the mean over its tokens of sᵢ / Σₑ sₑ; loss = coeff · mean over the sequences of Σᵢ fᵢ·Pᵢ.
// Returns the loss and writes dscores (N,E) = d loss / d scores (fᵢ a constant).
double seq_balance_loss(std::vector<float>& dscores, const float* scores, const int32_t* idx, int64_t B, int64_t T,
                        int64_t E, int64_t K, double coeff);

// After each optimizer step: each bias row (ParamKind::buffer, mlp.gate.e_score_correction_bias)
// the store holds moves by rate · sign(mean load − load e), counts[l][e] being the step's tokens
// routed to expert e of layer l over every rank (the same on every rank, so every copy moves
// alike). Returns per layer the largest |bias| after the update (0 for the layers not held).
std::vector<float> update_router_biases(ParamStore& params, const ModelConfig& config,
                                        const std::vector<std::vector<double>>& counts);

}  // namespace precon::worker
