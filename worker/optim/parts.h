// Pieces of a matrix for the distributed optimizers: ranges along one storage dim (a tensor-
// parallel part, a Q/K/V block) copied to and from contiguous memory, and Newton–Schulz over a
// matrix whose pieces lie on several ranks (Megatron's tp_mode = distributed).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/newton_schulz.h"
#include "kernels/tensor.h"
#include "worker/parallel/communicator.h"

namespace precon::worker::optim {

// [start, start + length) along one dim of a 2-D matrix.
struct Span {
  int64_t start = 0, length = 0;
};

// Where the chunks of a tensor-parallel matrix lie along its split dim of extent `extent`: the
// dim holds `blocks` equal blocks (3 for the fused QKV weight), each cut into `ranks` chunks, and
// rank r holds chunk r of every block (params.h tp_part_spec). chunk(k, r) of block k.
Span tp_chunk(int64_t extent, int blocks, int ranks, int k, int r);

// dst (contiguous) = the spans of src along dim, concatenated along dim in order.
void gather_spans(kernels::Tensor dst, const kernels::Tensor& src, int dim, const std::vector<Span>& spans);
// The reverse: the spans of dst along dim = consecutive pieces of src (contiguous) along dim.
void scatter_spans(kernels::Tensor dst, const kernels::Tensor& src, int dim, const std::vector<Span>& spans);

// Newton–Schulz of X = the matrix whose pieces along `dim` lie on the ranks of `group`, this
// rank's piece in `x` (contiguous, updated in place). Contracting over the split dim keeps every
// product local but the Gram matrix: A = Σ_r X_r X_rᵀ (dim = 1) or Σ_r X_rᵀ X_r (dim = 0), one
// all-reduce per step, and ‖X‖_F² one scalar all-reduce; X_r ← aX_r + B X_r (or X_r B). This is
// NS(X) up to rounding (p(XXᵀ)X = X p(XᵀX)). `scratch`: 2·n² + x.numel() floats, n the unsplit dim.
// CPU fp32 (the trainer's tensor parallelism runs on the CPU).
void newton_schulz_distributed(kernels::Tensor x, int dim, const kernels::NsOptions& options, Communicator& group,
                           float* scratch);

}  // namespace precon::worker::optim
