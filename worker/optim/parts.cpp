#include "worker/optim/parts.h"

#include <cmath>

#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/linalg.h"
#include "worker/optim/optimizer.h"

namespace precon::worker::optim {

using kernels::Tensor;

Span tp_chunk(int64_t extent, int blocks, int ranks, int k, int r) {
  const int64_t block = extent / blocks, chunk = block / ranks;
  return {k * block + r * chunk, chunk};
}

namespace {

// Copies a rows × cols sub-matrix between two row-major matrices of leading dims ld_to, ld_from
// (a row at a time when the rows are not adjacent in both).
void copy_block(float* to, int64_t ld_to, const float* from, int64_t ld_from, int64_t rows, int64_t cols,
                kernels::Device device) {
  if (rows == 0 || cols == 0) return;
  if (ld_to == cols && ld_from == cols) {
    kernels::copy(Tensor::view(to, {rows * cols}, kernels::DType::f32, device),
                  Tensor::view(const_cast<float*>(from), {rows * cols}, kernels::DType::f32, device));
    return;
  }
  for (int64_t i = 0; i < rows; ++i) {
    kernels::copy(Tensor::view(to + i * ld_to, {cols}, kernels::DType::f32, device),
                  Tensor::view(const_cast<float*>(from) + i * ld_from, {cols}, kernels::DType::f32, device));
  }
}

void check(const Tensor& a, const char* what) {
  if (a.ndim != 2 || a.dtype != kernels::DType::f32 || a.strides[1] != 1)
    throw OptimizerError(std::string("parts: ") + what + " must be a 2-D f32 matrix with unit column stride");
}

// Moves the spans between the matrix `full` and the packed pieces `packed` in the direction asked.
void move_spans(const Tensor& full, const Tensor& packed, int dim, const std::vector<Span>& spans, bool to_packed) {
  check(full, "matrix");
  check(packed, "packed pieces");
  const int64_t ld_full = full.strides[0], ld_packed = packed.strides[0];
  int64_t at = 0;
  for (const Span& s : spans) {
    float* f = full.f32() + (dim == 0 ? s.start * ld_full : s.start);
    float* p = packed.f32() + (dim == 0 ? at * ld_packed : at);
    const int64_t rows = dim == 0 ? s.length : full.shape[0], cols = dim == 0 ? full.shape[1] : s.length;
    if (to_packed) copy_block(p, ld_packed, f, ld_full, rows, cols, full.device);
    else copy_block(f, ld_full, p, ld_packed, rows, cols, full.device);
    at += s.length;
  }
  if (at != packed.shape[dim]) throw OptimizerError("parts: the spans do not add up to the packed matrix");
}

}  // namespace

void gather_spans(Tensor dst, const Tensor& src, int dim, const std::vector<Span>& spans) {
  move_spans(src, dst, dim, spans, true);
}

void scatter_spans(Tensor dst, const Tensor& src, int dim, const std::vector<Span>& spans) {
  move_spans(dst, src, dim, spans, false);
}

void newton_schulz_distributed(Tensor x, int dim, const kernels::NsOptions& options, Communicator& group, float* scratch) {
  const int64_t n = dim == 1 ? x.shape[0] : x.shape[1];  // the unsplit dim: the Gram matrix is n × n
  const kernels::Device device = x.device;
  double norm_sq = kernels::sum_squares(x);
  group.all_reduce_sum(&norm_sq, 1);
  if (!std::isfinite(norm_sq))
    throw kernels::NonFiniteError("newton_schulz_distributed", "input contains NaN or Inf", __FILE__, __LINE__);
  const double denom = std::sqrt(norm_sq) + options.eps;
  if (denom == 0.0) {
    kernels::fill_zero(x);
    return;
  }
  kernels::scale(x, static_cast<float>(1.0 / denom));
  Tensor a = Tensor::view(scratch, {n, n}, kernels::DType::f32, device);
  Tensor b = Tensor::view(scratch + n * n, {n, n}, kernels::DType::f32, device);
  Tensor y = Tensor::view(scratch + 2 * n * n, {x.shape[0], x.shape[1]}, kernels::DType::f32, device);
  // Each rank forms its part of the Gram matrix; the sum over the group is the whole matrix's.
  const Tensor cur = kernels::newton_schulz_steps(x, y, a, b, options.schedule, dim == 1,
                                                  [&](Tensor& gram) { group.all_reduce_sum(gram.f32(), gram.numel()); });
  if (cur.data != x.data) kernels::copy(x, cur);
}

}  // namespace precon::worker::optim
