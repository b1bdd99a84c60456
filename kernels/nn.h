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

#include "kernels/rope.h"
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
// heads of hd channels (hd even). For position t and i < hd/2, with angle = t · rope.inv_freq(i, hd)
// (computed in double; kernels/rope.h: theta^(−2i/hd), or YaRN's blend) and a = rope.attention_factor:
// x[i] ← a·(x[i]·cos − x[i+hd/2]·sin);  x[i+hd/2] ← a·(x[i+hd/2]·cos + x[i]·sin).
void rope_forward(Tensor x, int n_head, const Rope& rope);
// In place: dx (B,T,H·hd) holding d loss / d rope output becomes d loss / d rope input (the
// inverse rotation, times the same a).
void rope_backward(Tensor dx, int n_head, const Rope& rope);

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

// Mixture of experts (dropless, top-k routing). N tokens, E experts, K experts per token, M = N·K
// assignments. The router runs in fp32 whatever the activations' dtype.

// probs (N,E) f32 = softmax(logits (N,E) f32) over the experts (max-subtracted, in fp32);
// topk_idx (N,K) i32 = the K experts of largest probability, in decreasing order of probability,
// ties broken toward the lower expert index (ties of the fp32 probabilities: logits that differ
// but round to one probability count as tied); topk_w (N,K) f32 = their probabilities renormalised
// to sum to 1. 1 <= K <= E.
void moe_router_forward(Tensor probs, Tensor topk_idx, Tensor topk_w, const Tensor& logits);
// Accumulates into dlogits (N,E) f32 the gradient through the renormalisation and the softmax (of
// probs, topk_idx, topk_w as moe_router_forward wrote them) of
//   dw (N,K) f32 = d loss / d topk_w, and
//   aux_dprobs (E) f32: a gradient d loss / d probs[n,e] = aux_dprobs[e] for every token n (the
//   load-balancing loss's; an empty Tensor for none).
// With S = Σ_j probs[n, idx[n,j]]: d probs[n, idx[n,j]] += (dw[n,j] − Σ_m dw[n,m] · topk_w[n,m]) / S,
// then dlogits[n,e] += probs[n,e] · (dp[n,e] − Σ_e' probs[n,e'] · dp[n,e']).
void moe_router_backward(Tensor dlogits, const Tensor& dw, const Tensor& probs, const Tensor& topk_idx,
                         const Tensor& topk_w, const Tensor& aux_dprobs);
// out (M,C)[i] = inp (N,C)[rows[i]]; rows (M) i32 in [0, N). f32, or bf16 on CUDA (out and inp alike).
void gather_rows(Tensor out, const Tensor& inp, const Tensor& rows);
// The backward of gather_rows: dinp (N,C)[rows[i]] += dout (M,C)[i] (rows may repeat; accumulated in
// fp32, so a bf16 dinp is rounded once). dinp and dout share a dtype as in gather_rows.
void scatter_add_rows(Tensor dinp, const Tensor& dout, const Tensor& rows);
// out (N,C)[n] = Σ_j w[n,j] · y (M,C)[pos[n,j]] (written, not accumulated; the sum in fp32); pos (N,K)
// i32 in [0, M), w (N,K) f32. y and out f32, or bf16 on CUDA.
void moe_combine_forward(Tensor out, const Tensor& y, const Tensor& pos, const Tensor& w);
// Accumulates dy (M,C)[pos[n,j]] += w[n,j] · dout (N,C)[n] and dw[n,j] += Σ_c dout[n,c] · y[pos[n,j],c]
// (fp32 sums; dw is f32; dy and dout in y's dtype). Each row of y is named by one (n, j) at most
// (the kernels add without atomics; host tensors are checked).
void moe_combine_backward(Tensor dy, Tensor dw, const Tensor& dout, const Tensor& y, const Tensor& pos,
                          const Tensor& w);

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
// (entries above the diagonal are zero). Scale 1/√(C/NH). row_max, when given, (B,NH,T) f32: each
// row's largest pre-softmax logit q_t·k_s/√(C/NH) over its causal keys s ≤ t (QK-clip's statistic;
// the softmax computes it anyway).
void attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head, Tensor row_max = {});
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
// cautious: the decay applies only where that update and p have the same sign (cautious weight
// decay, the modded-nanogpt records' rule); elsewhere p keeps its value before the update.
struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int step = 1;              // t, 1-based, for bias correction
  bool bias_correction = true;
  float grad_scale = 1.0f;   // multiplies the gradient first (global-norm clipping)
  bool cautious = false;
};
void adamw_update(Tensor params, const Tensor& grads, Tensor m, Tensor v, const AdamWParams& hp);

// √(Σ‖g‖²) over all tensors, accumulated in double, returned on the host.
double global_norm(const std::vector<Tensor>& tensors);

}  // namespace precon::kernels
