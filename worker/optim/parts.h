// Pieces of a matrix for the distributed optimizers: ranges along one storage dim (a tensor-
// parallel part, a Q/K/V block) copied to and from contiguous memory, and Newton–Schulz over a
// matrix whose pieces lie on several ranks (Megatron's tp_mode = distributed). Assembling a split
// matrix's whole gradient is worker/parallel's (grad_assembly.h WholeGradients).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/newton_schulz.h"
#include "kernels/tensor.h"
#include "worker/model/params.h"
#include "worker/optim/exchange.h"
#include "worker/optim/optimizer.h"

namespace precon::worker::optim {

// [start, start + length) along one dim of a 2-D matrix.
struct Span {
  int64_t start = 0, length = 0;
};

// Where the chunks of a tensor-parallel matrix lie along its split dim of extent `extent`: the
// dim holds `blocks` equal blocks (3 for the fused QKV weight), each cut into `ranks` chunks, and
// rank r holds chunk r of every block (params.h tp_part_spec). chunk(k, r) of block k.
Span tp_chunk(int64_t extent, int blocks, int ranks, int k, int r);

// The spans along its split dim that rank r of `ranks` holds of a split parameter (its chunk of
// each block, of the padded storage's rows for wte), in the order its part packs them.
std::vector<Span> part_spans(const ParamSpec& full, int ranks, int r);

// dst (contiguous) = the spans of src along dim, concatenated along dim in order.
void gather_spans(kernels::Tensor dst, const kernels::Tensor& src, int dim, const std::vector<Span>& spans);
// The reverse: the spans of dst along dim = consecutive pieces of src (contiguous) along dim.
void scatter_spans(kernels::Tensor dst, const kernels::Tensor& src, int dim, const std::vector<Span>& spans);

// Newton–Schulz of X = the matrix whose pieces along `dim` lie on the ranks of `group`, this
// rank's piece in `x` (contiguous, updated in place). Contracting over the split dim keeps every
// product local but the Gram matrix: A = Σ_r X_r X_rᵀ (dim = 1) or Σ_r X_rᵀ X_r (dim = 0), one
// sum over the group per step, and ‖X‖_F² one scalar sum; X_r ← aX_r + B X_r (or X_r B). This is
// NS(X) up to rounding (p(XXᵀ)X = X p(XᵀX)). `scratch`: 2·n² + x.numel() floats, n the unsplit dim.
// CPU fp32 (the trainer's tensor parallelism runs on the CPU).
void newton_schulz_distributed(kernels::Tensor x, int dim, const kernels::NsOptions& options, ShareGroup& group,
                           float* scratch);

// W ← decay·W + alpha·U (or its cautious form) on what this rank holds of U, a box of p's whole
// visible matrix whose first element is at (r0, c0); U is 2-D with unit column stride. p.param is
// this rank's part when p is split, else the whole matrix.
void apply_box_to_part(const OptimParam& p, int64_t r0, int64_t c0, const kernels::Tensor& u, float alpha,
                       float decay, bool cautious);
// The same for values [first, first + n) of the whole visible matrix in row-major order, at `u`
// (contiguous).
void apply_range_to_part(const OptimParam& p, int64_t first, int64_t n, const float* u, float alpha,
                         float decay, bool cautious);

}  // namespace precon::worker::optim
