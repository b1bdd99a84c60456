#include "worker/parallel/moe.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/common/fault_hook.h"
#include "worker/model/activations.h"
#include "worker/parallel/sigmoid_router.h"
#include "worker/parallel/tensor_parallel.h"

namespace precon::worker {

namespace k = kernels;
using k::DType;
using k::Tensor;

namespace {

// The plans' dimensions (activations.h) of a layer of this shape.
MoeDims dims_of(const MoeMlp::Shape& s, int64_t experts, int64_t top_k, bool shared, bool parallel) {
  MoeDims d;
  d.tokens = s.tokens;
  d.channels = s.channels;
  d.experts = experts;
  d.top_k = top_k;
  d.expert_width = s.expert_width;
  d.shared_width = shared ? s.shared_width : 0;
  d.dtype = s.dtype;
  d.expert_parallel = parallel;
  return d;
}

// Every buffer carved takes at least 64 bytes (an empty plan still has a base address).
constexpr int64_t kLeastBytes = 64;

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

// The expert side's buffers for `rows` rows (grown, never shrunk). Without expert parallelism x and y
// are the sender's own xs and ys and only the activations between the GEMMs live here.
void grow_rows(MoeMlp::ExpertRows& ex, int64_t rows, const MoeDims& d, kernels::Device device) {
  if (rows <= ex.capacity && ex.capacity > 0) return;
  ActTargets t;
  t.one("xr", ex.xr).one("yr", ex.yr).one("order", ex.order).one("inv", ex.inv).one("x", ex.x).one("y", ex.y);
  t.one("gate", ex.gate).one("up", ex.up).one("h", ex.h);
  ex.buf = t.allocate(moe_rows_plan(d, rows), device, kLeastBytes);
  ex.capacity = std::max<int64_t>(rows, 1);
}

void grow_rows(MoeMlp::Scratch& r, int64_t rows, const MoeDims& d) {
  if (rows <= r.capacity && r.capacity > 0) return;
  ActTargets t;
  t.one("dyr", r.dyr).one("dxr", r.dxr).one("dy", r.dy).one("dx_rows", r.dx_rows);
  t.one("dh", r.dh).one("dgate", r.dgate).one("dup", r.dup);
  r.expert_buf = t.allocate(moe_scratch_rows_plan(d, rows), r.shape.device, kLeastBytes);
  r.capacity = std::max<int64_t>(rows, 1);
}

}  // namespace

MoeMlp::Routing MoeMlp::routing_of(const MoeConfig& moe) {
  Routing r;
  r.top_k = moe.top_k;
  r.aux_loss_coeff = moe.aux_loss_coeff;
  r.sigmoid = moe.sigmoid();
  r.n_group = moe.n_group;
  r.topk_group = moe.topk_group;
  r.route_scale = moe.route_scale;
  r.seq_aux_loss_coeff = moe.seq_aux_loss_coeff;
  return r;
}

MoeMlp::MoeMlp(TpGroup tp, TpGroup ep, Rows rows, Routing routing)
    : tp_(tp), ep_(ep), rows_(std::move(rows)), routing_(routing), top_k_(routing.top_k),
      kill_at_exchange_(fault_point("alltoall").step) {
  const size_t E = rows_.gate.size();
  if (E == 0 || rows_.up.size() != E || rows_.down.size() != E || rows_.router == kNoRow)
    throw std::invalid_argument("MoeMlp: a router and gate, up and down rows for each expert");
  if (routing_.sigmoid && rows_.bias == kNoRow)
    throw std::invalid_argument("MoeMlp: the sigmoid router needs its bias row (mlp.gate.e_score_correction_bias)");
  const int64_t G = routing_.n_group;
  if (routing_.sigmoid && (G < 1 || static_cast<int64_t>(E) % G != 0 || routing_.topk_group < 1 ||
                           routing_.topk_group > G || top_k_ > routing_.topk_group * (static_cast<int64_t>(E) / G)))
    throw std::invalid_argument("MoeMlp: n_group = " + std::to_string(G) + ", topk_group = " +
                                std::to_string(routing_.topk_group) + " cannot route top_k = " + std::to_string(top_k_) +
                                " of " + std::to_string(E) + " experts");
  if (top_k_ < 1 || top_k_ > static_cast<int64_t>(E))
    throw std::invalid_argument("MoeMlp: top_k = " + std::to_string(top_k_) + " must be in [1, " + std::to_string(E) + "]");
  if (E % static_cast<size_t>(ep_.size()) != 0)
    throw std::invalid_argument("MoeMlp: " + std::to_string(ep_.size()) + " expert-parallel ranks do not divide " +
                                std::to_string(E) + " experts");
}

MoeMlp::Acts MoeMlp::make_acts(const Shape& s) const {
  Acts a;
  a.shape = s;
  const MoeDims d = dims_of(s, experts(), top_k_, shared(), ep_.parallel());
  ActTargets t;
  t.one("x32", a.x32).one("logits", a.logits).one("probs", a.probs).one("idx", a.idx).one("weights", a.weights);
  t.one("pos", a.pos).one("rows", a.rows).one("aux_dprobs", a.aux_dprobs).one("xs", a.xs).one("ys", a.ys);
  t.one("shared_gate", a.shared_gate).one("shared_up", a.shared_up).one("shared_h", a.shared_h);
  t.one("shared_out", a.shared_out);
  a.buf = t.allocate(moe_acts_plan(d), s.device, kLeastBytes);
  a.counts.assign(static_cast<size_t>(experts()), 0);
  // Without expert parallelism the experts compute on the sender's rows, all N·k of them.
  if (!ep_.parallel()) {
    grow_rows(a.ex, s.tokens * top_k_, d, s.device);
    a.ex.x = a.xs;
    a.ex.y = a.ys;
  }
  return a;
}

MoeMlp::Scratch MoeMlp::make_scratch(const Shape& s) const {
  Scratch r;
  r.shape = s;
  const MoeDims d = dims_of(s, experts(), top_k_, shared(), ep_.parallel());
  ActTargets t;
  t.one("dys", r.dys).one("dxs", r.dxs).one("dw", r.dw).one("dlogits", r.dlogits).one("dx32", r.dx32).one("dx", r.dx);
  t.one("shared_dh", r.shared_dh).one("shared_dgate", r.shared_dgate).one("shared_dup", r.shared_dup);
  r.buf = t.allocate(moe_scratch_plan(d), s.device, kLeastBytes);
  if (!ep_.parallel()) {
    grow_rows(r, s.tokens * top_k_, d);
    r.dy = r.dys;
    r.dx_rows = r.dxs;
  }
  return r;
}

void MoeMlp::exchange(const Tensor& send, const std::vector<int64_t>& send_rows, const Tensor& recv,
                      const std::vector<int64_t>& recv_rows) const {
  const int64_t row_bytes = send.shape[1] * static_cast<int64_t>(k::dtype_size(send.dtype));
  std::vector<int64_t> sb(send_rows.size()), rb(recv_rows.size());
  for (size_t r = 0; r < sb.size(); ++r) {
    sb[r] = send_rows[r] * row_bytes;
    rb[r] = recv_rows[r] * row_bytes;
  }
  if (++exchanges_ == kill_at_exchange_) fault_kill();
  const auto t0 = std::chrono::steady_clock::now();
  ep_.comm->all_to_all_bytes(send.data, sb.data(), recv.data, rb.data());
  alltoall_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void MoeMlp::dispatch(Acts& a) const {
  const int P = ep_.size(), me = ep_.rank();
  const int64_t E = experts(), El = local_experts();
  // Every rank's assignments per expert (P × E), so each knows what it sends and receives.
  std::vector<int64_t> all(static_cast<size_t>(P * E));
  ep_.comm->all_gather_bytes(a.counts.data(), all.data(), E * static_cast<int64_t>(sizeof(int64_t)));
  a.send_rows.assign(static_cast<size_t>(P), 0);
  a.recv_rows.assign(static_cast<size_t>(P), 0);
  a.local_rows.assign(static_cast<size_t>(El), 0);
  for (int q = 0; q < P; ++q)
    for (int64_t j = 0; j < El; ++j) {
      a.send_rows[q] += a.counts[q * El + j];
      const int64_t got = all[q * E + me * El + j];
      a.recv_rows[q] += got;
      a.local_rows[j] += got;
    }
  int64_t R = 0;
  for (int64_t n : a.recv_rows) R += n;
  grow_rows(a.ex, R, dims_of(a.shape, experts(), top_k_, shared(), true), a.shape.device);
  // Received rows come source by source, each source's expert by expert: regroup expert by expert.
  std::vector<int32_t> order(static_cast<size_t>(R)), inv(static_cast<size_t>(R));
  std::vector<int64_t> source_first(static_cast<size_t>(P), 0);
  for (int q = 1; q < P; ++q) source_first[q] = source_first[q - 1] + a.recv_rows[q - 1];
  int64_t i = 0;
  for (int64_t j = 0; j < El; ++j)
    for (int q = 0; q < P; ++q) {
      int64_t from = source_first[q];
      for (int64_t jj = 0; jj < j; ++jj) from += all[q * E + me * El + jj];
      for (int64_t n = 0, m = all[q * E + me * El + j]; n < m; ++n, ++i) {
        order[i] = static_cast<int32_t>(from + n);
        inv[from + n] = static_cast<int32_t>(i);
      }
    }
  if (R > 0) {
    to_device(rows_of(a.ex.order, 0, R), order);
    to_device(rows_of(a.ex.inv, 0, R), inv);
  }
  exchange(a.xs, a.send_rows, rows_of(a.ex.xr, 0, R), a.recv_rows);
  if (R > 0) k::gather_rows(rows_of(a.ex.x, 0, R), rows_of(a.ex.xr, 0, R), rows_of(a.ex.order, 0, R));
}

void MoeMlp::gather_outputs(Acts& a) const {
  int64_t R = 0;
  for (int64_t n : a.recv_rows) R += n;
  if (R > 0) k::gather_rows(rows_of(a.ex.yr, 0, R), rows_of(a.ex.y, 0, R), rows_of(a.ex.inv, 0, R));
  exchange(rows_of(a.ex.yr, 0, R), a.recv_rows, a.ys, a.send_rows);
}

void MoeMlp::dispatch_grads(const Acts& a, Scratch& s) const {
  int64_t R = 0;
  for (int64_t n : a.recv_rows) R += n;
  grow_rows(s, R, dims_of(s.shape, experts(), top_k_, shared(), true));
  exchange(s.dys, a.send_rows, rows_of(s.dyr, 0, R), a.recv_rows);
  if (R > 0) k::gather_rows(rows_of(s.dy, 0, R), rows_of(s.dyr, 0, R), rows_of(a.ex.order, 0, R));
}

void MoeMlp::return_grads(const Acts& a, Scratch& s) const {
  int64_t R = 0;
  for (int64_t n : a.recv_rows) R += n;
  if (R > 0) k::gather_rows(rows_of(s.dxr, 0, R), rows_of(s.dx_rows, 0, R), rows_of(a.ex.inv, 0, R));
  exchange(rows_of(s.dxr, 0, R), a.recv_rows, s.dxs, a.send_rows);
}

void MoeMlp::softmax_balance(Acts& a) const {
  const int64_t N = a.probs.shape[0], E = experts(), K = top_k_;
  std::vector<float> probs(static_cast<size_t>(N * E));
  k::copy(Tensor::view(probs.data(), {N, E}), a.probs);
  std::vector<double> sum_p(static_cast<size_t>(E), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e) sum_p[e] += probs[n * E + e];
  std::vector<float> dprobs(static_cast<size_t>(E));
  const double coeff = routing_.aux_loss_coeff;
  a.aux = 0;
  for (int64_t e = 0; e < E; ++e) {
    const double f = static_cast<double>(a.counts[e]) / static_cast<double>(N * K);
    a.aux += coeff * static_cast<double>(E) * f * sum_p[e] / static_cast<double>(N);
    dprobs[e] = static_cast<float>(coeff * static_cast<double>(E) * f / static_cast<double>(N));
  }
  k::copy(a.aux_dprobs, Tensor::view(dprobs.data(), {E}));
}

SigmoidRouting MoeMlp::sigmoid_routing() const {
  SigmoidRouting r;
  r.top_k = top_k_;
  r.n_group = routing_.n_group;
  r.topk_group = routing_.topk_group;
  r.route_scale = routing_.route_scale;
  return r;
}

std::vector<int32_t> MoeMlp::route_sigmoid(const LayerWeights& w, Acts& a) const {
  const int64_t N = a.logits.shape[0], E = experts(), K = top_k_;
  std::vector<float> logits(static_cast<size_t>(N * E)), scores(logits.size()), bias(static_cast<size_t>(E));
  std::vector<float> weights(static_cast<size_t>(N * K));
  std::vector<int32_t> idx(static_cast<size_t>(N * K));
  k::copy(Tensor::view(logits.data(), {N, E}), a.logits);
  k::copy(Tensor::view(bias.data(), {E}), w.master(rows_.bias));
  sigmoid_route_forward(scores.data(), idx.data(), weights.data(), logits.data(), bias.data(), N, E, sigmoid_routing());
  k::copy(a.probs, Tensor::view(scores.data(), {N, E}));
  k::copy(a.weights, Tensor::view(weights.data(), {N, K}));
  to_device(a.idx, idx);
  a.aux = 0;
  a.seq_dscores.clear();
  if (routing_.seq_aux_loss_coeff > 0) {
    const int64_t T = a.shape.seq_len > 0 ? a.shape.seq_len : N;
    if (N % T != 0)
      throw std::invalid_argument("MoeMlp: " + std::to_string(N) + " tokens are not whole sequences of " +
                                  std::to_string(T));
    a.aux = seq_balance_loss(a.seq_dscores, scores.data(), idx.data(), N / T, T, E, K, routing_.seq_aux_loss_coeff);
  }
  return idx;
}

void MoeMlp::route_sigmoid_backward(const Acts& a, Scratch& s) const {
  const int64_t N = a.probs.shape[0], E = experts(), K = top_k_;
  std::vector<float> scores(static_cast<size_t>(N * E)), dlogits(scores.size());
  std::vector<float> dw(static_cast<size_t>(N * K)), weights(dw.size());
  k::copy(Tensor::view(scores.data(), {N, E}), a.probs);
  k::copy(Tensor::view(dw.data(), {N, K}), s.dw);
  k::copy(Tensor::view(weights.data(), {N, K}), a.weights);
  const std::vector<int32_t> idx = host_ints(a.idx);
  sigmoid_route_backward(dlogits.data(), dw.data(), a.seq_dscores.empty() ? nullptr : a.seq_dscores.data(),
                         scores.data(), idx.data(), weights.data(), N, E, sigmoid_routing());
  k::copy(s.dlogits, Tensor::view(dlogits.data(), {N, E}));
}

void MoeMlp::forward(const LayerWeights& w, Tensor out, const Tensor& in, Acts& a) const {
  const auto out_in = k::WeightLayout::out_in;
  const Tensor x = flat(in), y = flat(out);
  const int64_t N = x.shape[0], E = experts(), K = top_k_;
  // The router, in fp32 with the fp32 weight.
  const Tensor x32 = x.dtype == DType::f32 ? x : a.x32;
  if (x.dtype != DType::f32) k::cast(x32, x);
  k::matmul_forward(a.logits, x32, w.master(rows_.router), Tensor{}, out_in);
  if (!routing_.sigmoid) k::moe_router_forward(a.probs, a.idx, a.weights, a.logits);

  // Group the assignments by expert, each expert's in token order: row p of xs is token rows[p];
  // assignment (n, j) lies at pos[n, j].
  const std::vector<int32_t> idx = routing_.sigmoid ? route_sigmoid(w, a) : host_ints(a.idx);
  a.counts.assign(static_cast<size_t>(E), 0);
  for (int32_t e : idx) ++a.counts[static_cast<size_t>(e)];
  std::vector<int64_t> cursor(static_cast<size_t>(E), 0);
  for (int64_t e = 1; e < E; ++e) cursor[e] = cursor[e - 1] + a.counts[e - 1];
  std::vector<int32_t> rows(static_cast<size_t>(N * K)), pos(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < K; ++j) {
      const int64_t p = cursor[idx[n * K + j]]++;
      rows[p] = static_cast<int32_t>(n);
      pos[n * K + j] = static_cast<int32_t>(p);
    }
  to_device(a.rows, rows);
  to_device(a.pos, pos);

  // The load-balancing loss and its gradient with respect to the probabilities (the sigmoid
  // router's balance loss is route_sigmoid's).
  if (!routing_.sigmoid) softmax_balance(a);
  k::gather_rows(a.xs, x, a.rows);
  if (ep_.parallel()) dispatch(a);
  else a.local_rows = a.counts;
  // Each expert of this rank: one GEMM per projection over its block.
  int64_t f = 0;
  for (int64_t j = 0; j < local_experts(); ++j) {
    const int64_t n = a.local_rows[j], e = first_expert() + j;
    if (n == 0) continue;
    const ExpertRows& ex = a.ex;
    const Tensor g = rows_of(ex.gate, f, n), u = rows_of(ex.up, f, n), h = rows_of(ex.h, f, n);
    k::matmul_forward(g, rows_of(ex.x, f, n), w.weight(rows_.gate[e]), Tensor{}, out_in);
    k::matmul_forward(u, rows_of(ex.x, f, n), w.weight(rows_.up[e]), Tensor{}, out_in);
    k::swiglu_forward(h, g, u);
    k::matmul_forward(rows_of(ex.y, f, n), h, w.weight(rows_.down[e]), Tensor{}, out_in);
    f += n;
  }
  if (ep_.parallel()) gather_outputs(a);
  k::moe_combine_forward(y, a.ys, a.pos, a.weights);
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
  k::fill_zero(s.dys);
  k::fill_zero(s.dw);
  k::moe_combine_backward(s.dys, s.dw, dy, a.ys, a.pos, a.weights);
  // Each rank's ys is a part of every expert's output: the weights' gradient is the sum of the parts'.
  if (tp_.parallel()) tp_.comm->all_reduce_sum(s.dw.f32(), s.dw.numel());

  if (ep_.parallel()) dispatch_grads(a, s);
  k::fill_zero(s.dh);
  k::fill_zero(s.dgate);
  k::fill_zero(s.dup);
  k::fill_zero(s.dx_rows);
  int64_t f = 0;
  for (int64_t j = 0; j < local_experts(); ++j) {
    const int64_t n = a.local_rows[j], e = first_expert() + j;
    if (n == 0) continue;
    const ExpertRows& ex = a.ex;
    const Tensor dh = rows_of(s.dh, f, n), dg = rows_of(s.dgate, f, n), du = rows_of(s.dup, f, n);
    const Tensor xe = rows_of(ex.x, f, n), dxe = rows_of(s.dx_rows, f, n);
    k::matmul_backward(dh, w.grad(rows_.down[e]), Tensor{}, rows_of(s.dy, f, n), rows_of(ex.h, f, n),
                       w.weight(rows_.down[e]), out_in);
    k::swiglu_backward(dg, du, dh, rows_of(ex.gate, f, n), rows_of(ex.up, f, n));
    k::matmul_backward(dxe, w.grad(rows_.gate[e]), Tensor{}, dg, xe, w.weight(rows_.gate[e]), out_in);
    k::matmul_backward(dxe, w.grad(rows_.up[e]), Tensor{}, du, xe, w.weight(rows_.up[e]), out_in);
    f += n;
  }
  if (ep_.parallel()) return_grads(a, s);
  k::scatter_add_rows(dx, s.dxs, a.rows);
  if (tp_.parallel()) copy_to_tp_region_backward(din, *tp_.comm);

  // The router: the same on every rank, added after the sum.
  if (routing_.sigmoid) {
    route_sigmoid_backward(a, s);
  } else {
    k::fill_zero(s.dlogits);
    k::moe_router_backward(s.dlogits, s.dw, a.probs, a.idx, a.weights, a.aux_dprobs);
  }
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
