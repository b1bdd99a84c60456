// Neural-network ops for GPT-2 and Llama forward and backward passes, llm.c style: forward and
// backward side by side, outputs first, gradients prefixed d. Shape letters: B batch, T time,
// C channels, NH heads, OC output channels, V real vocabulary, Vp padded vocabulary; for Llama
// also F MLP hidden size, NKV kv heads, hd head dim.
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

// The Llama family, in Hugging Face LlamaForCausalLM's conventions.

// Token embedding without positions: out[b,t,:] = wte[tokens[b,t],:]. out (B,T,C), tokens (B,T) i32,
// wte (Vp,C).
void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte);
// Accumulates dwte (Vp,C) from dout (B,T,C).
void embedding_backward(Tensor dwte, const Tensor& dout, const Tensor& tokens);

// RMSNorm (HF LlamaRMSNorm): out = inp · rsqrt(mean_c(inp²) + eps) · weight, statistics in fp32.
// inp/out (N,C) or (B,T,C); rstd (N) fp32 saved for the backward; weight (C). eps finite, >= 0.
void rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& inp, const Tensor& weight, float eps);
// Accumulates into dinp and dweight (either may be an empty Tensor, data == nullptr, to skip it, as
// layernorm_backward allows).
void rmsnorm_backward(Tensor dinp, Tensor dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd);

// Rotary position embeddings, HF's rotate-half convention, in place over x (B,T,H·hd) viewed as H
// heads of hd channels (hd even). For position t and i < hd/2, with angle = t · theta^(−2i/hd)
// (computed in double):  x[i] ← x[i]·cos − x[i+hd/2]·sin;  x[i+hd/2] ← x[i+hd/2]·cos + x[i]·sin.
void rope_forward(Tensor x, int n_head, double theta);
// In place: dx (B,T,H·hd) holding d loss / d rope output becomes d loss / d rope input (the
// inverse rotation).
void rope_backward(Tensor dx, int n_head, double theta);

// SwiGLU: out = silu(gate) · up = gate·sigmoid(gate)·up. All (N,F) or (B,T,F).
void swiglu_forward(Tensor out, const Tensor& gate, const Tensor& up);
// Accumulates into dgate and dup.
void swiglu_backward(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate, const Tensor& up);

// Grouped-query attention's input for attention_forward: qkv (B,T,3·NH·hd) = [q | k repeated |
// v repeated], where kv head g serves query heads [g·NH/NKV, (g+1)·NH/NKV) (HF's repeat_kv).
// q (B,T,NH·hd), k and v (B,T,NKV·hd); NKV divides NH.
void qkv_pack_forward(Tensor qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head);
// Accumulates into dq, dk, dv from dqkv; dk and dv sum over the query heads that share a kv head.
void qkv_pack_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dqkv, int n_head, int n_kv_head);

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
