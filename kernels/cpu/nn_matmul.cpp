// Linear layer on top of cpu::gemm (OpenBLAS sgemm), with the bias add and bias gradient.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu.h"

namespace precon::kernels::cpu {

namespace {
// A contiguous (rows, last) view of a contiguous (N, X) or (B, T, X) tensor.
Tensor as_matrix(const Tensor& t) {
  return t.ndim == 2 ? t : t.reshape({t.shape[0] * t.shape[1], t.shape[2]});
}
}  // namespace

void matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    WeightLayout layout) {
  const Tensor out2 = as_matrix(out);
  const int64_t N = out2.shape[0], OC = out2.shape[1];
  const Trans trans_w = layout == WeightLayout::in_out ? Trans::no : Trans::yes;
  float beta = 0.0f;
  if (bias.data) {
    // Seeding out with the bias and accumulating (beta = 1) adds it within the sgemm pass.
    float* o = out2.f32();
    const float* b = bias.f32();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) std::memcpy(o + n * OC, b, sizeof(float) * OC);
    beta = 1.0f;
  }
  if (inp.shape[inp.ndim - 1] == 0) {
    if (!bias.data) cpu::fill_zero(out);
    return;
  }
  cpu::gemm(out2, as_matrix(inp), weight, Trans::no, trans_w, 1.0f, beta);
}

void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout, const Tensor& inp,
                     const Tensor& weight, WeightLayout layout) {
  const Tensor dout2 = as_matrix(dout);
  const Tensor inp2 = as_matrix(inp);
  const int64_t N = dout2.shape[0], OC = dout2.shape[1], C = inp2.shape[1];
  if (C > 0) {
    // in_out: out = x W, so dx += dy Wᵀ and dW += xᵀ dy.
    // out_in: out = x Wᵀ, so dx += dy W and dW += dyᵀ x.
    if (dinp.data) {
      cpu::gemm(as_matrix(dinp), dout2, weight, Trans::no, layout == WeightLayout::in_out ? Trans::yes : Trans::no,
           1.0f, 1.0f);
    }
    if (dweight.data) {
      if (layout == WeightLayout::in_out) cpu::gemm(dweight, inp2, dout2, Trans::yes, Trans::no, 1.0f, 1.0f);
      else cpu::gemm(dweight, dout2, inp2, Trans::yes, Trans::no, 1.0f, 1.0f);
    }
  }
  if (dbias.data) {
    // Column sums in blocks of kBlock columns: each thread owns whole blocks and walks the rows,
    // reading kBlock contiguous floats per row.
    constexpr int64_t kBlock = 64;
    const float* dy = dout2.f32();
    float* db = dbias.f32();
    const int64_t n_blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      const int64_t o0 = blk * kBlock, width = std::min(kBlock, OC - o0);
      float acc[kBlock] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float* row = dy + n * OC + o0;
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) acc[j] += row[j];
      }
      for (int64_t j = 0; j < width; ++j) db[o0 + j] += acc[j];
    }
  }
}

}  // namespace precon::kernels::cpu
