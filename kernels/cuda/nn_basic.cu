// Encoder, layer norm, GELU and AdamW kernels. Activations and parameters are f32 or bf16
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
constexpr int kThreads = detail::kRowThreads;
constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // √(2/π)


__global__ void encoder_forward_kernel(Elems out, const int32_t* tokens, Elems wte, Elems wpe, int64_t BT,
                                       int64_t T, int64_t C) {
  PRECON_GRID_STRIDE(idx, BT * C) {
    int64_t bt = idx / C, c = idx % C;
    out.set(idx, wte.get(int64_t(tokens[bt]) * C + c) + wpe.get((bt % T) * C + c));
  }
}

// Repeated tokens collide on a dwte row, hence the atomics.
__global__ void encoder_backward_wte_kernel(Elems dwte, Elems dout, const int32_t* tokens, int64_t BT, int64_t C) {
  PRECON_GRID_STRIDE(idx, BT * C) {
    int64_t bt = idx / C, c = idx % C;
    dwte.atomic_add(int64_t(tokens[bt]) * C + c, dout.get(idx));
  }
}

__global__ void encoder_backward_wpe_kernel(Elems dwpe, Elems dout, int64_t B, int64_t T, int64_t C) {
  PRECON_GRID_STRIDE(idx, T * C) {
    float acc = 0.0f;
    for (int64_t b = 0; b < B; ++b) acc += dout.get(b * T * C + idx);
    dwpe.set(idx, dwpe.get(idx) + acc);
  }
}

__global__ void layernorm_forward_kernel(Elems out, float* mean, float* rstd, Elems inp, Elems weight, Elems bias,
                                         int64_t N, int64_t C) {
  int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= N) return;
  int64_t base = row * C;
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) sum += inp.get(base + c);
  float m = warp_sum(sum) / float(C);
  float sq = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    float d = inp.get(base + c) - m;
    sq += d * d;
  }
  float s = 1.0f / sqrtf(warp_sum(sq) / float(C) + kLayerNormEps);
  for (int64_t c = lane; c < C; c += 32)
    out.set(base + c, (inp.get(base + c) - m) * s * weight.get(c) + bias.get(c));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void layernorm_backward_inp_kernel(Elems dinp, Elems dout, Elems inp, Elems weight, const float* mean,
                                              const float* rstd, int64_t N, int64_t C) {
  int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= N) return;
  int64_t base = row * C;
  float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    float dnorm = weight.get(c) * dout.get(base + c);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (inp.get(base + c) - m) * s;
  }
  float dnorm_mean = warp_sum(dnorm_sum) / float(C);
  float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / float(C);
  for (int64_t c = lane; c < C; c += 32) {
    float norm = (inp.get(base + c) - m) * s;
    float dnorm = weight.get(c) * dout.get(base + c);
    dinp.set(base + c, dinp.get(base + c) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
  }
}

// Column reductions for dweight (Σ dout·norm) and dbias (Σ dout), as in add_column_sums:
// block (32, 8), one column per x-lane, fp32 partials into sums[0, C) and sums[C, 2C).
__global__ void layernorm_backward_params_kernel(float* sums, Elems dout, Elems inp, const float* mean,
                                                 const float* rstd, int64_t N, int64_t C) {
  __shared__ float partial_w[8][33], partial_b[8][33];
  int64_t c = blockIdx.x * 32 + threadIdx.x;
  float acc_w = 0.0f, acc_b = 0.0f;
  if (c < C) {
    for (int64_t r = blockIdx.y * 8 + threadIdx.y; r < N; r += int64_t(gridDim.y) * 8) {
      float d = dout.get(r * C + c);
      acc_w += d * (inp.get(r * C + c) - mean[r]) * rstd[r];
      acc_b += d;
    }
  }
  partial_w[threadIdx.y][threadIdx.x] = acc_w;
  partial_b[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; ++k) {
      acc_w += partial_w[k][threadIdx.x];
      acc_b += partial_b[k][threadIdx.x];
    }
    atomicAdd(sums + c, acc_w);
    atomicAdd(sums + C + c, acc_b);
  }
}

__global__ void add_sums_kernel(Elems dst, const float* sums, int64_t C) {
  PRECON_GRID_STRIDE(c, C) dst.set(c, dst.get(c) + sums[c]);
}

__global__ void gelu_forward_kernel(Elems out, Elems inp, int64_t n) {
  PRECON_GRID_STRIDE(i, n) {
    float x = inp.get(i);
    out.set(i, 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}

__global__ void gelu_backward_kernel(Elems dinp, Elems inp, Elems dout, int64_t n) {
  PRECON_GRID_STRIDE(i, n) {
    float x = inp.get(i);
    float t = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - t * t;
    float local = 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp.set(i, dinp.get(i) + local * dout.get(i));
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float grad_scale, float bc1, float bc2,
                             bool cautious) {
  PRECON_GRID_STRIDE(i, n) {
    float grad = grad_scale * g[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * grad;
    float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    float update = lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    float param = cautious && !(update * p[i] > 0.0f) ? p[i] : p[i] - lr * weight_decay * p[i];
    p[i] = param - update;
  }
}

}  // namespace

void encoder_forward(Tensor out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  int64_t B = out.shape[0], T = out.shape[1], C = out.shape[2];
  encoder_forward_kernel<<<grid_for(B * T * C, kThreads), kThreads>>>(elems(out), tokens.i32(), elems(wte),
                                                                      elems(wpe), B * T, T, C);
  PRECON_CUDA_LAUNCHED("encoder_forward_kernel");
}

void encoder_backward(Tensor dwte, Tensor dwpe, const Tensor& dout, const Tensor& tokens) {
  int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
  if (dwte.data) {
    encoder_backward_wte_kernel<<<grid_for(B * T * C, kThreads), kThreads>>>(elems(dwte), elems(dout), tokens.i32(),
                                                                             B * T, C);
    PRECON_CUDA_LAUNCHED("encoder_backward_wte_kernel");
  }
  if (dwpe.data) {
    encoder_backward_wpe_kernel<<<grid_for(T * C, kThreads), kThreads>>>(elems(dwpe), elems(dout), B, T, C);
    PRECON_CUDA_LAUNCHED("encoder_backward_wpe_kernel");
  }
}

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias) {
  int64_t C = inp.shape[inp.ndim - 1], N = inp.numel() / C;
  layernorm_forward_kernel<<<row_blocks(N), kThreads>>>(elems(out), mean.f32(), rstd.f32(), elems(inp),
                                                        elems(weight), elems(bias), N, C);
  PRECON_CUDA_LAUNCHED("layernorm_forward_kernel");
}

void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  int64_t C = inp.shape[inp.ndim - 1], N = inp.numel() / C;
  if (dinp.data) {
    layernorm_backward_inp_kernel<<<row_blocks(N), kThreads>>>(elems(dinp), elems(dout), elems(inp), elems(weight),
                                                               mean.f32(), rstd.f32(), N, C);
    PRECON_CUDA_LAUNCHED("layernorm_backward_inp_kernel");
  }
  if (!dweight.data && !dbias.data) return;
  Scratch sums(2 * C * sizeof(float));
  float* s = static_cast<float*>(sums.get());
  PRECON_CUDA_CHECK(cudaMemsetAsync(s, 0, 2 * C * sizeof(float), 0));
  int64_t y_blocks = (N + 63) / 64;
  dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(y_blocks > 1024 ? 1024 : y_blocks));
  layernorm_backward_params_kernel<<<grid, dim3(32, 8)>>>(s, elems(dout), elems(inp), mean.f32(), rstd.f32(), N, C);
  PRECON_CUDA_LAUNCHED("layernorm_backward_params_kernel");
  if (dweight.data) {
    add_sums_kernel<<<grid_for(C, kThreads), kThreads>>>(elems(dweight), s, C);
    PRECON_CUDA_LAUNCHED("add_sums_kernel");
  }
  if (dbias.data) {
    add_sums_kernel<<<grid_for(C, kThreads), kThreads>>>(elems(dbias), s + C, C);
    PRECON_CUDA_LAUNCHED("add_sums_kernel");
  }
}

void gelu_forward(Tensor out, const Tensor& inp) {
  int64_t n = inp.numel();
  gelu_forward_kernel<<<grid_for(n, kThreads), kThreads>>>(elems(out), elems(inp), n);
  PRECON_CUDA_LAUNCHED("gelu_forward_kernel");
}

void gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout) {
  int64_t n = inp.numel();
  gelu_backward_kernel<<<grid_for(n, kThreads), kThreads>>>(elems(dinp), elems(inp), elems(dout), n);
  PRECON_CUDA_LAUNCHED("gelu_backward_kernel");
}

void adamw_update(Tensor params, const Tensor& grads, Tensor m, Tensor v, const AdamWParams& hp) {
  int64_t n = params.numel();
  float bc1 = hp.bias_correction ? static_cast<float>(1.0 - std::pow(double(hp.beta1), hp.step)) : 1.0f;
  float bc2 = hp.bias_correction ? static_cast<float>(1.0 - std::pow(double(hp.beta2), hp.step)) : 1.0f;
  adamw_kernel<<<grid_for(n, kThreads), kThreads>>>(params.f32(), grads.f32(), m.f32(), v.f32(), n, hp.lr, hp.beta1,
                                                    hp.beta2, hp.eps, hp.weight_decay, hp.grad_scale, bc1, bc2,
                                                    hp.cautious);
  PRECON_CUDA_LAUNCHED("adamw_kernel");
}

}  // namespace precon::kernels::cuda
