// GELU, tanh approximation, forward and backward. 0.5 (1 + tanh u) is evaluated as the logistic
// sigmoid of 2u: one expf is about three times cheaper than tanhf, and neither vectorises without
// -ffast-math. exp overflowing to inf for very negative x gives the right limits (0 and -0).
#include <cmath>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/fast_math.h"

namespace precon::kernels::cpu {

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluCubic = 0.044715f;
}  // namespace

void gelu_forward(Tensor out, const Tensor& inp) {
  const int64_t n = inp.numel();
  const float* x = inp.f32();
  float* y = out.f32();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float u = kGeluScale * (x[i] + kGeluCubic * x[i] * x[i] * x[i]);
    y[i] = x[i] / (1.0f + fast_exp(-2.0f * u));
  }
}

void gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout) {
  const int64_t n = inp.numel();
  const float* x = inp.f32();
  const float* dy = dout.f32();
  float* dx = dinp.f32();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float u = kGeluScale * (x[i] + kGeluCubic * x[i] * x[i] * x[i]);
    float s = 1.0f / (1.0f + fast_exp(-2.0f * u));  // (1 + tanh u) / 2
    float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x[i] * x[i]);
    dx[i] += (s + 2.0f * x[i] * s * (1.0f - s) * du_dx) * dy[i];
  }
}

}  // namespace precon::kernels::cpu
