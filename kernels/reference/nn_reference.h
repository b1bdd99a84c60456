// Naive reference implementations of the NN ops in kernels/nn.h: plain loops in double, no BLAS,
// no threads. They define what the fast kernels must compute and are checked themselves against
// finite differences in the tests. Same argument order and shape letters as nn.h; contiguous
// row-major arrays; N = number of rows (B*T). Backwards accumulate (+=) like nn.h, except
// crossentropy_backward, which overwrites dlogits. A null d-output is skipped.
#pragma once

#include <cstdint>

#include "kernels/nn.h"

namespace precon::kernels::reference {

void encoder_forward(double* out, const int32_t* tokens, const double* wte, const double* wpe, int B, int T,
                     int C);
void encoder_backward(double* dwte, double* dwpe, const double* dout, const int32_t* tokens, int B, int T, int C);

void layernorm_forward(double* out, double* mean, double* rstd, const double* inp, const double* weight,
                       const double* bias, int N, int C);
void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout, const double* inp,
                        const double* weight, const double* mean, const double* rstd, int N, int C);

void gelu_forward(double* out, const double* inp, int64_t n);
void gelu_backward(double* dinp, const double* inp, const double* dout, int64_t n);

void embedding_forward(double* out, const int32_t* tokens, const double* wte, int B, int T, int C);
void embedding_backward(double* dwte, const double* dout, const int32_t* tokens, int B, int T, int C);

void rmsnorm_forward(double* out, double* rstd, const double* inp, const double* weight, int N, int C, double eps);
void rmsnorm_backward(double* dinp, double* dweight, const double* dout, const double* inp, const double* weight,
                      const double* rstd, int N, int C);

// x (B,T,NH*hd), in place; the backward rotates dx by the opposite angle. The frequencies are
// computed here from the description in kernels/rope.h (YaRN's ramp written out again), not with
// Rope::inv_freq.
void rope_forward(double* x, int B, int T, int NH, int hd, const Rope& rope);
void rope_backward(double* dx, int B, int T, int NH, int hd, const Rope& rope);

void swiglu_forward(double* out, const double* gate, const double* up, int64_t n);
void swiglu_backward(double* dgate, double* dup, const double* dout, const double* gate, const double* up, int64_t n);

// qkv (B,T,3*NH*hd), q (B,T,NH*hd), k and v (B,T,NKV*hd).
void qkv_pack_forward(double* qkv, const double* q, const double* k, const double* v, int B, int T, int NH, int NKV,
                      int hd);
void qkv_pack_backward(double* dq, double* dk, double* dv, const double* dqkv, int B, int T, int NH, int NKV, int hd);

// Mixture of experts: logits and probs (N,E), topk_idx and topk_w (N,K); aux_dprobs (E) may be
// null. The top K are taken by a stable sort of the experts on probability (ties: lower index first).
void moe_router_forward(double* probs, int32_t* topk_idx, double* topk_w, const double* logits, int N, int E, int K);
void moe_router_backward(double* dlogits, const double* dw, const double* probs, const int32_t* topk_idx,
                         const double* topk_w, const double* aux_dprobs, int N, int E, int K);
// out (M,C) = inp[rows]; the backward adds dout (M,C) into dinp[rows].
void gather_rows(double* out, const double* inp, const int32_t* rows, int M, int C);
void scatter_add_rows(double* dinp, const double* dout, const int32_t* rows, int M, int C);
// out (N,C), y and dy (M,C), pos and w and dw (N,K).
void moe_combine_forward(double* out, const double* y, const int32_t* pos, const double* w, int N, int K, int C);
void moe_combine_backward(double* dy, double* dw, const double* dout, const double* y, const int32_t* pos,
                          const double* w, int N, int K, int C);

// weight is (C,OC) for in_out and (OC,C) for out_in; bias (OC) may be null.
void matmul_forward(double* out, const double* inp, const double* weight, const double* bias, int N, int C,
                    int OC, WeightLayout layout);
void matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout, const double* inp,
                     const double* weight, int N, int C, int OC, WeightLayout layout);

// qkv (B,T,3C), out (B,T,C), att (B,NH,T,T) with zeros above the diagonal.
void attention_forward(double* out, double* att, const double* qkv, int B, int T, int C, int NH);
void attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att, int B, int T,
                        int C, int NH);

// logits (N,Vp); softmax over the first V columns; negative targets give loss 0.
void crossentropy_forward(double* losses, const double* logits, const int32_t* targets, int N, int V, int Vp);
// Writes losses and dlogits = dloss * (softmax - onehot), zero in [V,Vp) and in ignored rows.
void crossentropy_backward(double* dlogits, double* losses, const double* logits, const int32_t* targets,
                           int N, int V, int Vp, double dloss);

// One AdamW step, PyTorch's torch.optim.AdamW order of operations, in double.
void adamw_update(double* params, const double* grads, double* m, double* v, int64_t n, const AdamWParams& hp);

}  // namespace precon::kernels::reference
