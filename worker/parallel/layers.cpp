#include "worker/parallel/layers.h"

#include <stdexcept>
#include <string>

#include "kernels/linalg.h"
#include "worker/parallel/tensor_parallel.h"

namespace precon::worker {

namespace k = kernels;
using k::Tensor;

namespace {

Tensor row_or_empty(const LayerWeights& w, size_t row, bool grad) {
  if (row == kNoRow) return Tensor{};
  return grad ? w.grad(row) : w.weight(row);
}

// A host fp32 tensor shaped like `like` but with `last` channels in its last dimension.
struct Scratch {
  std::vector<float> data;
  Tensor view;
  Scratch(const Tensor& like, int64_t last) {
    const int64_t rows = like.numel() / like.shape[like.ndim - 1];
    data.assign(static_cast<size_t>(rows * last), 0.0f);
    view = like.ndim == 3 ? Tensor::view(data.data(), {like.shape[0], like.shape[1], last})
                          : Tensor::view(data.data(), {rows, last});
  }
};

int64_t out_features(const Tensor& weight, k::WeightLayout layout) {
  return layout == k::WeightLayout::in_out ? weight.shape[1] : weight.shape[0];
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(TpGroup tp, std::vector<size_t> weights, std::vector<size_t> biases,
                                           k::WeightLayout layout, bool gather_output)
    : tp_(tp), weights_(std::move(weights)), biases_(std::move(biases)), layout_(layout), gather_output_(gather_output) {
  if (biases_.empty()) biases_.assign(weights_.size(), kNoRow);
  if (biases_.size() != weights_.size() || weights_.empty())
    throw std::invalid_argument("ColumnParallelLinear: one bias row (or kNoRow) per weight row");
  if (gather_output_ && weights_.size() != 1)
    throw std::invalid_argument("ColumnParallelLinear: gather_output needs a single weight");
}

void ColumnParallelLinear::forward(const LayerWeights& w, const Tensor& in, std::initializer_list<Tensor> outs) const {
  if (outs.size() != weights_.size())
    throw std::invalid_argument("ColumnParallelLinear::forward: " + std::to_string(outs.size()) + " outputs for " +
                                std::to_string(weights_.size()) + " weights");
  if (tp_.parallel()) copy_to_tp_region_forward(in, *tp_.comm);
  size_t i = 0;
  for (const Tensor& out : outs) {
    const Tensor weight = w.weight(weights_[i]);
    const Tensor bias = row_or_empty(w, biases_[i], false);
    if (gather_output_ && tp_.parallel()) {
      Scratch local(out, out_features(weight, layout_));
      k::matmul_forward(local.view, in, weight, bias, layout_);
      gather_from_tp_region_forward(out, local.view, *tp_.comm);
    } else {
      k::matmul_forward(out, in, weight, bias, layout_);
    }
    ++i;
  }
}

void ColumnParallelLinear::backward(const LayerWeights& w, Tensor din, const Tensor& in,
                                    std::initializer_list<Tensor> douts) const {
  if (douts.size() != weights_.size())
    throw std::invalid_argument("ColumnParallelLinear::backward: " + std::to_string(douts.size()) +
                                " output gradients for " + std::to_string(weights_.size()) + " weights");
  size_t i = 0;
  for (const Tensor& dout : douts) {
    const Tensor weight = w.weight(weights_[i]);
    const Tensor dbias = row_or_empty(w, biases_[i], true);
    if (gather_output_ && tp_.parallel()) {
      Scratch local(dout, out_features(weight, layout_));
      gather_from_tp_region_backward(local.view, dout, *tp_.comm);
      k::matmul_backward(din, w.grad(weights_[i]), dbias, local.view, in, weight, layout_);
    } else {
      k::matmul_backward(din, w.grad(weights_[i]), dbias, dout, in, weight, layout_);
    }
    ++i;
  }
  if (tp_.parallel()) copy_to_tp_region_backward(din, *tp_.comm);
}

RowParallelLinear::RowParallelLinear(TpGroup tp, size_t weight, size_t bias, k::WeightLayout layout,
                                     bool input_is_parallel)
    : tp_(tp), weight_(weight), bias_(bias), layout_(layout), input_is_parallel_(input_is_parallel) {}

Tensor RowParallelLinear::bias_here(const LayerWeights& w, bool grad) const {
  // Every rank's partial output is summed: the bias joins once. Its gradient, the sum of the
  // whole output's gradient (the same on every rank), is computed by every rank, so that each
  // holds the replicated bias's full gradient without a collective.
  return grad || tp_.rank() == 0 ? row_or_empty(w, bias_, grad) : Tensor{};
}

void RowParallelLinear::forward(const LayerWeights& w, Tensor out, const Tensor& in) const {
  const Tensor weight = w.weight(weight_);
  if (!input_is_parallel_ && tp_.parallel()) {
    Scratch local(in, layout_ == k::WeightLayout::in_out ? weight.shape[0] : weight.shape[1]);
    scatter_to_tp_region_forward(local.view, in, *tp_.comm);
    k::matmul_forward(out, local.view, weight, bias_here(w, false), layout_);
  } else {
    k::matmul_forward(out, in, weight, bias_here(w, false), layout_);
  }
  if (tp_.parallel()) reduce_from_tp_region_forward(out, *tp_.comm);
}

void RowParallelLinear::backward(const LayerWeights& w, Tensor din, const Tensor& in, const Tensor& dout) const {
  if (tp_.parallel()) reduce_from_tp_region_backward(dout, *tp_.comm);
  const Tensor weight = w.weight(weight_);
  if (!input_is_parallel_ && tp_.parallel()) {
    const int64_t local_in = layout_ == k::WeightLayout::in_out ? weight.shape[0] : weight.shape[1];
    Scratch local(in, local_in), dlocal(din, local_in);
    scatter_to_tp_region_forward(local.view, in, *tp_.comm);
    k::matmul_backward(dlocal.view, w.grad(weight_), bias_here(w, true), dout, local.view, weight, layout_);
    Scratch dfull(din, din.shape[din.ndim - 1]);
    scatter_to_tp_region_backward(dfull.view, dlocal.view, *tp_.comm);
    k::axpby(din, dfull.view, 1.0f, 1.0f);
    return;
  }
  k::matmul_backward(din, w.grad(weight_), bias_here(w, true), dout, in, weight, layout_);
}

void replicated_input_backward(TpGroup tp, Tensor dx) {
  if (tp.parallel()) copy_to_tp_region_backward(dx, *tp.comm);
}

VocabParallelEmbedding::VocabParallelEmbedding(TpGroup tp, size_t table, size_t position)
    : tp_(tp), table_(table), position_(position) {}

void VocabParallelEmbedding::forward(const LayerWeights& w, Tensor out, const Tensor& tokens,
                                     const std::vector<int32_t>& tokens_host) const {
  const int64_t B = out.shape[0], T = out.shape[1];
  const Tensor table = w.weight(table_);
  const Tensor positions = position_ == kNoRow ? Tensor{} : w.weight(position_).narrow(0, 0, T);
  if (tp_.parallel()) {
    vocab_parallel_embedding_forward(out, tokens_host.data(), B, T, table, tp_.rank() * table.shape[0], positions,
                                     *tp_.comm);
  } else if (position_ != kNoRow) {
    k::encoder_forward(out, tokens, table, positions);
  } else {
    k::embedding_forward(out, tokens, table);
  }
}

void VocabParallelEmbedding::backward(const LayerWeights& w, const Tensor& dout, const Tensor& tokens,
                                      const std::vector<int32_t>& tokens_host) const {
  const int64_t B = dout.shape[0], T = dout.shape[1];
  const Tensor dtable = w.grad(table_);
  const Tensor dpositions = position_ == kNoRow ? Tensor{} : w.grad(position_).narrow(0, 0, T);
  if (tp_.parallel()) {
    vocab_parallel_embedding_backward(dtable, dpositions, dout, tokens_host.data(), B, T,
                                      tp_.rank() * dtable.shape[0]);
  } else if (position_ != kNoRow) {
    k::encoder_backward(dtable, dpositions, dout, tokens);
  } else {
    k::embedding_backward(dtable, dout, tokens);
  }
}

VocabParallelCrossEntropy::VocabParallelCrossEntropy(TpGroup tp, int64_t vocab_size)
    : tp_(tp), vocab_size_(vocab_size) {}

void VocabParallelCrossEntropy::forward(Tensor losses, Tensor logits, const Tensor& targets,
                                        const std::vector<int32_t>& targets_host, float dloss,
                                        bool compute_grad) const {
  const int64_t local = logits.shape[logits.ndim - 1];
  if (tp_.parallel()) {
    vocab_parallel_cross_entropy(losses, logits, targets_host.data(), tp_.rank() * local, vocab_size_, dloss,
                                 compute_grad, *tp_.comm);
  } else if (compute_grad) {
    k::crossentropy_backward(logits, losses, logits, targets, static_cast<int>(vocab_size_), dloss);
  } else {
    k::crossentropy_forward(losses, logits, targets, static_cast<int>(vocab_size_));
  }
}

}  // namespace precon::worker
