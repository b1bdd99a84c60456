// Run under `mpirun -np 2` by tests/worker/parallel/test_data_tensor.cpp: each tensor-parallel region's
// forward and backward, the vocabulary-parallel embedding and the vocabulary-parallel
// cross-entropy, and the parallel layers (worker/parallel/layers.h: column-parallel with and
// without gather_output and with two weights on one input, row-parallel with and without
// input_is_parallel), each against a naive single-process computation of the same values. Prints one
// line per failed check and exits 1 if any failed.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "worker/parallel/layers.h"
#include "worker/parallel/mpi_communicator.h"
#include "worker/parallel/tensor_parallel.h"

namespace pw = precon::worker;
using precon::kernels::Tensor;

namespace {

int failures = 0;
int rank_ = 0;

void expect_near(const std::string& what, const std::vector<float>& got, const std::vector<double>& want, double tol) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  if (got.size() != want.size() || worst > tol) {
    std::printf("rank %d: %s: max difference %.3g (tolerance %.3g, %zu vs %zu values)\n", rank_, what.c_str(), worst,
                tol, got.size(), want.size());
    ++failures;
  }
}

Tensor view(std::vector<float>& v, int64_t rows, int64_t cols) { return Tensor::view(v.data(), {rows, cols}); }

// A value that depends on (rank, i): every rank can compute every other rank's.
float value(int rank, int64_t i) { return static_cast<float>(std::sin(0.37 * i + 1.3 * rank + 0.1)); }

void regions(pw::Communicator& tp) {
  const int size = tp.size();
  const int64_t rows = 3, n = 4;
  std::vector<float> x(rows * n);
  for (int64_t i = 0; i < rows * n; ++i) x[i] = value(rank_, i);
  std::vector<double> own(x.begin(), x.end()), sum(rows * n, 0.0);
  for (int r = 0; r < size; ++r)
    for (int64_t i = 0; i < rows * n; ++i) sum[i] += value(r, i);

  std::vector<float> y = x;
  pw::copy_to_tp_region_forward(view(y, rows, n), tp);
  expect_near("copy_to_tp_region forward is the identity", y, own, 0);
  pw::copy_to_tp_region_backward(view(y, rows, n), tp);
  expect_near("copy_to_tp_region backward sums the ranks", y, sum, 1e-6);
  y = x;
  pw::reduce_from_tp_region_forward(view(y, rows, n), tp);
  expect_near("reduce_from_tp_region forward sums the ranks", y, sum, 1e-6);
  y = x;
  pw::reduce_from_tp_region_backward(view(y, rows, n), tp);
  expect_near("reduce_from_tp_region backward is the identity", y, own, 0);

  // gather: full(i, r·n + j) = rank r's local(i, j); scatter is its inverse.
  std::vector<float> full(rows * n * size);
  std::vector<double> want_full(rows * n * size);
  for (int r = 0; r < size; ++r)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j) want_full[i * n * size + r * n + j] = value(r, i * n + j);
  pw::gather_from_tp_region_forward(view(full, rows, n * size), view(x, rows, n), tp);
  expect_near("gather_from_tp_region forward", full, want_full, 0);
  std::vector<float> back(rows * n);
  pw::gather_from_tp_region_backward(view(back, rows, n), view(full, rows, n * size), tp);
  expect_near("gather_from_tp_region backward takes the own slice", back, own, 0);
  pw::scatter_to_tp_region_forward(view(back, rows, n), view(full, rows, n * size), tp);
  expect_near("scatter_to_tp_region forward takes the own slice", back, own, 0);
  std::vector<float> again(rows * n * size);
  pw::scatter_to_tp_region_backward(view(again, rows, n * size), view(back, rows, n), tp);
  expect_near("scatter_to_tp_region backward gathers", again, want_full, 0);
}

void cross_entropy(pw::Communicator& tp) {
  // N positions over a padded vocabulary of Vp columns, V real ones, split into `size` shards.
  const int size = tp.size();
  const int64_t N = 5, Vp = 8, V = 7, Vl = Vp / size, first = rank_ * Vl;
  const std::vector<int32_t> targets = {0, 6, 3, -1, 5};
  std::vector<double> full(N * Vp);
  for (int64_t i = 0; i < N * Vp; ++i) full[i] = 3.0 * std::sin(0.71 * i);
  std::vector<float> logits(N * Vl), losses(N);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t v = 0; v < Vl; ++v) logits[i * Vl + v] = static_cast<float>(full[i * Vp + first + v]);
  const float scale = 0.25f;
  pw::vocab_parallel_cross_entropy(Tensor::view(losses.data(), {N}), view(logits, N, Vl), targets.data(), first, V,
                                   scale, true, tp);
  std::vector<double> want_loss(N, 0.0), want_grad(N * Vl, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    double m = -1e300, s = 0;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, static_cast<double>(static_cast<float>(full[i * Vp + v])));
    for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<float>(full[i * Vp + v]) - m);
    want_loss[i] = std::log(s) + m - static_cast<float>(full[i * Vp + targets[i]]);
    for (int64_t v = 0; v < Vl; ++v) {
      const int64_t g = first + v;
      if (g >= V) continue;
      want_grad[i * Vl + v] = (std::exp(static_cast<float>(full[i * Vp + g]) - m) / s - (g == targets[i])) * scale;
    }
  }
  expect_near("vocab_parallel_cross_entropy losses", losses, want_loss, 1e-5);
  expect_near("vocab_parallel_cross_entropy d logits (padding columns 0)", logits, want_grad, 1e-6);
}

void embedding(pw::Communicator& tp) {
  const int size = tp.size();
  const int64_t B = 2, T = 3, C = 4, Vp = 8, Vl = Vp / size, first = rank_ * Vl;
  const std::vector<int32_t> tokens = {0, 7, 3, 4, 4, 1};
  std::vector<float> wte(Vl * C), wpe(T * C), out(B * T * C);
  auto w = [](int64_t row, int64_t c) { return static_cast<float>(0.1 * row - 0.03 * c); };
  for (int64_t r = 0; r < Vl; ++r)
    for (int64_t c = 0; c < C; ++c) wte[r * C + c] = w(first + r, c);
  for (int64_t i = 0; i < T * C; ++i) wpe[i] = static_cast<float>(0.01 * i);
  pw::vocab_parallel_embedding_forward(view(out, B * T, C), tokens.data(), B, T, view(wte, Vl, C), first,
                                       view(wpe, T, C), tp);
  std::vector<double> want(B * T * C);
  for (int64_t i = 0; i < B * T; ++i)
    for (int64_t c = 0; c < C; ++c) want[i * C + c] = w(tokens[i], c) + wpe[(i % T) * C + c];
  expect_near("vocab_parallel_embedding forward", out, want, 1e-6);
  std::vector<float> dwte(Vl * C, 0.0f), dwpe(T * C, 0.0f), dout(B * T * C, 1.0f);
  pw::vocab_parallel_embedding_backward(view(dwte, Vl, C), view(dwpe, T, C), view(dout, B * T, C), tokens.data(), B, T,
                                        first);
  std::vector<double> want_dwte(Vl * C, 0.0), want_dwpe(T * C, static_cast<double>(B));
  for (int64_t i = 0; i < B * T; ++i)
    if (tokens[i] >= first && tokens[i] < first + Vl)
      for (int64_t c = 0; c < C; ++c) want_dwte[(tokens[i] - first) * C + c] += 1.0;
  expect_near("vocab_parallel_embedding backward (d wte rows held here)", dwte, want_dwte, 0);
  expect_near("vocab_parallel_embedding backward (d wpe)", dwpe, want_dwpe, 0);
}

// The layers' weights: rows of host tensors, by index.
struct HostWeights : pw::LayerWeights {
  std::vector<std::vector<float>> w, g;
  std::vector<std::vector<int64_t>> shape;
  size_t add(std::vector<float> values, std::vector<int64_t> dims) {
    w.push_back(std::move(values));
    g.emplace_back(w.back().size(), 0.0f);
    shape.push_back(std::move(dims));
    return w.size() - 1;
  }
  Tensor make(const std::vector<float>& v, size_t i) const {
    auto* p = const_cast<float*>(v.data());
    return shape[i].size() == 1 ? Tensor::view(p, {shape[i][0]}) : Tensor::view(p, {shape[i][0], shape[i][1]});
  }
  Tensor weight(size_t i) const override { return make(w[i], i); }
  Tensor grad(size_t i) const override { return make(g[i], i); }
};

void layers(pw::Communicator& comm) {
  const int size = comm.size();
  const pw::TpGroup tp{&comm};
  const int64_t N = 3, C = 4, OC = 8, OCl = OC / size, Cl = C / size;  // OC/2 splits over the ranks too
  auto W = [](int64_t o, int64_t c) { return 0.2 * std::sin(0.9 * o + 0.4 * c); };  // the full (OC, C) weight
  auto bias = [](int64_t o) { return 0.05 * o - 0.1; };
  auto X = [](int64_t i, int64_t c) { return std::cos(0.6 * i + 0.3 * c); };        // the input (N, C)
  auto D = [](int64_t i, int64_t o) { return 0.5 * std::sin(0.2 * i - 0.7 * o); };  // d loss / d output (N, OC)
  std::vector<float> x(N * C), dout(N * OC);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) x[i * C + c] = static_cast<float>(X(i, c));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) dout[i * OC + o] = static_cast<float>(D(i, o));
  std::vector<double> want_out(N * OC), want_din(N * C, 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) {
      double v = bias(o);
      for (int64_t c = 0; c < C; ++c) v += X(i, c) * W(o, c);
      want_out[i * OC + o] = v;
    }
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t o = 0; o < OC; ++o) want_din[i * C + c] += D(i, o) * W(o, c);
  const auto out_in = precon::kernels::WeightLayout::out_in;

  {  // Column-parallel, gather_output: this rank's output rows [rank·OCl, +OCl) of W and b.
    HostWeights hw;
    std::vector<float> wl(OCl * C), bl(OCl);
    for (int64_t o = 0; o < OCl; ++o) {
      bl[o] = static_cast<float>(bias(rank_ * OCl + o));
      for (int64_t c = 0; c < C; ++c) wl[o * C + c] = static_cast<float>(W(rank_ * OCl + o, c));
    }
    const size_t w = hw.add(wl, {OCl, C}), b = hw.add(bl, {OCl});
    pw::ColumnParallelLinear layer(tp, {w}, {b}, out_in, /*gather_output=*/true);
    std::vector<float> out(N * OC), din(N * C, 0.0f);
    layer.forward(hw, view(x, N, C), {view(out, N, OC)});
    expect_near("ColumnParallelLinear(gather_output) forward: the full output", out, want_out, 1e-6);
    layer.backward(hw, view(din, N, C), view(x, N, C), {view(dout, N, OC)});
    expect_near("ColumnParallelLinear backward: the full input gradient on every rank", din, want_din, 1e-6);
    std::vector<double> want_dw(OCl * C, 0.0), want_db(OCl, 0.0);
    for (int64_t o = 0; o < OCl; ++o)
      for (int64_t i = 0; i < N; ++i) {
        want_db[o] += D(i, rank_ * OCl + o);
        for (int64_t c = 0; c < C; ++c) want_dw[o * C + c] += D(i, rank_ * OCl + o) * X(i, c);
      }
    expect_near("ColumnParallelLinear backward: d W of this rank's rows", hw.g[w], want_dw, 1e-6);
    expect_near("ColumnParallelLinear backward: d b of this rank's rows", hw.g[b], want_db, 1e-6);
  }
  {  // Column-parallel, two weights on one input (rows of W split in two halves), no gather.
    HostWeights hw;
    const int64_t half = OC / 2, hl = half / size;
    std::vector<float> w0(hl * C), w1(hl * C);
    for (int64_t o = 0; o < hl; ++o)
      for (int64_t c = 0; c < C; ++c) {
        w0[o * C + c] = static_cast<float>(W(rank_ * hl + o, c));
        w1[o * C + c] = static_cast<float>(W(half + rank_ * hl + o, c));
      }
    const size_t a = hw.add(w0, {hl, C}), b = hw.add(w1, {hl, C});
    pw::ColumnParallelLinear layer(tp, {a, b}, {}, out_in);
    std::vector<float> o0(N * hl), o1(N * hl), d0(N * hl), d1(N * hl), din(N * C, 0.0f);
    layer.forward(hw, view(x, N, C), {view(o0, N, hl), view(o1, N, hl)});
    std::vector<double> want0(N * hl), want1(N * hl);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < hl; ++o) {
        want0[i * hl + o] = want_out[i * OC + rank_ * hl + o] - bias(rank_ * hl + o);
        want1[i * hl + o] = want_out[i * OC + half + rank_ * hl + o] - bias(half + rank_ * hl + o);
        d0[i * hl + o] = dout[i * OC + rank_ * hl + o];
        d1[i * hl + o] = dout[i * OC + half + rank_ * hl + o];
      }
    expect_near("ColumnParallelLinear(two weights) forward: first output's columns", o0, want0, 1e-6);
    expect_near("ColumnParallelLinear(two weights) forward: second output's columns", o1, want1, 1e-6);
    layer.backward(hw, view(din, N, C), view(x, N, C), {view(d0, N, hl), view(d1, N, hl)});
    expect_near("ColumnParallelLinear(two weights) backward: one all-reduce of both input gradients", din, want_din,
                1e-6);
  }
  for (const bool parallel_input : {true, false}) {  // Row-parallel: this rank's columns [rank·Cl, +Cl) of W.
    HostWeights hw;
    std::vector<float> wl(OC * Cl), bfull(OC), xl(N * Cl);
    for (int64_t o = 0; o < OC; ++o) {
      bfull[o] = static_cast<float>(bias(o));
      for (int64_t c = 0; c < Cl; ++c) wl[o * Cl + c] = static_cast<float>(W(o, rank_ * Cl + c));
    }
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < Cl; ++c) xl[i * Cl + c] = x[i * C + rank_ * Cl + c];
    const size_t w = hw.add(wl, {OC, Cl}), b = hw.add(bfull, {OC});
    pw::RowParallelLinear layer(tp, w, b, out_in, parallel_input);
    const std::string name = parallel_input ? "RowParallelLinear(input_is_parallel)" : "RowParallelLinear(full input)";
    std::vector<float> out(N * OC);
    const Tensor in = parallel_input ? view(xl, N, Cl) : view(x, N, C);
    layer.forward(hw, view(out, N, OC), in);
    expect_near(name + " forward: the full output, the bias once", out, want_out, 1e-6);
    std::vector<float> din(parallel_input ? N * Cl : N * C, 0.0f);
    layer.backward(hw, parallel_input ? view(din, N, Cl) : view(din, N, C), in, view(dout, N, OC));
    std::vector<double> want(din.size());
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < (parallel_input ? Cl : C); ++c)
        want[i * (parallel_input ? Cl : C) + c] = want_din[i * C + (parallel_input ? rank_ * Cl : 0) + c];
    expect_near(name + " backward: the input gradient", din, want, 1e-6);
    std::vector<double> want_db(OC, 0.0);
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t i = 0; i < N; ++i) want_db[o] += D(i, o);
    expect_near(name + " backward: d b, whole on every rank (the bias is replicated)", hw.g[b], want_db, 1e-6);
  }
}

}  // namespace

int main(int argc, char** argv) {
  pw::MpiSession mpi(&argc, &argv);
  auto tp = mpi.world();
  rank_ = tp->rank();
  regions(*tp);
  cross_entropy(*tp);
  embedding(*tp);
  layers(*tp);
  if (failures == 0 && rank_ == 0) std::printf("all tensor-parallel checks passed on %d ranks\n", tp->size());
  return failures == 0 ? 0 : 1;
}
