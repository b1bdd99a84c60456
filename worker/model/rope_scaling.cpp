#include "worker/model/rope_scaling.h"

#include <cmath>

namespace precon::worker {

double yarn_mscale(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; }

kernels::Rope model_rope(const ModelConfig& m) {
  kernels::Rope r(m.rope_theta);
  const RopeScalingConfig& y = m.rope_scaling;
  if (!y.yarn()) return r;
  r.factor = y.factor;
  r.original_max = static_cast<double>(y.original_max_position_embeddings);
  r.beta_fast = y.beta_fast;
  r.beta_slow = y.beta_slow;
  // yarn_mscale(f, 0) = 1: without mscale_all_dim the denominator is 1.
  r.attention_factor = yarn_mscale(y.factor, y.mscale) / yarn_mscale(y.factor, y.mscale_all_dim);
  return r;
}

double yarn_softmax_factor(const ModelConfig& m) {
  const RopeScalingConfig& y = m.rope_scaling;
  if (!y.yarn() || y.mscale_all_dim == 0) return 1.0;
  const double s = yarn_mscale(y.factor, y.mscale_all_dim);
  return s * s;
}

}  // namespace precon::worker
