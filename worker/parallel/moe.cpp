#include "worker/parallel/moe.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/parallel/tensor_parallel.h"

namespace precon::worker {

namespace k = kernels;
using k::DType;
using k::Tensor;

namespace {

// Tensors planned first, then carved from one allocation (64-byte aligned each).
class Carve {
 public:
  void add(Tensor* t, std::initializer_list<int64_t> shape, DType dtype) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    items_.push_back({t, std::vector<int64_t>(shape), dtype, bytes_});
    bytes_ += (n * static_cast<int64_t>(k::dtype_size(dtype)) + 63) / 64 * 64;
  }
  k::Buffer allocate(k::Device device) {
    k::Buffer buf(device, static_cast<size_t>(std::max<int64_t>(bytes_, 64)));
    for (const Item& i : items_) {
      char* base = static_cast<char*>(buf.data()) + i.offset;
      *i.t = i.shape.size() == 1 ? Tensor::view(base, {i.shape[0]}, i.dtype, device)
                                 : Tensor::view(base, {i.shape[0], i.shape[1]}, i.dtype, device);
    }
    return buf;
  }

 private:
  struct Item {
    Tensor* t;
    std::vector<int64_t> shape;
    DType dtype;
    int64_t offset;
  };
  std::vector<Item> items_;
  int64_t bytes_ = 0;
};

Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.narrow(0, first, count); }

// (N, C) view of a (B, T, C) or (N, C) activation.
Tensor flat(const Tensor& t) { return t.ndim == 2 ? t : t.reshape({t.numel() / t.shape[t.ndim - 1], t.shape[t.ndim - 1]}); }

std::vector<int32_t> host_ints(const Tensor& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  k::copy(Tensor::view(v.data(), {t.numel()}, DType::i32), t.reshape({t.numel()}));
  return v;
}

void to_device(const Tensor& dst, std::vector<int32_t>& src) {
  k::copy(dst.reshape({dst.numel()}), Tensor::view(src.data(), {dst.numel()}, DType::i32));
}

}  // namespace

MoeMlp::MoeMlp(TpGroup tp, Rows rows, int64_t top_k, double aux_loss_coeff)
    : tp_(tp), rows_(std::move(rows)), top_k_(top_k), aux_loss_coeff_(aux_loss_coeff) {
  const size_t E = rows_.gate.size();
  if (E == 0 || rows_.up.size() != E || rows_.down.size() != E || rows_.router == kNoRow)
    throw std::invalid_argument("MoeMlp: a router and gate, up and down rows for each expert");
  if (top_k_ < 1 || top_k_ > static_cast<int64_t>(E))
    throw std::invalid_argument("MoeMlp: top_k = " + std::to_string(top_k_) + " must be in [1, " + std::to_string(E) + "]");
}

MoeMlp::Acts MoeMlp::make_acts(const Shape& s) const {
  Acts a;
  const int64_t N = s.tokens, C = s.channels, E = experts(), K = top_k_, M = N * K, F = s.expert_width;
  Carve c;
  if (s.dtype != DType::f32) c.add(&a.x32, {N, C}, DType::f32);
  c.add(&a.logits, {N, E}, DType::f32);
  c.add(&a.probs, {N, E}, DType::f32);
  c.add(&a.idx, {N, K}, DType::i32);
  c.add(&a.weights, {N, K}, DType::f32);
  c.add(&a.pos, {N, K}, DType::i32);
  c.add(&a.rows, {M}, DType::i32);
  c.add(&a.aux_dprobs, {E}, DType::f32);
  c.add(&a.xp, {M, C}, s.dtype);
  c.add(&a.gate, {M, F}, s.dtype);
  c.add(&a.up, {M, F}, s.dtype);
  c.add(&a.h, {M, F}, s.dtype);
  c.add(&a.y, {M, C}, s.dtype);
  if (shared()) {
    const int64_t Fs = s.shared_width;
    c.add(&a.shared_gate, {N, Fs}, s.dtype);
    c.add(&a.shared_up, {N, Fs}, s.dtype);
    c.add(&a.shared_h, {N, Fs}, s.dtype);
    c.add(&a.shared_out, {N, C}, s.dtype);
  }
  a.buf = c.allocate(s.device);
  a.counts.assign(static_cast<size_t>(E), 0);
  return a;
}

MoeMlp::Scratch MoeMlp::make_scratch(const Shape& s) const {
  Scratch r;
  const int64_t N = s.tokens, C = s.channels, E = experts(), K = top_k_, M = N * K, F = s.expert_width;
  Carve c;
  c.add(&r.dy, {M, C}, s.dtype);
  c.add(&r.dxp, {M, C}, s.dtype);
  c.add(&r.dh, {M, F}, s.dtype);
  c.add(&r.dgate, {M, F}, s.dtype);
  c.add(&r.dup, {M, F}, s.dtype);
  c.add(&r.dw, {N, K}, DType::f32);
  c.add(&r.dlogits, {N, E}, DType::f32);
  c.add(&r.dx32, {N, C}, DType::f32);
  if (s.dtype != DType::f32) c.add(&r.dx, {N, C}, s.dtype);
  if (shared()) {
    const int64_t Fs = s.shared_width;
    c.add(&r.shared_dh, {N, Fs}, s.dtype);
    c.add(&r.shared_dgate, {N, Fs}, s.dtype);
    c.add(&r.shared_dup, {N, Fs}, s.dtype);
  }
  r.buf = c.allocate(s.device);
  return r;
}

void MoeMlp::forward(const LayerWeights& w, Tensor out, const Tensor& in, Acts& a) const {
  const auto out_in = k::WeightLayout::out_in;
  const Tensor x = flat(in), y = flat(out);
  const int64_t N = x.shape[0], E = experts(), K = top_k_;
  // The router, in fp32 with the fp32 weight.
  const Tensor x32 = x.dtype == DType::f32 ? x : a.x32;
  if (x.dtype != DType::f32) k::cast(x32, x);
  k::matmul_forward(a.logits, x32, w.master(rows_.router), Tensor{}, out_in);
  k::moe_router_forward(a.probs, a.idx, a.weights, a.logits);

  // Group the assignments by expert, each expert's in token order: row p of xp is token rows[p];
  // assignment (n, j) lies at pos[n, j].
  const std::vector<int32_t> idx = host_ints(a.idx);
  a.counts.assign(static_cast<size_t>(E), 0);
  for (int32_t e : idx) ++a.counts[static_cast<size_t>(e)];
  std::vector<int64_t> cursor(static_cast<size_t>(E), 0);
  for (int64_t e = 1; e < E; ++e) cursor[e] = cursor[e - 1] + a.counts[e - 1];
  const std::vector<int64_t> first = cursor;
  std::vector<int32_t> rows(static_cast<size_t>(N * K)), pos(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < K; ++j) {
      const int64_t p = cursor[idx[n * K + j]]++;
      rows[p] = static_cast<int32_t>(n);
      pos[n * K + j] = static_cast<int32_t>(p);
    }
  to_device(a.rows, rows);
  to_device(a.pos, pos);

  // The load-balancing loss and its gradient with respect to the probabilities.
  std::vector<float> probs(static_cast<size_t>(N * E));
  k::copy(Tensor::view(probs.data(), {N, E}), a.probs);
  std::vector<double> sum_p(static_cast<size_t>(E), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e) sum_p[e] += probs[n * E + e];
  std::vector<float> dprobs(static_cast<size_t>(E));
  a.aux = 0;
  for (int64_t e = 0; e < E; ++e) {
    const double f = static_cast<double>(a.counts[e]) / static_cast<double>(N * K);
    a.aux += aux_loss_coeff_ * static_cast<double>(E) * f * sum_p[e] / static_cast<double>(N);
    dprobs[e] = static_cast<float>(aux_loss_coeff_ * static_cast<double>(E) * f / static_cast<double>(N));
  }
  k::copy(a.aux_dprobs, Tensor::view(dprobs.data(), {E}));

  // Each expert's block: one GEMM per projection.
  k::gather_rows(a.xp, x, a.rows);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = a.counts[e], f = first[e];
    if (n == 0) continue;
    const Tensor g = rows_of(a.gate, f, n), u = rows_of(a.up, f, n), h = rows_of(a.h, f, n);
    k::matmul_forward(g, rows_of(a.xp, f, n), w.weight(rows_.gate[e]), Tensor{}, out_in);
    k::matmul_forward(u, rows_of(a.xp, f, n), w.weight(rows_.up[e]), Tensor{}, out_in);
    k::swiglu_forward(h, g, u);
    k::matmul_forward(rows_of(a.y, f, n), h, w.weight(rows_.down[e]), Tensor{}, out_in);
  }
  k::moe_combine_forward(y, a.y, a.pos, a.weights);
  if (shared()) {
    k::matmul_forward(a.shared_gate, x, w.weight(rows_.shared_gate), Tensor{}, out_in);
    k::matmul_forward(a.shared_up, x, w.weight(rows_.shared_up), Tensor{}, out_in);
    k::swiglu_forward(a.shared_h, a.shared_gate, a.shared_up);
    k::matmul_forward(a.shared_out, a.shared_h, w.weight(rows_.shared_down), Tensor{}, out_in);
    k::add(y, y, a.shared_out);
  }
  // Each rank holds a part of every expert's width: the partial outputs are summed once.
  if (tp_.parallel()) reduce_from_tp_region_forward(out, *tp_.comm);
}

void MoeMlp::backward(const LayerWeights& w, Tensor din, const Tensor& in, const Tensor& dout, const Acts& a,
                      Scratch& s) const {
  const auto out_in = k::WeightLayout::out_in;
  const Tensor x = flat(in), dx = flat(din);
  const Tensor dy = flat(dout);
  const int64_t E = experts();
  if (tp_.parallel()) reduce_from_tp_region_backward(dout, *tp_.comm);
  if (shared()) {
    k::fill_zero(s.shared_dh);
    k::matmul_backward(s.shared_dh, w.grad(rows_.shared_down), Tensor{}, dy, a.shared_h, w.weight(rows_.shared_down),
                       out_in);
    k::fill_zero(s.shared_dgate);
    k::fill_zero(s.shared_dup);
    k::swiglu_backward(s.shared_dgate, s.shared_dup, s.shared_dh, a.shared_gate, a.shared_up);
    k::matmul_backward(dx, w.grad(rows_.shared_gate), Tensor{}, s.shared_dgate, x, w.weight(rows_.shared_gate), out_in);
    k::matmul_backward(dx, w.grad(rows_.shared_up), Tensor{}, s.shared_dup, x, w.weight(rows_.shared_up), out_in);
  }
  k::fill_zero(s.dy);
  k::fill_zero(s.dw);
  k::moe_combine_backward(s.dy, s.dw, dy, a.y, a.pos, a.weights);
  // Each rank's y is a part of every expert's output: the weights' gradient is the sum of the parts'.
  if (tp_.parallel()) tp_.comm->all_reduce_sum(s.dw.f32(), s.dw.numel());

  k::fill_zero(s.dh);
  k::fill_zero(s.dgate);
  k::fill_zero(s.dup);
  k::fill_zero(s.dxp);
  int64_t f = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = a.counts[e];
    if (n == 0) continue;
    const Tensor dh = rows_of(s.dh, f, n), dg = rows_of(s.dgate, f, n), du = rows_of(s.dup, f, n);
    const Tensor xp = rows_of(a.xp, f, n), dxp = rows_of(s.dxp, f, n);
    k::matmul_backward(dh, w.grad(rows_.down[e]), Tensor{}, rows_of(s.dy, f, n), rows_of(a.h, f, n),
                       w.weight(rows_.down[e]), out_in);
    k::swiglu_backward(dg, du, dh, rows_of(a.gate, f, n), rows_of(a.up, f, n));
    k::matmul_backward(dxp, w.grad(rows_.gate[e]), Tensor{}, dg, xp, w.weight(rows_.gate[e]), out_in);
    k::matmul_backward(dxp, w.grad(rows_.up[e]), Tensor{}, du, xp, w.weight(rows_.up[e]), out_in);
    f += n;
  }
  k::scatter_add_rows(dx, s.dxp, a.rows);
  if (tp_.parallel()) copy_to_tp_region_backward(din, *tp_.comm);

  // The router: the same on every rank, added after the sum.
  k::fill_zero(s.dlogits);
  k::moe_router_backward(s.dlogits, s.dw, a.probs, a.idx, a.weights, a.aux_dprobs);
  const Tensor x32 = x.dtype == DType::f32 ? x : a.x32;
  if (x.dtype == DType::f32) {
    k::matmul_backward(dx, w.grad(rows_.router), Tensor{}, s.dlogits, x32, w.master(rows_.router), out_in);
    return;
  }
  k::fill_zero(s.dx32);
  k::matmul_backward(s.dx32, w.grad(rows_.router), Tensor{}, s.dlogits, x32, w.master(rows_.router), out_in);
  k::cast(s.dx, s.dx32);
  k::add(dx, dx, s.dx);
}

}  // namespace precon::worker
