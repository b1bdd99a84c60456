// Megatron-style tensor parallelism on the CPU: the communication regions, each a forward/backward
// pair, and the vocabulary-parallel embedding and cross-entropy (the logits stay split: only a
// max, a sum of exponentials and the target's logit per position cross the ranks).
//   copy_to_tp_region:     forward identity,   backward all-reduce  (before a column-parallel layer)
//   reduce_from_tp_region: forward all-reduce, backward identity    (after a row-parallel layer)
//   gather_from_tp_region: forward all-gather of the last dim, backward the own slice
//   scatter_to_tp_region:  forward the own slice, backward all-gather of the last dim
// Tensors are contiguous fp32 host tensors; `tp` is the tensor-parallel group.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

void copy_to_tp_region_forward(kernels::Tensor x, Communicator& tp);
void copy_to_tp_region_backward(kernels::Tensor dx, Communicator& tp);
void reduce_from_tp_region_forward(kernels::Tensor x, Communicator& tp);
void reduce_from_tp_region_backward(kernels::Tensor dx, Communicator& tp);
// full (..., size·n) from every rank's local (..., n).
void gather_from_tp_region_forward(kernels::Tensor full, const kernels::Tensor& local, Communicator& tp);
void gather_from_tp_region_backward(kernels::Tensor dlocal, const kernels::Tensor& dfull, Communicator& tp);
void scatter_to_tp_region_forward(kernels::Tensor local, const kernels::Tensor& full, Communicator& tp);
void scatter_to_tp_region_backward(kernels::Tensor dfull, const kernels::Tensor& dlocal, Communicator& tp);

// out (B·T, C) = wte[token] + wpe[t], with rows [first, first + rows(wte_part)) of wte here:
// each rank adds the rows it holds, the sum crosses the ranks, and wpe (replicated) is added
// unless it is an empty tensor (no learned positions).
void vocab_parallel_embedding_forward(kernels::Tensor out, const int32_t* tokens, int64_t B, int64_t T,
                                      const kernels::Tensor& wte_part, int64_t first, const kernels::Tensor& wpe,
                                      Communicator& tp);
// Accumulates d wte for the rows held here and d wpe (replicated: the same on every rank; skipped
// when empty).
void vocab_parallel_embedding_backward(kernels::Tensor dwte_part, kernels::Tensor dwpe, const kernels::Tensor& dout,
                                       const int32_t* tokens, int64_t B, int64_t T, int64_t first);

// logits (N, Vl): columns [first, first + Vl) of the padded vocabulary; columns >= vocab_size are
// padding. losses (N) gets -log softmax(target) on every rank (0 where target < 0). With
// backward, logits become d loss / d logits = (softmax − onehot) · scale in place.
void vocab_parallel_cross_entropy(kernels::Tensor losses, kernels::Tensor logits, const int32_t* targets,
                                  int64_t first, int64_t vocab_size, float scale, bool backward, Communicator& tp);

}  // namespace precon::worker
