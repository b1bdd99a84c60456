// Token + position embedding, forward and backward.
#include <omp.h>

#include "kernels/cpu/cpu.h"

namespace precon::kernels::cpu {

void encoder_forward(Tensor out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const int64_t T = out.shape[1], C = out.shape[2], BT = out.shape[0] * T;
  float* o = out.f32();
  const int32_t* tok = tokens.i32();
  const float* te = wte.f32();
  const float* pe = wpe.f32();
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const float* e = te + tok[bt] * C;
    const float* p = pe + (bt % T) * C;
    float* y = o + bt * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = e[c] + p[c];
  }
}

void encoder_backward(Tensor dwte, Tensor dwpe, const Tensor& dout, const Tensor& tokens) {
  const int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
  const float* d = dout.f32();
  const int32_t* tok = tokens.i32();
  if (dwte.data) {
    float* dte = dwte.f32();
    // Repeated tokens would race on a row, so each thread owns the rows whose token id is
    // congruent to its thread number; it scans all positions and adds its own, in order, which
    // also keeps the sum deterministic for a given thread count.
#pragma omp parallel
    {
      const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
      for (int64_t bt = 0; bt < B * T; ++bt) {
        if (tok[bt] % nt != tid) continue;
        float* dst = dte + tok[bt] * C;
        const float* src = d + bt * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
      }
    }
  }
  if (dwpe.data) {
    float* dpe = dwpe.f32();
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      float* dst = dpe + t * C;
      for (int64_t b = 0; b < B; ++b) {
        const float* src = d + (b * T + t) * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
      }
    }
  }
}

}  // namespace precon::kernels::cpu
