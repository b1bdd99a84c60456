// The llama family's rotary embeddings from its config: model.rope_theta and [model.rope_scaling]
// (YaRN as DeepSeek-V3 defines it; RopeScalingConfig in worker/config/config.h).
#pragma once

#include "kernels/rope.h"
#include "worker/config/config.h"

namespace precon::worker {

// DeepSeek-V3's yarn_get_mscale: 0.1·m·ln s + 1, or 1 when s <= 1.
double yarn_mscale(double s, double m);

// The frequencies and the cos/sin factor rope_forward/rope_backward take.
kernels::Rope model_rope(const ModelConfig& m);

// What YaRN multiplies multi-head latent attention's softmax scale by: yarn_mscale(factor,
// mscale_all_dim)² when mscale_all_dim ≠ 0, else 1.
double yarn_softmax_factor(const ModelConfig& m);

}  // namespace precon::worker
