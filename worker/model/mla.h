// Multi-head latent attention (DeepSeek-V3's MLA), one layer, on this rank's heads:
//   q   = q_b(rmsnorm(q_a(x)))  (or q_proj(x) when q_lora_rank = 0), per head [q_nope | q_rope]
//   kva = kv_a_proj_with_mqa(x) = [c_kv | k_rope]; kv = kv_b(rmsnorm(c_kv)), per head [k_nope | v]
//   key_h = [k_nope_h | rope(k_rope)] (the one RoPE key shared by every head), query_h = [q_nope_h |
//   rope(q_rope_h)], causal softmax(query·keyᵀ · f / √(nope + rope)) · v, then o_proj; f is 1, or
//   YaRN's mscale² (rope_scaling.h's yarn_softmax_factor), and rope's frequencies may be YaRN's.
// Under tensor parallelism q_b (q_proj) and kv_b are column-parallel (this rank's heads), o_proj
// row-parallel, the latent projections and their norms replicated; the shared RoPE key's gradient
// is summed over the ranks (replicated_input_backward). The attention itself runs on the packed
// layout attention_forward takes, each head padded to max(nope + rope, v) channels with zeros (the
// queries scaled so that the kernel's 1/√(padded) is 1/√(nope + rope)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "kernels/rope.h"
#include "kernels/tensor.h"
#include "worker/parallel/layers.h"

namespace precon::worker {

struct MlaDims {
  int64_t heads = 1;  // this rank's
  int64_t q_rank = 0, kv_rank = 0, nope = 0, rope = 0, v = 0;
  int64_t qk() const { return nope + rope; }
  int64_t packed() const { return qk() > v ? qk() : v; }  // a head's channels in the packed layout
};

// The table rows of one layer's attention (q_a and q_norm kNoRow without a query latent; q is q_b or
// q_proj).
struct MlaRows {
  size_t q_a = kNoRow, q_norm = kNoRow, q = kNoRow, kv_a = kNoRow, kv_norm = kNoRow, kv_b = kNoRow, o = kNoRow;
};

// What one layer keeps for its backward (B, T, ·): the latents before and after their norms (with
// the norms' rstd), the packed q|k|v, the attention's output and probabilities, and o_proj's input.
struct MlaLayerActs {
  kernels::Tensor cq, cqn, rstdq, ckv, ckvn, rstdkv, qkv, atty, att, attv;
};

// One slot's temporaries and backward scratch (B, T, ·), shared by its layers.
struct MlaScratch {
  kernels::Tensor q, kv, kva, qpe, kpe;
  kernels::Tensor dattv, datty, dqkv, datt, dq, dqpe, dkv, dkpe, dkva, dckv, dckvn, dcq, dcqn;
};

class MlaAttention {
 public:
  // softmax_factor: f above.
  MlaAttention(TpGroup tp, const MlaRows& rows, const MlaDims& dims, const kernels::Rope& rope, double softmax_factor,
               float eps);
  // out (B, T, C) = the attention of x (B, T, C); row_max as attention_forward's (empty: none).
  void forward(const LayerWeights& w, kernels::Tensor out, const kernels::Tensor& x, const MlaLayerActs& a,
               const MlaScratch& s, kernels::Tensor row_max = {}) const;
  // Accumulates the weights' gradients and dx (B, T, C), which the caller zeroes; dout is out's gradient.
  void backward(const LayerWeights& w, kernels::Tensor dx, const kernels::Tensor& x, const kernels::Tensor& dout,
                const MlaLayerActs& a, const MlaScratch& s) const;

 private:
  float q_scale() const;
  TpGroup tp_;
  MlaRows rows_;
  MlaDims d_;
  kernels::Rope rope_;
  double softmax_factor_;
  float eps_;
  std::optional<ColumnParallelLinear> q_a_;  // replicated
  ColumnParallelLinear q_, kv_a_, kv_b_;     // kv_a replicated
  RowParallelLinear o_;
};

}  // namespace precon::worker
