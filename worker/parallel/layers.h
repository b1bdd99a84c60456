// Megatron's tensor-parallel building blocks, each with its communication contract stated and kept
// inside it, so model code never branches on the layout or calls a region itself:
//   ColumnParallelLinear  the output features split over the ranks (this rank's heads, MLP columns,
//                         vocabulary); its input is copied to the region (forward identity, backward
//                         all-reduce of the input's gradient); gather_output all-gathers the output.
//   RowParallelLinear     the input features split; input_is_parallel (the usual case, after a
//                         column-parallel layer) takes this rank's slice as it is, else scatters the
//                         full input first; the partial outputs are reduced from the region, the bias
//                         added once (by the group's first rank).
//   VocabParallelEmbedding  each rank adds the embedding rows of its vocabulary slice; the sum
//                         crosses the ranks (positions, when given, are replicated).
//   VocabParallelCrossEntropy  the loss over logits whose vocabulary is split (only a max, a sum of
//                         exponentials and the target's logit per position cross the ranks).
// With one rank (or no group) each is the plain single-process layer, computed with the same
// kernels in the same order. A layer owns rows of the model's parameter table (by index) and reads
// their weights and gradients through LayerWeights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernels/nn.h"
#include "kernels/tensor.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

// What a layer computes with: the weight of a table row as the passes read it (a bf16 copy under
// bf16 precision, this rank's part under tensor parallelism) and the gradient it accumulates into.
class LayerWeights {
 public:
  virtual ~LayerWeights() = default;
  virtual kernels::Tensor weight(size_t row) const = 0;
  virtual kernels::Tensor grad(size_t row) const = 0;
  // The fp32 weight whatever the precision (the router of a mixture of experts computes in fp32).
  virtual kernels::Tensor master(size_t row) const { return weight(row); }
};

constexpr size_t kNoRow = static_cast<size_t>(-1);  // a linear layer without a bias

// A group of ranks as the layers (and the model that builds them) see it: its size and this rank's
// place (one process, or no group: size 1, rank 0). The tensor-parallel group, or the expert-parallel
// one of a mixture of experts; only the layers' regions communicate over it.
struct TpGroup {
  TpGroup() = default;
  TpGroup(Communicator* c) : comm(c) {}  // NOLINT(google-explicit-constructor): a group is its communicator
  Communicator* comm = nullptr;
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  bool parallel() const { return size() > 1; }
};

// One or several weights that read the same input (fused q, k, v; gate and up): out_i = in W_iᵀ
// (+ b_i), each over this rank's output features. Several weights share one copy of the input to
// the region, so their input gradients are summed before the one all-reduce. gather_output needs a
// single weight.
class ColumnParallelLinear {
 public:
  ColumnParallelLinear(TpGroup tp, std::vector<size_t> weights, std::vector<size_t> biases, kernels::WeightLayout layout,
                       bool gather_output = false);
  void forward(const LayerWeights& w, const kernels::Tensor& in, std::initializer_list<kernels::Tensor> outs) const;
  // Accumulates the weights' (and biases') gradients and the input's (din, zeroed by the caller),
  // which is complete on every rank when this returns.
  void backward(const LayerWeights& w, kernels::Tensor din, const kernels::Tensor& in,
                std::initializer_list<kernels::Tensor> douts) const;
  const std::vector<size_t>& weights() const { return weights_; }

 private:
  TpGroup tp_;
  std::vector<size_t> weights_, biases_;
  kernels::WeightLayout layout_;
  bool gather_output_;
};

class RowParallelLinear {
 public:
  RowParallelLinear(TpGroup tp, size_t weight, size_t bias, kernels::WeightLayout layout, bool input_is_parallel = true);
  // out (full output features, the same on every rank) = in W (+ b).
  void forward(const LayerWeights& w, kernels::Tensor out, const kernels::Tensor& in) const;
  // Accumulates the weight's and bias's gradients and din (this rank's slice, or the full input's
  // gradient when the input is not parallel).
  void backward(const LayerWeights& w, kernels::Tensor din, const kernels::Tensor& in, const kernels::Tensor& dout) const;

 private:
  kernels::Tensor bias_here(const LayerWeights& w, bool grad) const;
  TpGroup tp_;
  size_t weight_, bias_;
  kernels::WeightLayout layout_;
  bool input_is_parallel_;
};

// The gradient of a tensor every rank computes whole but reads only in its own part of the heads
// (multi-head latent attention's RoPE key, shared by all heads): each rank holds its heads' share,
// summed over the group in place (copy_to_tp_region's backward). Nothing to do with one rank.
void replicated_input_backward(TpGroup tp, kernels::Tensor dx);

// Token embedding (+ learned positions when `position` is a row): this rank's table holds rows
// [rank · rows, (rank + 1) · rows) of the padded vocabulary.
class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(TpGroup tp, size_t table, size_t position = kNoRow);
  // out (B, T, C); tokens (B, T) i32 on the device, tokens_host the same on the host.
  void forward(const LayerWeights& w, kernels::Tensor out, const kernels::Tensor& tokens,
               const std::vector<int32_t>& tokens_host) const;
  void backward(const LayerWeights& w, const kernels::Tensor& dout, const kernels::Tensor& tokens,
                const std::vector<int32_t>& tokens_host) const;

 private:
  TpGroup tp_;
  size_t table_, position_;
};

class VocabParallelCrossEntropy {
 public:
  VocabParallelCrossEntropy(TpGroup tp, int64_t vocab_size);
  // logits (B, T, Vl): this rank's columns [rank · Vl, (rank + 1) · Vl) of the padded vocabulary.
  // losses (B·T) get −log softmax(target) (0 where target < 0). With compute_grad the logits become
  // d loss / d logits · dloss in place.
  void forward(kernels::Tensor losses, kernels::Tensor logits, const kernels::Tensor& targets,
               const std::vector<int32_t>& targets_host, float dloss, bool compute_grad) const;

 private:
  TpGroup tp_;
  int64_t vocab_size_;
};

}  // namespace precon::worker
