// QK-clip, the "clip" of MuonClip (Kimi K2): after the optimizer's update, every attention head whose
// largest pre-softmax logit S = q·k/√d_head over the step's causal pairs exceeded the threshold τ
// has its query and key weights rescaled so that the same input would reach τ: with γ = τ/S the
// head's rows of W_q (and its q bias) are multiplied by γ^α and its rows of W_k (and k bias) by
// γ^(1−α). Heads under τ are untouched. Under grouped-query attention the unit is a kv head and the
// query heads that share it: S is their largest logit, and all their query rows and its key rows
// are rescaled. Layouts: GPT-2's fused c_attn (stored (in, out): a head's q columns [h·hd, (h+1)·hd)
// and k columns C + the same, with the bias entries alike); Llama's q_proj and k_proj (stored
// (out, in): rows). Multi-head latent attention (Kimi K2's MuonClip for MLA, as Megatron clips it):
// only what belongs to head h alone: its q_nope rows of q_b_proj (q_proj) by γ^α, its k_nope rows of
// kv_b_proj by γ^(1−α) and its q_rope rows by γ, so that the head's whole logit q·k scales by γ; the
// rotary key (kv_a_proj_with_mqa's last rows), which every head shares, and the values are untouched.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "worker/config/config.h"
#include "worker/model/params.h"

namespace precon::worker {

struct QkClipStats {
  double max_logit = -INFINITY;  // over every layer and head, before clipping
  int64_t clipped = 0;           // heads (kv groups under grouped-query attention) rescaled
  std::vector<double> layer_max_logit;  // per layer, over its heads, before clipping
};

// logit_max: the model's largest logit per layer and query head, [l·n_head + h], over every rank.
// Rescales the rows `params` holds (another pipeline stage's layers and another tensor-parallel
// rank's heads are left to them); the statistics
// count the whole model's heads, the same on every rank.
QkClipStats qk_clip(const ParamStore& params, const ModelConfig& config, const std::vector<float>& logit_max,
                    double threshold, double alpha);

}  // namespace precon::worker
