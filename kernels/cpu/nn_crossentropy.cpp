// Fused softmax cross-entropy over the first V of Vp logits.
#include <cmath>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/fast_math.h"

namespace precon::kernels::cpu {

namespace {

// Kept apart rather than summed into log-sum-exp: x - max is exact for large logits, while
// max + log_sum would round to the ulp of max.
struct RowStats {
  float max;
  float log_sum;  // log Σ exp(x - max)
};

RowStats row_stats(const float* x, int64_t V) {
  float maxv = x[0];
#pragma omp simd reduction(max : maxv)
  for (int64_t v = 1; v < V; ++v) maxv = maxv > x[v] ? maxv : x[v];
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t v = 0; v < V; ++v) sum += fast_exp(x[v] - maxv);
  return {maxv, std::log(sum)};
}

}  // namespace

void crossentropy_forward(Tensor losses, const Tensor& logits, const Tensor& targets, int vocab_size) {
  const int64_t Vp = logits.shape[logits.ndim - 1], N = logits.numel() / Vp;
  const float* x_all = logits.f32();
  const int32_t* tgt = targets.i32();
  float* loss = losses.f32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    if (tgt[n] < 0) {
      loss[n] = 0.0f;
      continue;
    }
    const float* x = x_all + n * Vp;
    const RowStats st = row_stats(x, vocab_size);
    loss[n] = st.log_sum - (x[tgt[n]] - st.max);
  }
}

void crossentropy_backward(Tensor dlogits, Tensor losses, const Tensor& logits, const Tensor& targets,
                           int vocab_size, float dloss) {
  const int64_t Vp = logits.shape[logits.ndim - 1], N = logits.numel() / Vp, V = vocab_size;
  const float* x_all = logits.f32();
  float* dx_all = dlogits.f32();  // may alias x_all: each row is read fully before it is written
  const int32_t* tgt = targets.i32();
  float* loss = losses.f32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = x_all + n * Vp;
    float* dx = dx_all + n * Vp;
    const int32_t target = tgt[n];
    if (target < 0) {
      loss[n] = 0.0f;
      for (int64_t v = 0; v < Vp; ++v) dx[v] = 0.0f;
      continue;
    }
    const RowStats st = row_stats(x, V);
    loss[n] = st.log_sum - (x[target] - st.max);
    const float shift = st.max + 0.0f, log_sum = st.log_sum;
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) dx[v] = dloss * fast_exp((x[v] - shift) - log_sum);
    dx[target] -= dloss;
    for (int64_t v = V; v < Vp; ++v) dx[v] = 0.0f;
  }
}

}  // namespace precon::kernels::cpu
