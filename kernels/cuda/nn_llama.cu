// The Llama-family kernels: embedding, RMSNorm, rotary embeddings, SwiGLU and the grouped-query
// qkv packing. Activations and parameters are f32 or bf16 (read through Elems); all arithmetic is
// fp32, except the rotary angles (double, as on the CPU). Backward kernels add into their d-outputs.
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
constexpr int kThreads = detail::kRowThreads;


__global__ void embedding_forward_kernel(Elems out, const int32_t* tokens, Elems wte, int64_t BT, int64_t C) {
  PRECON_GRID_STRIDE(idx, BT * C) {
    int64_t bt = idx / C, c = idx % C;
    out.set(idx, wte.get(int64_t(tokens[bt]) * C + c));
  }
}

// Repeated tokens collide on a dwte row, hence the atomics.
__global__ void embedding_backward_kernel(Elems dwte, Elems dout, const int32_t* tokens, int64_t BT, int64_t C) {
  PRECON_GRID_STRIDE(idx, BT * C) {
    int64_t bt = idx / C, c = idx % C;
    dwte.atomic_add(int64_t(tokens[bt]) * C + c, dout.get(idx));
  }
}

__global__ void rmsnorm_forward_kernel(Elems out, float* rstd, Elems inp, Elems weight, int64_t N, int64_t C,
                                       float eps) {
  int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= N) return;
  int64_t base = row * C;
  float sq = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    float x = inp.get(base + c);
    sq += x * x;
  }
  float s = 1.0f / sqrtf(warp_sum(sq) / float(C) + eps);
  for (int64_t c = lane; c < C; c += 32) out.set(base + c, inp.get(base + c) * s * weight.get(c));
  if (lane == 0) rstd[row] = s;
}

// dx = s w dy − (s³ / C) x Σ_c dy_c w_c x_c, one warp per row.
__global__ void rmsnorm_backward_inp_kernel(Elems dinp, Elems dout, Elems inp, Elems weight, const float* rstd,
                                            int64_t N, int64_t C) {
  int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= N) return;
  int64_t base = row * C;
  float s = rstd[row];
  float dot = 0.0f;
  for (int64_t c = lane; c < C; c += 32) dot += dout.get(base + c) * weight.get(c) * inp.get(base + c);
  float k = s * s * s * warp_sum(dot) / float(C);
  for (int64_t c = lane; c < C; c += 32) {
    float dx = s * weight.get(c) * dout.get(base + c) - k * inp.get(base + c);
    dinp.set(base + c, dinp.get(base + c) + dx);
  }
}

// dweight's column sums Σ_rows dout·x·rstd as in layernorm_backward_params_kernel: block (32, 8),
// one column per x-lane, fp32 partials into sums[0, C).
__global__ void rmsnorm_backward_weight_kernel(float* sums, Elems dout, Elems inp, const float* rstd, int64_t N,
                                               int64_t C) {
  __shared__ float partial[8][33];
  int64_t c = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < C) {
    for (int64_t r = blockIdx.y * 8 + threadIdx.y; r < N; r += int64_t(gridDim.y) * 8)
      acc += dout.get(r * C + c) * inp.get(r * C + c) * rstd[r];
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; ++k) acc += partial[k][threadIdx.x];
    atomicAdd(sums + c, acc);
  }
}

__global__ void add_sums_kernel(Elems dst, const float* sums, int64_t C) {
  PRECON_GRID_STRIDE(c, C) dst.set(c, dst.get(c) + sums[c]);
}

// a·cos and sign·a·sin of t·rope.inv_freq(i, hd) for t < T, i < half, computed in double once per
// (t, i); a = rope.attention_factor.
__global__ void rope_table_kernel(float2* table, int64_t T, int64_t half, Rope rope, float sign) {
  PRECON_GRID_STRIDE(idx, T * half) {
    int64_t t = idx / half, i = idx % half;
    double angle = double(t) * rope.inv_freq(i, 2 * half);
    double s, c;
    sincos(angle, &s, &c);
    const double a = rope.attention_factor;
    table[idx] = make_float2(static_cast<float>(a * c), sign * static_cast<float>(a * s));
  }
}

// One thread per pair (x[i], x[i + half]) of a head, so the rotation is in place without races.
__global__ void rope_rotate_kernel(Elems x, const float2* table, int64_t BT, int64_t T, int64_t n_head, int64_t half) {
  PRECON_GRID_STRIDE(idx, BT * n_head * half) {
    int64_t i = idx % half, bth = idx / half;
    int64_t bt = bth / n_head;
    int64_t lo = bth * 2 * half + i, hi = lo + half;
    float2 cs = table[(bt % T) * half + i];
    float a = x.get(lo), b = x.get(hi);
    x.set(lo, a * cs.x - b * cs.y);
    x.set(hi, b * cs.x + a * cs.y);
  }
}

__global__ void swiglu_forward_kernel(Elems out, Elems gate, Elems up, int64_t n) {
  PRECON_GRID_STRIDE(i, n) {
    float g = gate.get(i);
    out.set(i, g / (1.0f + expf(-g)) * up.get(i));
  }
}

// 1 − sigmoid(g) as e^−g·sigmoid(g) for g >= 0, where the subtraction would cancel (as on the CPU).
__global__ void swiglu_backward_kernel(Elems dgate, Elems dup, Elems dout, Elems gate, Elems up, int64_t n) {
  PRECON_GRID_STRIDE(i, n) {
    float g = gate.get(i), u = up.get(i), dy = dout.get(i);
    float e = expf(-g);
    float sig = 1.0f / (1.0f + e);
    float sig_neg = g >= 0.0f ? e * sig : 1.0f - sig;
    dgate.set(i, dgate.get(i) + dy * u * sig * (1.0f + g * sig_neg));
    dup.set(i, dup.get(i) + dy * g * sig);
  }
}

// qkv (BT, 3C) from q (BT, C), k and v (BT, Ckv): query head h reads kv head h / group.
__global__ void qkv_pack_forward_kernel(Elems qkv, Elems q, Elems k, Elems v, int64_t BT, int64_t C, int64_t hd,
                                        int64_t group) {
  const int64_t Ckv = C / group;
  PRECON_GRID_STRIDE(idx, BT * 3 * C) {
    int64_t bt = idx / (3 * C), c = idx % (3 * C);
    int64_t part = c / C, within = c % C;
    int64_t kv = bt * Ckv + (within / hd) / group * hd + within % hd;
    float val = part == 0 ? q.get(bt * C + within) : (part == 1 ? k.get(kv) : v.get(kv));
    qkv.set(idx, val);
  }
}

__global__ void qkv_pack_backward_q_kernel(Elems dq, Elems dqkv, int64_t BT, int64_t C) {
  PRECON_GRID_STRIDE(idx, BT * C) {
    int64_t bt = idx / C, c = idx % C;
    dq.set(idx, dq.get(idx) + dqkv.get(bt * 3 * C + c));
  }
}

// One thread per element of dk and dv: sums its group's query heads in order, no atomics.
__global__ void qkv_pack_backward_kv_kernel(Elems dk, Elems dv, Elems dqkv, int64_t BT, int64_t C, int64_t hd,
                                            int64_t group) {
  const int64_t Ckv = C / group;
  PRECON_GRID_STRIDE(idx, BT * Ckv) {
    int64_t bt = idx / Ckv, c = idx % Ckv;
    int64_t g = c / hd, d = c % hd;
    float sk = 0.0f, sv = 0.0f;
    for (int64_t r = 0; r < group; ++r) {
      int64_t src = bt * 3 * C + (g * group + r) * hd + d;
      sk += dqkv.get(src + C);
      sv += dqkv.get(src + 2 * C);
    }
    dk.set(idx, dk.get(idx) + sk);
    dv.set(idx, dv.get(idx) + sv);
  }
}

void rope_rotate(Tensor x, int n_head, const Rope& rope, float sign) {
  int64_t T = x.shape[1], C = x.shape[2], BT = x.shape[0] * T, half = C / n_head / 2;
  Scratch table(size_t(T * half) * sizeof(float2));
  float2* tab = static_cast<float2*>(table.get());
  rope_table_kernel<<<grid_for(T * half, kThreads), kThreads>>>(tab, T, half, rope, sign);
  PRECON_CUDA_LAUNCHED("rope_table_kernel");
  rope_rotate_kernel<<<grid_for(BT * n_head * half, kThreads), kThreads>>>(elems(x), tab, BT, T, n_head, half);
  PRECON_CUDA_LAUNCHED("rope_rotate_kernel");
}

}  // namespace

void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte) {
  int64_t BT = out.shape[0] * out.shape[1], C = out.shape[2];
  embedding_forward_kernel<<<grid_for(BT * C, kThreads), kThreads>>>(elems(out), tokens.i32(), elems(wte), BT, C);
  PRECON_CUDA_LAUNCHED("embedding_forward_kernel");
}

void embedding_backward(Tensor dwte, const Tensor& dout, const Tensor& tokens) {
  int64_t BT = dout.shape[0] * dout.shape[1], C = dout.shape[2];
  embedding_backward_kernel<<<grid_for(BT * C, kThreads), kThreads>>>(elems(dwte), elems(dout), tokens.i32(), BT, C);
  PRECON_CUDA_LAUNCHED("embedding_backward_kernel");
}

void rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& inp, const Tensor& weight, float eps) {
  int64_t C = inp.shape[inp.ndim - 1], N = inp.numel() / C;
  rmsnorm_forward_kernel<<<row_blocks(N), kThreads>>>(elems(out), rstd.f32(), elems(inp), elems(weight), N, C, eps);
  PRECON_CUDA_LAUNCHED("rmsnorm_forward_kernel");
}

void rmsnorm_backward(Tensor dinp, Tensor dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd) {
  int64_t C = inp.shape[inp.ndim - 1], N = inp.numel() / C;
  if (dinp.data) {
    rmsnorm_backward_inp_kernel<<<row_blocks(N), kThreads>>>(elems(dinp), elems(dout), elems(inp), elems(weight),
                                                             rstd.f32(), N, C);
    PRECON_CUDA_LAUNCHED("rmsnorm_backward_inp_kernel");
  }
  if (!dweight.data) return;
  Scratch sums(C * sizeof(float));
  float* s = static_cast<float*>(sums.get());
  PRECON_CUDA_CHECK(cudaMemsetAsync(s, 0, C * sizeof(float), 0));
  int64_t y_blocks = (N + 63) / 64;
  dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(y_blocks > 1024 ? 1024 : y_blocks));
  rmsnorm_backward_weight_kernel<<<grid, dim3(32, 8)>>>(s, elems(dout), elems(inp), rstd.f32(), N, C);
  PRECON_CUDA_LAUNCHED("rmsnorm_backward_weight_kernel");
  add_sums_kernel<<<grid_for(C, kThreads), kThreads>>>(elems(dweight), s, C);
  PRECON_CUDA_LAUNCHED("add_sums_kernel");
}

void rope_forward(Tensor x, int n_head, const Rope& rope) { rope_rotate(x, n_head, rope, 1.0f); }

void rope_backward(Tensor dx, int n_head, const Rope& rope) { rope_rotate(dx, n_head, rope, -1.0f); }

void swiglu_forward(Tensor out, const Tensor& gate, const Tensor& up) {
  int64_t n = gate.numel();
  swiglu_forward_kernel<<<grid_for(n, kThreads), kThreads>>>(elems(out), elems(gate), elems(up), n);
  PRECON_CUDA_LAUNCHED("swiglu_forward_kernel");
}

void swiglu_backward(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  int64_t n = gate.numel();
  swiglu_backward_kernel<<<grid_for(n, kThreads), kThreads>>>(elems(dgate), elems(dup), elems(dout), elems(gate),
                                                              elems(up), n);
  PRECON_CUDA_LAUNCHED("swiglu_backward_kernel");
}

void qkv_pack_forward(Tensor qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head) {
  int64_t BT = q.shape[0] * q.shape[1], C = q.shape[2], hd = C / n_head, group = n_head / n_kv_head;
  qkv_pack_forward_kernel<<<grid_for(BT * 3 * C, kThreads), kThreads>>>(elems(qkv), elems(q), elems(k), elems(v), BT, C,
                                                                        hd, group);
  PRECON_CUDA_LAUNCHED("qkv_pack_forward_kernel");
}

void qkv_pack_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dqkv, int n_head, int n_kv_head) {
  int64_t BT = dq.shape[0] * dq.shape[1], C = dq.shape[2], hd = C / n_head, group = n_head / n_kv_head;
  qkv_pack_backward_q_kernel<<<grid_for(BT * C, kThreads), kThreads>>>(elems(dq), elems(dqkv), BT, C);
  PRECON_CUDA_LAUNCHED("qkv_pack_backward_q_kernel");
  qkv_pack_backward_kv_kernel<<<grid_for(BT * C / group, kThreads), kThreads>>>(elems(dk), elems(dv), elems(dqkv), BT,
                                                                                C, hd, group);
  PRECON_CUDA_LAUNCHED("qkv_pack_backward_kv_kernel");
}

}  // namespace precon::kernels::cuda
