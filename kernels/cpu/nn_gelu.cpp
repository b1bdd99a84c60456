// GELU, tanh approximation, forward and backward.
#include <cmath>

#include "kernels/cpu/cpu.h"

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
    y[i] = 0.5f * x[i] * (1.0f + std::tanh(u));
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
    float th = std::tanh(u);
    float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x[i] * x[i]);
    dx[i] += (0.5f * (1.0f + th) + 0.5f * x[i] * (1.0f - th * th) * du_dx) * dy[i];
  }
}

}  // namespace precon::kernels::cpu
