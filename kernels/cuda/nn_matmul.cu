// Linear layers (cuBLAS plus a bias kernel) and the fused softmax cross-entropy.
#include "kernels/cuda/common.cuh"

namespace precon::kernels::cuda {

namespace {

using detail::Elems;
using detail::elems;
using detail::grid_for;

constexpr int kThreads = 256;
constexpr int kCeThreads = 512;

__global__ void broadcast_rows_kernel(Elems out, Elems bias, int64_t N, int64_t OC) {
  PRECON_GRID_STRIDE(idx, N * OC) out.set(idx, bias.get(idx % OC));
}

// Reduces v over the block with op (all threads get the result). scratch has blockDim/32 slots.
template <typename Op>
__device__ float block_reduce(float v, float* scratch, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < warps; ++w) v = op(v, scratch[w]);
  return v;
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// One block per row. The loss is logsumexp(l[0:V]) - l[target]; with dlogits the row is then
// overwritten by dloss * (softmax - onehot), zero in [V, Vp). Every logit a thread writes was
// read by that same thread, and l[target] is read before the barrier that precedes the
// writes, so dlogits may alias logits.
__global__ void crossentropy_kernel(float* losses, Elems dlogits, Elems logits, const int32_t* targets, int64_t Vp,
                                    int64_t V, float dloss, bool backward) {
  __shared__ float scratch[kCeThreads / 32];
  int64_t row = blockIdx.x;
  int64_t base = row * Vp;
  int target = targets[row];
  if (target < 0) {
    if (threadIdx.x == 0) losses[row] = 0.0f;
    if (backward)
      for (int64_t j = threadIdx.x; j < Vp; j += blockDim.x) dlogits.set(base + j, 0.0f);
    return;
  }
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, logits.get(base + j));
  m = block_reduce(m, scratch, MaxOp{});
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(logits.get(base + j) - m);
  s = block_reduce(s, scratch, SumOp{});
  float target_logit = logits.get(base + target);
  if (threadIdx.x == 0) losses[row] = logf(s) + m - target_logit;
  if (!backward) return;
  __syncthreads();
  float inv = 1.0f / s;
  for (int64_t j = threadIdx.x; j < Vp; j += blockDim.x) {
    float g = 0.0f;
    if (j < V) g = dloss * (expf(logits.get(base + j) - m) * inv - (j == target ? 1.0f : 0.0f));
    dlogits.set(base + j, g);
  }
}

}  // namespace

void matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias, WeightLayout layout) {
  Tensor out2 = detail::flatten_rows(out), inp2 = detail::flatten_rows(inp);
  int64_t N = out2.shape[0], OC = out2.shape[1];
  float beta = 0.0f;
  if (bias.data) {
    broadcast_rows_kernel<<<grid_for(N * OC, kThreads), kThreads>>>(elems(out2), elems(bias), N, OC);
    PRECON_CUDA_LAUNCHED("broadcast_rows_kernel");
    beta = 1.0f;
  }
  Trans tw = layout == WeightLayout::in_out ? Trans::no : Trans::yes;
  cuda::gemm(out2, inp2, weight, Trans::no, tw, 1.0f, beta);
}

void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout, const Tensor& inp,
                     const Tensor& weight, WeightLayout layout) {
  Tensor dout2 = detail::flatten_rows(dout), inp2 = detail::flatten_rows(inp);
  bool in_out = layout == WeightLayout::in_out;
  if (dinp.data) {
    // in_out: dinp += dout Wᵀ with W (C, OC); out_in: dinp += dout W with W (OC, C).
    cuda::gemm(detail::flatten_rows(dinp), dout2, weight, Trans::no, in_out ? Trans::yes : Trans::no, 1.0f, 1.0f);
  }
  if (dweight.data) {
    // in_out: dW (C, OC) += inpᵀ dout; out_in: dW (OC, C) += doutᵀ inp.
    if (in_out)
      cuda::gemm(dweight, inp2, dout2, Trans::yes, Trans::no, 1.0f, 1.0f);
    else
      cuda::gemm(dweight, dout2, inp2, Trans::yes, Trans::no, 1.0f, 1.0f);
  }
  if (dbias.data) detail::add_column_sums(dbias, dout2);
}

void crossentropy_forward(Tensor losses, const Tensor& logits, const Tensor& targets, int vocab_size) {
  Tensor l2 = detail::flatten_rows(logits);
  int64_t N = l2.shape[0], Vp = l2.shape[1];
  crossentropy_kernel<<<static_cast<unsigned>(N), kCeThreads>>>(losses.f32(), elems(l2), elems(l2), targets.i32(),
                                                                Vp, vocab_size, 0.0f, false);
  PRECON_CUDA_LAUNCHED("crossentropy_kernel");
}

void crossentropy_backward(Tensor dlogits, Tensor losses, const Tensor& logits, const Tensor& targets,
                           int vocab_size, float dloss) {
  Tensor l2 = detail::flatten_rows(logits);
  int64_t N = l2.shape[0], Vp = l2.shape[1];
  crossentropy_kernel<<<static_cast<unsigned>(N), kCeThreads>>>(losses.f32(), elems(dlogits), elems(l2),
                                                                targets.i32(), Vp, vocab_size, dloss, true);
  PRECON_CUDA_LAUNCHED("crossentropy_kernel");
}

}  // namespace precon::kernels::cuda
