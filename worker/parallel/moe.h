// A mixture-of-experts MLP (Megatron's MoE layer, dropless): a router picks each token's top_k of E
// experts, the tokens of each expert are gathered into one contiguous block and each expert is one
// GEMM per projection, and the outputs come back weighted by the renormalised router
// probabilities (+ a shared expert on every token). Its communication contract, like the layers of
// layers.h: under tensor parallelism every rank routes the same (replicated) tokens with the same
// replicated router, each expert's gate/up are column-parallel and its down row-parallel (the
// dense MLP's split), the combined output is reduced from the region once, the combine weights'
// gradient (a partial dot product on each rank) is summed over the group, and the input's gradient
// is all-reduced before the router's (the same on every rank) is added.
//
// The load-balancing loss of one forward, over its N tokens: aux = coeff · E · Σₑ fₑ · Pₑ with
// fₑ = (assignments to e) / (N · k) (no gradient) and Pₑ = the mean over tokens of p[e]; its
// gradient d aux / d p[n, e] = coeff · E · fₑ / N joins the router's in backward().
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "worker/parallel/layers.h"

namespace precon::worker {

class MoeMlp {
 public:
  // Table rows: the router (E × C, stored (out, in)), per expert its gate, up and down, and the
  // shared expert's (kNoRow: none).
  struct Rows {
    size_t router = kNoRow;
    std::vector<size_t> gate, up, down;
    size_t shared_gate = kNoRow, shared_up = kNoRow, shared_down = kNoRow;
  };
  // Sizes of one rank's computation: N tokens of C channels, each expert's (and the shared
  // expert's) width on this rank, the activations' dtype and device.
  struct Shape {
    int64_t tokens = 0, channels = 0, expert_width = 0, shared_width = 0;
    kernels::DType dtype = kernels::DType::f32;
    kernels::Device device = kernels::Device::cpu;
  };

  // What one forward keeps for its backward: one per layer and activation slot.
  struct Acts {
    kernels::Buffer buf;
    kernels::Tensor x32;                     // (N, C) f32: the router's input (bf16 activations only)
    kernels::Tensor logits, probs;           // (N, E) f32
    kernels::Tensor idx, weights, pos;       // (N, k): chosen experts i32, their weights f32, rows in xp i32
    kernels::Tensor rows;                    // (N·k) i32: the token of each row of xp
    kernels::Tensor aux_dprobs;              // (E) f32: d aux / d p[n, e]
    kernels::Tensor xp, gate, up, h, y;      // (N·k, ·): tokens grouped by expert, expert 0's first
    kernels::Tensor shared_gate, shared_up, shared_h, shared_out;  // (N, ·)
    std::vector<int64_t> counts;             // per expert: the tokens it got
    double aux = 0;                          // this forward's load-balancing loss
  };
  // Backward scratch, one for all the layers of a model.
  struct Scratch {
    kernels::Buffer buf;
    kernels::Tensor dy, dxp;                 // (N·k, C)
    kernels::Tensor dh, dgate, dup;          // (N·k, F)
    kernels::Tensor dw;                      // (N, k) f32
    kernels::Tensor dlogits;                 // (N, E) f32
    kernels::Tensor dx32, dx;                // (N, C) f32, and in the activations' dtype
    kernels::Tensor shared_dh, shared_dgate, shared_dup;  // (N, Fs)
  };

  MoeMlp(TpGroup tp, Rows rows, int64_t top_k, double aux_loss_coeff);
  int64_t experts() const { return static_cast<int64_t>(rows_.gate.size()); }
  int64_t top_k() const { return top_k_; }
  const Rows& rows() const { return rows_; }

  Acts make_acts(const Shape& shape) const;
  Scratch make_scratch(const Shape& shape) const;

  // out, in: (B, T, C) or (N, C). Routes, computes and combines; records a.counts and a.aux.
  void forward(const LayerWeights& w, kernels::Tensor out, const kernels::Tensor& in, Acts& a) const;
  // Accumulates every weight's gradient (the router's with the aux loss's) and din (zeroed by the
  // caller), complete on every rank when this returns.
  void backward(const LayerWeights& w, kernels::Tensor din, const kernels::Tensor& in, const kernels::Tensor& dout,
                const Acts& a, Scratch& s) const;

 private:
  bool shared() const { return rows_.shared_gate != kNoRow; }
  TpGroup tp_;
  Rows rows_;
  int64_t top_k_;
  double aux_loss_coeff_;
};

}  // namespace precon::worker
