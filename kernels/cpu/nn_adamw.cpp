// AdamW step with PyTorch's order of operations (decoupled weight decay applied first).
#include <cmath>

#include "kernels/cpu/cpu.h"

namespace precon::kernels::cpu {

void adamw_update(Tensor params, const Tensor& grads, Tensor m, Tensor v, const AdamWParams& hp) {
  const int64_t n = params.numel();
  float* p = params.f32();
  const float* g = grads.f32();
  float* pm = m.f32();
  float* pv = v.f32();
  // Bias corrections in double: 1 - β^t loses most of its digits in fp32 for β2 = 0.999, small t.
  const double bc1 = hp.bias_correction ? 1.0 - std::pow(double(hp.beta1), hp.step) : 1.0;
  const double bc2 = hp.bias_correction ? 1.0 - std::pow(double(hp.beta2), hp.step) : 1.0;
  const float step_size = static_cast<float>(hp.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - hp.lr * hp.weight_decay;
  const float b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps, scale = hp.grad_scale;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float gi = scale * g[i];
    float mi = b1 * pm[i] + (1.0f - b1) * gi;
    float vi = b2 * pv[i] + (1.0f - b2) * gi * gi;
    pm[i] = mi;
    pv[i] = vi;
    const float update = step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    p[i] = p[i] * (hp.cautious && !(update * p[i] > 0.0f) ? 1.0f : decay) - update;
  }
}

}  // namespace precon::kernels::cpu
