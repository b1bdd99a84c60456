// Layer normalisation over the last dim, forward and backward.
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu.h"

namespace precon::kernels::cpu {

namespace {
constexpr float kEps = 1e-5f;
}

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias) {
  const int64_t C = inp.shape[inp.ndim - 1], N = inp.numel() / C;
  const float* x_all = inp.f32();
  const float* w = weight.f32();
  const float* b = bias.f32();
  float* y_all = out.f32();
  float* mean_all = mean.f32();
  float* rstd_all = rstd.f32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = x_all + n * C;
    float* y = y_all + n * C;
    // Two passes: the variance from centred values does not cancel catastrophically when the
    // mean is large compared with the spread.
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const float m = sum / C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < C; ++c) sq += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(sq / C + kEps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * w[c] + b[c];
    mean_all[n] = m;
    rstd_all[n] = s;
  }
}

void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  const int64_t C = inp.shape[inp.ndim - 1], N = inp.numel() / C;
  const float* x_all = inp.f32();
  const float* dy_all = dout.f32();
  const float* w = weight.f32();
  const float* mean_all = mean.f32();
  const float* rstd_all = rstd.f32();
  float* dx_all = dinp.data ? dinp.f32() : nullptr;
  const bool param_grads = dweight.data || dbias.data;
  // dweight and dbias sum over rows: each thread sums its rows into its own slice, then the
  // slices are added in thread order (deterministic for a given thread count).
  const int max_threads = omp_get_max_threads();
  std::vector<float> partial(param_grads ? size_t(max_threads) * 2 * C : 0, 0.0f);
  int used_threads = 1;
#pragma omp parallel
  {
    const int tid = omp_get_thread_num();
#pragma omp single
    used_threads = omp_get_num_threads();
    float* pw = param_grads ? partial.data() + size_t(tid) * 2 * C : nullptr;
    float* pb = param_grads ? pw + C : nullptr;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = x_all + n * C;
      const float* dy = dy_all + n * C;
      const float m = mean_all[n], s = rstd_all[n];
      if (dx_all) {
        float g_sum = 0.0f, gx_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, gx_sum)
        for (int64_t c = 0; c < C; ++c) {
          float g = w[c] * dy[c];
          g_sum += g;
          gx_sum += g * (x[c] - m) * s;
        }
        const float g_mean = g_sum / C, gx_mean = gx_sum / C;
        float* dx = dx_all + n * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dx[c] += s * (w[c] * dy[c] - g_mean - (x[c] - m) * s * gx_mean);
      }
      if (param_grads) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          pw[c] += (x[c] - m) * s * dy[c];
          pb[c] += dy[c];
        }
      }
    }
  }
  if (!param_grads) return;
  float* dw = dweight.data ? dweight.f32() : nullptr;
  float* db = dbias.data ? dbias.f32() : nullptr;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    float sw = 0.0f, sb = 0.0f;
    for (int t = 0; t < used_threads; ++t) {
      sw += partial[size_t(t) * 2 * C + c];
      sb += partial[size_t(t) * 2 * C + C + c];
    }
    if (dw) dw[c] += sw;
    if (db) db[c] += sb;
  }
}

}  // namespace precon::kernels::cpu
