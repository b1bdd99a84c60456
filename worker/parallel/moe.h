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
// Expert parallelism (an expert-parallel group of P ranks, P | E): rank r computes experts
// [r·E/P, (r+1)·E/P) for the tokens of every rank of its group. Each rank routes its own tokens,
// groups them by expert (so the tokens for each rank lie in one block), and an all-to-all sends
// each block to its experts' rank; there the received rows are regrouped expert by expert, each
// expert is one GEMM over all of them, and a second all-to-all brings the outputs home before the
// weighted combine. The backward runs the same two exchanges in reverse. A rank's gradients of the
// experts it does not compute stay zero; the data-parallel sum completes every expert's.
//
// The load-balancing loss of one forward, over its N tokens: aux = coeff · E · Σₑ fₑ · Pₑ with
// fₑ = (assignments to e) / (N · k) (no gradient) and Pₑ = the mean over tokens of p[e]; its
// gradient d aux / d p[n, e] = coeff · E · fₑ / N joins the router's in backward(). It is taken over
// this rank's tokens only, whatever the expert-parallel group.
//
// The sigmoid router (Routing::sigmoid, sigmoid_router.h) picks by sigmoid scores plus the bias row
// (read, never given a gradient) and weighs by the scores alone; its balance loss is the
// sequence-wise one, over each sequence of this forward (every rank's sequences are its own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "worker/config/config.h"
#include "worker/parallel/layers.h"
#include "worker/parallel/sigmoid_router.h"

namespace precon::worker {

class MoeMlp {
 public:
  // Table rows: the router (E × C, stored (out, in)), per expert its gate, up and down, and the
  // shared expert's (kNoRow: none).
  struct Rows {
    size_t router = kNoRow;
    size_t bias = kNoRow;  // the sigmoid router's per-expert bias (E), a buffer
    std::vector<size_t> gate, up, down;
    size_t shared_gate = kNoRow, shared_up = kNoRow, shared_down = kNoRow;
  };
  // Sizes of one rank's computation: N tokens of C channels, each expert's (and the shared
  // expert's) width on this rank, the activations' dtype and device.
  struct Shape {
    int64_t tokens = 0, channels = 0, expert_width = 0, shared_width = 0;
    int64_t seq_len = 0;  // tokens of one sequence (the sequence-wise balance loss's); 0 = all of them
    kernels::DType dtype = kernels::DType::f32;
    kernels::Device device = kernels::Device::cpu;
  };

  // The rows the experts of this rank compute, gathered from the expert-parallel group: R of them
  // (R = N·k without expert parallelism, where they are the sender's own rows). Grown as needed.
  struct ExpertRows {
    kernels::Buffer buf;
    int64_t capacity = 0;                    // rows the buffer holds
    kernels::Tensor xr, yr;                  // (R, C): as received, source rank by source rank
    kernels::Tensor order, inv;              // (R) i32: expert-major row i is received row order[i]; inv its inverse
    kernels::Tensor x, gate, up, h, y;       // (R, ·): expert-major, this rank's first expert's first
  };
  // What one forward keeps for its backward: one per layer and activation slot.
  struct Acts {
    kernels::Buffer buf;
    kernels::Tensor x32;                     // (N, C) f32: the router's input (bf16 activations only)
    kernels::Tensor logits, probs;           // (N, E) f32: probs the softmax's, or the sigmoid's scores
    kernels::Tensor idx, weights, pos;       // (N, k): chosen experts i32, their weights f32, rows in xs i32
    kernels::Tensor rows;                    // (N·k) i32: the token of each row of xs
    kernels::Tensor aux_dprobs;              // (E) f32: d aux / d p[n, e]
    kernels::Tensor xs, ys;                  // (N·k, C): this rank's tokens grouped by expert, their outputs
    kernels::Tensor shared_gate, shared_up, shared_h, shared_out;  // (N, ·)
    ExpertRows ex;                           // what this rank's experts computed
    std::vector<int64_t> counts;             // per expert: this rank's tokens it got
    std::vector<int64_t> send_rows, recv_rows;  // per rank of the expert-parallel group: rows exchanged
    std::vector<int64_t> local_rows;         // per expert of this rank: the rows it computed (from every rank)
    std::vector<float> seq_dscores;          // (N·E) sigmoid router: d balance loss / d scores (empty: none)
    double aux = 0;                          // this forward's load-balancing loss
    Shape shape;
  };
  // Backward scratch, one for all the layers of a model; the expert-side part grows as needed.
  struct Scratch {
    kernels::Buffer buf;
    kernels::Tensor dys, dxs;                // (N·k, C): the sender's side
    kernels::Tensor dw;                      // (N, k) f32
    kernels::Tensor dlogits;                 // (N, E) f32
    kernels::Tensor dx32, dx;                // (N, C) f32, and in the activations' dtype
    kernels::Tensor shared_dh, shared_dgate, shared_dup;  // (N, Fs)
    kernels::Buffer expert_buf;
    int64_t capacity = 0;
    kernels::Tensor dyr, dxr;                // (R, C) as exchanged, source rank by source rank
    kernels::Tensor dy, dx_rows;             // (R, C) expert-major
    kernels::Tensor dh, dgate, dup;          // (R, F)
    Shape shape;
  };

  // How tokens choose their experts (model.moe's keys).
  struct Routing {
    int64_t top_k = 2;
    double aux_loss_coeff = 0;      // softmax: the load-balancing loss's coefficient
    bool sigmoid = false;           // DeepSeek-V3's router, with n_group, topk_group and route_scale
    int64_t n_group = 1, topk_group = 1;
    double route_scale = 1;
    double seq_aux_loss_coeff = 0;  // sigmoid: the sequence-wise balance loss's coefficient
  };
  static Routing routing_of(const MoeConfig& moe);

  // ep: the expert-parallel group (none or one rank: every expert here).
  MoeMlp(TpGroup tp, TpGroup ep, Rows rows, Routing routing);
  int64_t experts() const { return static_cast<int64_t>(rows_.gate.size()); }
  int64_t top_k() const { return top_k_; }
  int64_t local_experts() const { return experts() / ep_.size(); }
  int64_t first_expert() const { return ep_.rank() * local_experts(); }
  // Seconds spent in the expert-parallel all-to-alls since construction.
  double alltoall_seconds() const { return alltoall_seconds_; }
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
  // The sigmoid router's forward (a.logits in, a.probs, a.idx, a.weights, a.aux and a.seq_dscores
  // out; returns the chosen experts) and backward (s.dw in, s.dlogits out).
  std::vector<int32_t> route_sigmoid(const LayerWeights& w, Acts& a) const;
  // The softmax router's load-balancing loss: a.aux and a.aux_dprobs from a.probs and a.counts.
  void softmax_balance(Acts& a) const;
  SigmoidRouting sigmoid_routing() const;
  void route_sigmoid_backward(const Acts& a, Scratch& s) const;
  // Expert parallelism: sends this rank's grouped rows to their experts' ranks (a.ex.x, expert-major)
  // and brings the outputs home (a.ys); the backward's two exchanges.
  void dispatch(Acts& a) const;
  void gather_outputs(Acts& a) const;
  void dispatch_grads(const Acts& a, Scratch& s) const;
  void return_grads(const Acts& a, Scratch& s) const;
  void exchange(const kernels::Tensor& send, const std::vector<int64_t>& send_rows, const kernels::Tensor& recv,
                const std::vector<int64_t>& recv_rows) const;
  TpGroup tp_, ep_;
  Rows rows_;
  Routing routing_;
  int64_t top_k_;
  mutable double alltoall_seconds_ = 0;
  mutable int64_t exchanges_ = 0;
  int64_t kill_at_exchange_;  // the fault hook's alltoall:S (-1: none)
};

}  // namespace precon::worker
