#include "worker/optim/parts.h"

#include <cmath>

#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/linalg.h"
#include "kernels/nn.h"
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

void newton_schulz_distributed(Tensor x, int dim, const kernels::NsOptions& options, ShareGroup& group, float* scratch) {
  const int64_t n = dim == 1 ? x.shape[0] : x.shape[1];  // the unsplit dim: the Gram matrix is n × n
  const kernels::Device device = x.device;
  double norm_sq = kernels::sum_squares(x);
  group.sum(&norm_sq, 1);
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
                                                  [&](Tensor& gram) { group.sum(gram.f32(), gram.numel()); });
  if (cur.data != x.data) kernels::copy(x, cur);
}

std::vector<Span> part_spans(const ParamSpec& full, int ranks, int r) {
  const size_t d = static_cast<size_t>(full.tp_split_dim);
  const int64_t extent = full.storage_rows > 0 ? full.storage_rows : full.shape[d];
  const int blocks = std::max(1, full.qkv_blocks);
  std::vector<Span> spans;
  for (int k = 0; k < blocks; ++k) spans.push_back(tp_chunk(extent, blocks, ranks, k, r));
  return spans;
}

namespace {

// W ← decay·W + alpha·U over two equal 2-D views with unit column stride, a row at a time unless both
// are contiguous.
void axpby_rows(const Tensor& w, const Tensor& u, float alpha, float decay, bool cautious) {
  auto one = [&](const Tensor& a, const Tensor& b) {
    if (cautious) kernels::cautious_axpby(a, b, alpha, decay);
    else kernels::axpby(a, b, alpha, decay);
  };
  if (w.contiguous() && u.contiguous()) {
    one(w, u);
    return;
  }
  for (int64_t r = 0; r < w.shape[0]; ++r) one(w.select(r), u.select(r));
}

}  // namespace

void apply_box_to_part(const OptimParam& p, int64_t r0, int64_t c0, const Tensor& u, float alpha, float decay,
                       bool cautious) {
  const int64_t rows = u.shape[0], cols = u.shape[1];
  if (!p.split()) {
    axpby_rows(p.param.narrow(0, r0, rows).narrow(1, c0, cols), u, alpha, decay, cautious);
    return;
  }
  const int d = p.spec->tp_split_dim;
  const int64_t b0 = d == 0 ? r0 : c0, bn = d == 0 ? rows : cols;
  int64_t at = 0;  // where the span starts in the part, along d
  for (const Span& s : part_spans(*p.spec, p.tp.size, p.tp.rank)) {
    const int64_t lo = std::max(b0, s.start), hi = std::min(b0 + bn, s.start + s.length);
    if (lo < hi) {
      Tensor w = p.param.narrow(d, at + lo - s.start, hi - lo);
      w = d == 0 ? w.narrow(1, c0, cols) : w.narrow(0, r0, rows);
      axpby_rows(w, u.narrow(d, lo - b0, hi - lo), alpha, decay, cautious);
    }
    at += s.length;
  }
}

void apply_range_to_part(const OptimParam& p, int64_t first, int64_t n, const float* u, float alpha, float decay,
                         bool cautious) {
  const int64_t cols = p.spec->shape.size() == 2 ? p.spec->shape[1] : 1;
  float* src = const_cast<float*>(u);
  auto box = [&](int64_t at, int64_t rows, int64_t width) {
    apply_box_to_part(p, at / cols, at % cols, Tensor::view(src + (at - first), {rows, width}, kernels::DType::f32, p.param.device),
                      alpha, decay, cautious);
  };
  int64_t at = first;
  const int64_t end = first + n;
  if (at % cols != 0) {  // a partial first row
    const int64_t w = std::min(end, (at / cols + 1) * cols) - at;
    box(at, 1, w);
    at += w;
  }
  if (end - at >= cols) {
    const int64_t rows = (end - at) / cols;
    box(at, rows, cols);
    at += rows * cols;
  }
  if (at < end) box(at, 1, end - at);
}

}  // namespace precon::worker::optim
