// Causal multi-head attention, kept simple: q, k, v (and dout) are permuted to (B, NH, T, hs)
// so every product is one strided-batched GEMM over B*NH heads, with softmax kernels between.
// GEMMs take the activation dtype (bf16 on tensor cores) and accumulate into fp32 buffers.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace precon::kernels::cuda {

namespace {

using detail::Elems;
using detail::elems;
using detail::Scratch;

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // one warp per attention row

__device__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// att[row, j] = softmax over j <= t of pre[row, :], zero above the diagonal (t = row % T).
// Each lane writes only elements it read itself, so att may alias pre.
// row_max (nullable): each row's largest score.
__global__ void causal_softmax_kernel(Elems att, const float* pre, float* row_max, int64_t rows, int64_t T) {
  int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  int64_t t = row % T, base = row * T;
  float m = -INFINITY;
  for (int64_t j = lane; j <= t; j += 32) m = fmaxf(m, pre[base + j]);
  m = warp_max(m);
  if (row_max && lane == 0) row_max[row] = m;
  float s = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) s += expf(pre[base + j] - m);
  float inv = 1.0f / warp_sum(s);
  for (int64_t j = lane; j < T; j += 32) att.set(base + j, j <= t ? expf(pre[base + j] - m) * inv : 0.0f);
}

// dpre[row, j] = att[row, j] * (datt[row, j] - Σ_k att[row, k] datt[row, k]), zero above the
// diagonal. dpre may alias datt (same per-lane ownership as above).
__global__ void causal_softmax_backward_kernel(Elems dpre, Elems att, const float* datt, int64_t rows, int64_t T) {
  int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  int64_t t = row % T, base = row * T;
  float dot = 0.0f;
  for (int64_t j = lane; j <= t; j += 32) dot += att.get(base + j) * datt[base + j];
  dot = warp_sum(dot);
  for (int64_t j = lane; j < T; j += 32) {
    float g = j <= t ? att.get(base + j) * (datt[base + j] - dot) : 0.0f;
    dpre.set(base + j, g);
  }
}

struct Dims {
  int64_t B, T, C, NH, hs;
};

Dims dims_of(const Tensor& qkv, int n_head) {
  int64_t C = qkv.shape[2] / 3;
  return {qkv.shape[0], qkv.shape[1], C, n_head, C / n_head};
}

// Part `part` (0 q, 1 k, 2 v) of a (B, T, parts*C) tensor, viewed as (B, NH, T, hs).
Tensor heads_view(const Tensor& t, const Dims& d, int part) {
  int64_t row = t.shape[2];
  Tensor v = t;
  v.data = static_cast<char*>(t.data) + part * d.C * int64_t(dtype_size(t.dtype));
  v.ndim = 4;
  v.shape = {d.B, d.NH, d.T, d.hs};
  v.strides = {d.T * row, d.hs, row, 1};
  return v;
}

// A contiguous (B*NH, T, cols) batch over scratch memory.
Tensor batch_view(void* data, const Dims& d, int64_t cols, DType dtype) {
  return Tensor::view(data, {d.B * d.NH, d.T, cols}, dtype, Device::cuda);
}

size_t heads_bytes(const Dims& d, DType dtype) { return size_t(d.B * d.NH * d.T * d.hs) * dtype_size(dtype); }

// Copies part `part` of qkv (or all of dout when parts == 1) into contiguous heads.
Tensor gather_heads(const Scratch& s, const Tensor& t, const Dims& d, int part) {
  Tensor dst = Tensor::view(s.get(), {d.B, d.NH, d.T, d.hs}, t.dtype, Device::cuda);
  detail::strided_convert(dst, heads_view(t, d, part));
  return batch_view(s.get(), d, d.hs, t.dtype);
}

// Adds (or writes) contiguous fp32 heads into part `part` of a (B, T, parts*C) tensor.
void scatter_heads(Tensor t, const Scratch& s, const Dims& d, int part, bool accumulate) {
  Tensor src = Tensor::view(s.get(), {d.B, d.NH, d.T, d.hs}, DType::f32, Device::cuda);
  detail::strided_convert(heads_view(t, d, part), src, 1.0f, accumulate);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head, Tensor row_max) {
  Dims d = dims_of(qkv, n_head);
  DType cd = qkv.dtype;
  float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  Scratch sq(heads_bytes(d, cd)), sk(heads_bytes(d, cd)), sv(heads_bytes(d, cd));
  Tensor q = gather_heads(sq, qkv, d, 0), k = gather_heads(sk, qkv, d, 1), v = gather_heads(sv, qkv, d, 2);

  // Scores in fp32: in place in att when att is fp32.
  bool in_place = att.dtype == DType::f32;
  Scratch spre(in_place ? 0 : size_t(d.B * d.NH * d.T * d.T) * sizeof(float));
  Tensor pre = batch_view(in_place ? att.data : spre.get(), d, d.T, DType::f32);
  cuda::gemm(pre, q, k, Trans::no, Trans::yes, scale, 0.0f);
  int64_t rows = d.B * d.NH * d.T;
  causal_softmax_kernel<<<row_blocks(rows), kThreads>>>(elems(att), pre.f32(), row_max.data ? row_max.f32() : nullptr,
                                                        rows, d.T);
  PRECON_CUDA_LAUNCHED("causal_softmax_kernel");

  Scratch sy(heads_bytes(d, DType::f32));
  cuda::gemm(batch_view(sy.get(), d, d.hs, DType::f32), batch_view(att.data, d, d.T, cd), v, Trans::no, Trans::no,
             1.0f, 0.0f);
  scatter_heads(out, sy, d, 0, false);
}

void attention_backward(Tensor dqkv, Tensor datt, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int n_head) {
  Dims d = dims_of(qkv, n_head);
  DType cd = qkv.dtype;
  float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  Scratch sq(heads_bytes(d, cd)), sk(heads_bytes(d, cd)), sv(heads_bytes(d, cd)), sdy(heads_bytes(d, cd));
  Tensor q = gather_heads(sq, qkv, d, 0), k = gather_heads(sk, qkv, d, 1), v = gather_heads(sv, qkv, d, 2);
  Tensor dy = gather_heads(sdy, dout, d, 0);
  Tensor att3 = batch_view(att.data, d, d.T, cd);

  // datt = dy vᵀ in fp32 (in datt itself when it is fp32), then the softmax backward writes
  // dpre into datt in the activation dtype.
  bool in_place = datt.dtype == DType::f32;
  Scratch sdatt(in_place ? 0 : size_t(d.B * d.NH * d.T * d.T) * sizeof(float));
  Tensor datt32 = batch_view(in_place ? datt.data : sdatt.get(), d, d.T, DType::f32);
  cuda::gemm(datt32, dy, v, Trans::no, Trans::yes, 1.0f, 0.0f);

  Scratch sdv(heads_bytes(d, DType::f32));
  cuda::gemm(batch_view(sdv.get(), d, d.hs, DType::f32), att3, dy, Trans::yes, Trans::no, 1.0f, 0.0f);

  int64_t rows = d.B * d.NH * d.T;
  causal_softmax_backward_kernel<<<row_blocks(rows), kThreads>>>(elems(datt), elems(att), datt32.f32(), rows, d.T);
  PRECON_CUDA_LAUNCHED("causal_softmax_backward_kernel");
  Tensor dpre = batch_view(datt.data, d, d.T, cd);

  // pre = scale q kᵀ: dq = scale dpre k, dk = scale dpreᵀ q.
  Scratch sdq(heads_bytes(d, DType::f32)), sdk(heads_bytes(d, DType::f32));
  cuda::gemm(batch_view(sdq.get(), d, d.hs, DType::f32), dpre, k, Trans::no, Trans::no, scale, 0.0f);
  cuda::gemm(batch_view(sdk.get(), d, d.hs, DType::f32), dpre, q, Trans::yes, Trans::no, scale, 0.0f);
  scatter_heads(dqkv, sdq, d, 0, true);
  scatter_heads(dqkv, sdk, d, 1, true);
  scatter_heads(dqkv, sdv, d, 2, true);
}

}  // namespace precon::kernels::cuda
