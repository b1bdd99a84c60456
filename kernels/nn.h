// Neural-network ops for a GPT-2 forward and backward pass, llm.c style: forward and backward
// side by side, outputs first, gradients prefixed d. Shape letters: B batch, T time,
// C channels, NH heads, OC output channels, V real vocabulary, Vp padded vocabulary.
// Activations and parameters are fp32 on CPU; on CUDA fp32 or bf16 (parameters given to the
// CUDA ops may be bf16 copies of fp32 masters). Token and target tensors are i32.
//
// Backward convention: every backward ADDS into its d-outputs (callers zero gradients once per
// step), so residual branches and tied weights accumulate naturally.
#pragma once

#include <vector>

#include "kernels/tensor.h"

namespace precon::kernels {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. out (B,T,C), tokens (B,T) i32, wte (Vp,C), wpe (maxT,C).
void encoder_forward(Tensor out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
void encoder_backward(Tensor dwte, Tensor dwpe, const Tensor& dout, const Tensor& tokens);

// Layer normalisation over C with eps 1e-5. inp/out (N,C) or (B,T,C); mean, rstd (N) fp32 saved
// for the backward; weight, bias (C).
void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias);
void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd);

// GELU, tanh approximation: 0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³))). Any shape.
void gelu_forward(Tensor out, const Tensor& inp);
void gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout);

// How a linear layer's weight is stored.
enum class WeightLayout : uint8_t {
  in_out,  // (C, OC), Hugging Face Conv1D: out = inp @ W + b
  out_in,  // (OC, C), nn.Linear / tied embedding: out = inp @ Wᵀ + b
};

// out (N,OC) = inp (N,C) @ W + bias. bias may be an empty Tensor (data == nullptr).
// inp and out may also be (B,T,·).
void matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    WeightLayout layout);
void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout, const Tensor& inp,
                     const Tensor& weight, WeightLayout layout);

// Causal multi-head self-attention. qkv (B,T,3C) laid out [q | k | v], each C split into NH heads
// of C/NH; out (B,T,C); att (B,NH,T,T) saves the softmax probabilities for the backward
// (entries above the diagonal are zero). Scale 1/√(C/NH).
void attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head);
// dqkv (B,T,3C) accumulates; datt (B,NH,T,T) is scratch (overwritten).
void attention_backward(Tensor dqkv, Tensor datt, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int n_head);

// Fused softmax cross-entropy over the first V of Vp logits. logits (N,Vp) or (B,T,Vp);
// targets (N) i32, negative targets are ignored (loss 0, gradient 0). losses (N) fp32.
void crossentropy_forward(Tensor losses, const Tensor& logits, const Tensor& targets, int vocab_size);
// Writes losses and dlogits = dloss * (softmax(logits) - onehot(target)), zero in the padded
// columns [V, Vp). dlogits may alias logits (overwritten in place, not accumulated).
void crossentropy_backward(Tensor dlogits, Tensor losses, const Tensor& logits, const Tensor& targets,
                           int vocab_size, float dloss);

// AdamW, PyTorch semantics, fp32 tensors of equal numel:
//   p -= lr*wd*p; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'²  with g' = grad_scale * g
//   p -= lr * (m / (1-b1^t)) / (√(v / (1-b2^t)) + eps)
struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int step = 1;              // t, 1-based, for bias correction
  bool bias_correction = true;
  float grad_scale = 1.0f;   // multiplies the gradient first (global-norm clipping)
};
void adamw_update(Tensor params, const Tensor& grads, Tensor m, Tensor v, const AdamWParams& hp);

// √(Σ‖g‖²) over all tensors, accumulated in double, returned on the host.
double global_norm(const std::vector<Tensor>& tensors);

}  // namespace precon::kernels
