// The mixture-of-experts kernels: top-k softmax routing (fp32), the row gather/scatter that groups
// tokens by expert, and the weighted combine of the experts' outputs. Activations are f32 or bf16
// (read through Elems); all arithmetic is fp32. Backward kernels add into their d-outputs.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace precon::kernels::cuda {

namespace {

using detail::Elems;
using detail::elems;
using detail::grid_for;
using detail::Scratch;

using detail::kRowsPerBlock;
using detail::row_blocks;
using detail::warp_sum;
constexpr int kMoeThreads = detail::kRowThreads;

__device__ inline float moe_warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// One warp per token. Softmax, then K rounds of a warp argmax over the entries strictly after the
// previous round's pick in the order (probability descending, index ascending), the order the CPU
// sorts by: equal probabilities go to the lower index, and NaN probabilities are never picked
// (the round then takes index j so the indices stay in range, as on the CPU).
__global__ void moe_router_forward_kernel(float* probs, int32_t* topk_idx, float* topk_w, const float* logits,
                                          int64_t N, int64_t E, int64_t K) {
  const int64_t n = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* x = logits + n * E;
  float* p = probs + n * E;
  float maxv = -INFINITY;
  for (int64_t e = lane; e < E; e += 32) maxv = fmaxf(maxv, x[e]);
  maxv = moe_warp_max(maxv);
  float sum = 0.0f;
  for (int64_t e = lane; e < E; e += 32) {
    p[e] = expf(x[e] - maxv);
    sum += p[e];
  }
  sum = warp_sum(sum);
  for (int64_t e = lane; e < E; e += 32) p[e] /= sum;

  int32_t* idx = topk_idx + n * K;
  float* w = topk_w + n * K;
  float prev_p = INFINITY, total = 0.0f;
  int prev_e = -1;
  for (int64_t j = 0; j < K; ++j) {
    float best_p = 0.0f;
    int best_e = -1;
    for (int e = lane; e < E; e += 32) {
      const float q = p[e];
      const bool after = q < prev_p || (q == prev_p && e > prev_e);
      if (after && (best_e < 0 || q > best_p)) {
        best_p = q;
        best_e = e;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other_p = __shfl_xor_sync(0xffffffffu, best_p, offset);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
      if (other_e >= 0 && (best_e < 0 || other_p > best_p || (other_p == best_p && other_e < best_e))) {
        best_p = other_p;
        best_e = other_e;
      }
    }
    if (best_e < 0) {
      best_e = static_cast<int>(j);
      best_p = NAN;
    }
    if (lane == 0) {
      idx[j] = best_e;
      w[j] = best_p;
    }
    total += best_p;
    prev_p = best_p;
    prev_e = best_e;
  }
  __syncwarp();
  for (int64_t j = lane; j < K; j += 32) w[j] /= total;
}

// One warp per token. With g_j = (dw_j − Σ_m dw_m w_m) / S the gradient through the renormalisation,
// dp = aux + Σ_j g_j·onehot(idx_j), and dlogits += p ⊙ (dp − ⟨p, dp⟩); ⟨p, dp⟩ is formed without
// materialising dp, and each lane finds its experts' g_j by scanning the K picks.
__global__ void moe_router_backward_kernel(float* dlogits, const float* dw, const float* probs,
                                           const int32_t* topk_idx, const float* topk_w, const float* aux,
                                           int64_t N, int64_t E, int64_t K) {
  const int64_t n = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* p = probs + n * E;
  const int32_t* idx = topk_idx + n * K;
  const float* w = topk_w + n * K;
  const float* g = dw + n * K;
  float S = 0.0f, gw = 0.0f;
  for (int64_t j = lane; j < K; j += 32) {
    S += p[idx[j]];
    gw += g[j] * w[j];
  }
  S = warp_sum(S);
  gw = warp_sum(gw);
  float dot = 0.0f;
  if (aux)
    for (int64_t e = lane; e < E; e += 32) dot += p[e] * aux[e];
  for (int64_t j = lane; j < K; j += 32) dot += p[idx[j]] * ((g[j] - gw) / S);
  dot = warp_sum(dot);
  float* dl = dlogits + n * E;
  for (int64_t e = lane; e < E; e += 32) {
    float dp = aux ? aux[e] : 0.0f;
    for (int64_t j = 0; j < K; ++j)
      if (idx[j] == e) dp += (g[j] - gw) / S;
    dl[e] += p[e] * (dp - dot);
  }
}

__global__ void gather_rows_kernel(Elems out, Elems inp, const int32_t* rows, int64_t M, int64_t C) {
  PRECON_GRID_STRIDE(i, M * C) {
    const int64_t m = i / C, c = i % C;
    out.set(i, inp.get(int64_t(rows[m]) * C + c));
  }
}

// Repeated rows collide, hence the atomics; acc is fp32 (dinp itself, or a scratch for bf16).
__global__ void scatter_add_rows_kernel(float* acc, Elems dout, const int32_t* rows, int64_t M, int64_t C) {
  PRECON_GRID_STRIDE(i, M * C) {
    const int64_t m = i / C, c = i % C;
    atomicAdd(acc + int64_t(rows[m]) * C + c, dout.get(i));
  }
}

__global__ void moe_combine_forward_kernel(Elems out, Elems y, const int32_t* pos, const float* w, int64_t N,
                                           int64_t K, int64_t C) {
  PRECON_GRID_STRIDE(i, N * C) {
    const int64_t n = i / C, c = i % C;
    float sum = 0.0f;
    for (int64_t j = 0; j < K; ++j) sum += w[n * K + j] * y.get(int64_t(pos[n * K + j]) * C + c);
    out.set(i, sum);
  }
}

// One thread per element of the rows of dy that pos names; each row is named once, so no atomics.
__global__ void moe_combine_backward_dy_kernel(Elems dy, Elems dout, const int32_t* pos, const float* w, int64_t N,
                                               int64_t K, int64_t C) {
  PRECON_GRID_STRIDE(i, N * K * C) {
    const int64_t nj = i / C, c = i % C;
    const int64_t row = int64_t(pos[nj]) * C + c;
    dy.set(row, dy.get(row) + w[nj] * dout.get((nj / K) * C + c));
  }
}

// One warp per assignment (n, j): dw[n, j] += ⟨dout[n], y[pos[n, j]]⟩.
__global__ void moe_combine_backward_dw_kernel(float* dw, Elems dout, Elems y, const int32_t* pos, int64_t N,
                                               int64_t K, int64_t C) {
  const int64_t nj = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (nj >= N * K) return;
  const int64_t d_row = (nj / K) * C, y_row = int64_t(pos[nj]) * C;
  float dot = 0.0f;
  for (int64_t c = lane; c < C; c += 32) dot += dout.get(d_row + c) * y.get(y_row + c);
  dot = warp_sum(dot);
  if (lane == 0) dw[nj] += dot;
}

}  // namespace

void moe_router_forward(Tensor probs, Tensor topk_idx, Tensor topk_w, const Tensor& logits) {
  const int64_t N = logits.shape[0], E = logits.shape[1], K = topk_idx.shape[1];
  moe_router_forward_kernel<<<row_blocks(N), kMoeThreads>>>(probs.f32(), topk_idx.i32(), topk_w.f32(), logits.f32(),
                                                            N, E, K);
  PRECON_CUDA_LAUNCHED("moe_router_forward_kernel");
}

void moe_router_backward(Tensor dlogits, const Tensor& dw, const Tensor& probs, const Tensor& topk_idx,
                         const Tensor& topk_w, const Tensor& aux_dprobs) {
  const int64_t N = probs.shape[0], E = probs.shape[1], K = topk_idx.shape[1];
  const float* aux = aux_dprobs.data ? aux_dprobs.f32() : nullptr;
  moe_router_backward_kernel<<<row_blocks(N), kMoeThreads>>>(dlogits.f32(), dw.f32(), probs.f32(), topk_idx.i32(),
                                                             topk_w.f32(), aux, N, E, K);
  PRECON_CUDA_LAUNCHED("moe_router_backward_kernel");
}

void gather_rows(Tensor out, const Tensor& inp, const Tensor& rows) {
  const int64_t M = out.shape[0], C = out.shape[1];
  gather_rows_kernel<<<grid_for(M * C, kMoeThreads), kMoeThreads>>>(elems(out), elems(inp), rows.i32(), M, C);
  PRECON_CUDA_LAUNCHED("gather_rows_kernel");
}

// A bf16 dinp would round after every atomic add; its sums run in an fp32 scratch instead and are
// added (rounded once) at the end.
void scatter_add_rows(Tensor dinp, const Tensor& dout, const Tensor& rows) {
  const int64_t N = dinp.shape[0], C = dinp.shape[1], M = dout.shape[0];
  const unsigned blocks = grid_for(M * C, kMoeThreads);
  if (dinp.dtype == DType::f32) {
    scatter_add_rows_kernel<<<blocks, kMoeThreads>>>(dinp.f32(), elems(dout), rows.i32(), M, C);
    PRECON_CUDA_LAUNCHED("scatter_add_rows_kernel");
    return;
  }
  Scratch sums(size_t(N * C) * sizeof(float));
  float* acc = static_cast<float*>(sums.get());
  PRECON_CUDA_CHECK(cudaMemsetAsync(acc, 0, size_t(N * C) * sizeof(float), 0));
  scatter_add_rows_kernel<<<blocks, kMoeThreads>>>(acc, elems(dout), rows.i32(), M, C);
  PRECON_CUDA_LAUNCHED("scatter_add_rows_kernel");
  detail::strided_convert(dinp, sums.view({N, C}, DType::f32), 1.0f, true);
}

void moe_combine_forward(Tensor out, const Tensor& y, const Tensor& pos, const Tensor& w) {
  const int64_t N = out.shape[0], C = out.shape[1], K = w.shape[1];
  moe_combine_forward_kernel<<<grid_for(N * C, kMoeThreads), kMoeThreads>>>(elems(out), elems(y), pos.i32(), w.f32(),
                                                                           N, K, C);
  PRECON_CUDA_LAUNCHED("moe_combine_forward_kernel");
}

void moe_combine_backward(Tensor dy, Tensor dw, const Tensor& dout, const Tensor& y, const Tensor& pos,
                          const Tensor& w) {
  const int64_t N = dout.shape[0], C = dout.shape[1], K = w.shape[1];
  moe_combine_backward_dy_kernel<<<grid_for(N * K * C, kMoeThreads), kMoeThreads>>>(elems(dy), elems(dout), pos.i32(),
                                                                                   w.f32(), N, K, C);
  PRECON_CUDA_LAUNCHED("moe_combine_backward_dy_kernel");
  moe_combine_backward_dw_kernel<<<row_blocks(N * K), kMoeThreads>>>(dw.f32(), elems(dout), elems(y), pos.i32(), N, K,
                                                                     C);
  PRECON_CUDA_LAUNCHED("moe_combine_backward_dw_kernel");
}

}  // namespace precon::kernels::cuda
