// Linear-algebra kernels on the CPU: sgemm at GPT shapes, Newton–Schulz (and each coefficient set's
// distance from the polar factor against steps), inverse roots.
// Each case reports achieved GFLOP/s and its ratio to this machine's sgemm rate, measured in the
// same run (counter vs_sgemm). Run: precon_bench_linalg [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <string>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/inverse_root.h"
#include "kernels/linalg.h"
#include "kernels/newton_schulz.h"

namespace {

using precon::kernels::Tensor;

std::vector<float> random_vector(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The machine's sgemm rate (GFLOP/s) on a large square product, measured once per process.
double sgemm_rate() {
  static const double rate = [] {
    const int64_t n = 1536;
    auto a = random_vector(n * n, 1), b = random_vector(n * n, 2), c = std::vector<float>(n * n);
    Tensor ta = Tensor::view(a.data(), {n, n}), tb = Tensor::view(b.data(), {n, n}), tc = Tensor::view(c.data(), {n, n});
    precon::kernels::gemm(tc, ta, tb);  // warm-up
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      precon::kernels::gemm(tc, ta, tb);
      best = std::min(best, seconds_since(t0));
    }
    return 2.0 * n * n * n / best / 1e9;
  }();
  return rate;
}

void report(benchmark::State& state, double flops_per_iter) {
  const double rate = flops_per_iter * state.iterations() / 1e9;
  state.counters["GFLOP/s"] = benchmark::Counter(rate, benchmark::Counter::kIsRate);
  state.counters["sgemm_GFLOP/s"] = sgemm_rate();
  state.counters["vs_sgemm"] = benchmark::Counter(rate / sgemm_rate(), benchmark::Counter::kIsRate);
}

void BM_Sgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  auto a = random_vector(m * k, 1), b = random_vector(k * n, 2), c = std::vector<float>(m * n);
  Tensor ta = Tensor::view(a.data(), {m, k}), tb = Tensor::view(b.data(), {k, n}), tc = Tensor::view(c.data(), {m, n});
  sgemm_rate();
  for (auto _ : state) precon::kernels::gemm(tc, ta, tb);
  report(state, 2.0 * m * n * k);
}
// GPT-2 small forward GEMMs at B·T = 256 tokens: QKV, attention proj, MLP up/down, LM head.
BENCHMARK(BM_Sgemm)->Args({256, 2304, 768})->Args({256, 768, 768})->Args({256, 3072, 768})->Args({256, 768, 3072})
    ->Args({256, 50304, 768})->Args({1536, 1536, 1536})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_NewtonSchulz(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), steps = 5;
  auto g = random_vector(rows * cols, 3);
  std::vector<float> out(g.size());
  precon::kernels::NsOptions opt{precon::kernels::ns_schedule(precon::kernels::ns_coefficient_set("keller"), steps),
                                 1e-7f, precon::kernels::DType::f32};
  Tensor tg = Tensor::view(g.data(), {rows, cols}), to = Tensor::view(out.data(), {rows, cols});
  sgemm_rate();
  for (auto _ : state) precon::kernels::newton_schulz(to, tg, opt);
  const double m = std::min(rows, cols), n = std::max(rows, cols);
  report(state, steps * (4 * m * m * n + 2 * m * m * m));  // nominal count, general products
}
BENCHMARK(BM_NewtonSchulz)->Args({384, 1536})->Args({768, 768})->Args({768, 3072})->Args({3072, 768})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// Each named coefficient set's distance from the polar factor against steps: ‖U Vᵀ − NS(X)‖_F /
// ‖U Vᵀ‖_F for a Gaussian 256 × 768 X (U Vᵀ = X (Xᵀ X)^(−1/2) on the short side, through fp64 eigh),
// as the counter polar_error, and the time of the steps. cubic5 runs its 5 steps only.
const std::vector<std::string>& ns_sets() {
  static const std::vector<std::string> sets = {"simple", "quintic", "polar_express", "cans", "aol", "deepseekv4", "cubic5"};
  return sets;
}

void BM_NewtonSchulzSetError(benchmark::State& state) {
  namespace k = precon::kernels;
  const std::string set = ns_sets()[static_cast<size_t>(state.range(0))];
  const int steps = static_cast<int>(state.range(1));
  if (k::ns_required_steps(set) > 0 && steps != k::ns_required_steps(set)) {
    state.SkipWithError("fixed step count");
    return;
  }
  const int64_t m = 256, n = 768;
  auto g = random_vector(m * n, 5);
  // The polar factor: P = (X Xᵀ)^(−1/2) X for the wide X (m ≤ n).
  std::vector<float> gram(m * m), w(m), q(m * m), inv(m * m), polar(m * n);
  Tensor tg = Tensor::view(g.data(), {m, n}), tgram = Tensor::view(gram.data(), {m, m});
  k::syrk(tgram, tg);
  k::symmetric_eigh(Tensor::view(w.data(), {m}), Tensor::view(q.data(), {m, m}), tgram, true);
  std::vector<float> d(m);
  for (int64_t i = 0; i < m; ++i) d[i] = 1.0f / std::sqrt(w[i]);
  k::eigen_reconstruct(Tensor::view(inv.data(), {m, m}), Tensor::view(q.data(), {m, m}), d);
  k::gemm(Tensor::view(polar.data(), {m, n}), Tensor::view(inv.data(), {m, m}), tg, k::Trans::no, k::Trans::no, 1.0f,
          0.0f);
  std::vector<float> out(g.size());
  const k::NsOptions opt{k::ns_schedule(set, steps), 1e-7f, k::DType::f32};
  for (auto _ : state) k::newton_schulz(Tensor::view(out.data(), {m, n}), tg, opt);
  double err = 0, norm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    err += (double(out[i]) - polar[i]) * (double(out[i]) - polar[i]);
    norm += double(polar[i]) * polar[i];
  }
  state.counters["polar_error"] = std::sqrt(err / norm);
  state.SetLabel(set);
}
BENCHMARK(BM_NewtonSchulzSetError)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {3, 5, 8, 10}})
    ->Args({6, 5})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

// The weight-decay step of Muon and Shampoo: axpby against cautious weight decay's masked form, on
// 16M floats (a 4096 × 4096 matrix); bytes moved per second.
void BM_DecayStep(benchmark::State& state) {
  const int64_t n = 4096 * 4096;
  auto x = random_vector(n, 6), y = random_vector(n, 7);
  Tensor tx = Tensor::view(x.data(), {n}), ty = Tensor::view(y.data(), {n});
  const bool cautious = state.range(0) != 0;
  for (auto _ : state) {
    if (cautious) precon::kernels::cautious_axpby(ty, tx, -1e-3f, 0.9999f);
    else precon::kernels::axpby(ty, tx, -1e-3f, 0.9999f);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
  state.SetLabel(cautious ? "cautious_axpby" : "axpby");
}
BENCHMARK(BM_DecayStep)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_InverseRoot(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto method = state.range(1) ? precon::kernels::RootMethod::newton : precon::kernels::RootMethod::eigh;
  auto b = random_vector(n * n, 4);
  std::vector<float> a(n * n), out(n * n);
  Tensor tb = Tensor::view(b.data(), {n, n}), ta = Tensor::view(a.data(), {n, n}), to = Tensor::view(out.data(), {n, n});
  precon::kernels::syrk(ta, tb);  // a Gram matrix: SPD, as Shampoo's statistics are
  precon::kernels::InverseRootOptions opt;
  opt.method = method;
  opt.epsilon = 1e-6f;
  sgemm_rate();
  for (auto _ : state) precon::kernels::matrix_inverse_root(to, ta, opt);
  report(state, 0.0);
  state.SetLabel(method == precon::kernels::RootMethod::eigh ? "eigh" : "newton");
}
BENCHMARK(BM_InverseRoot)->Args({768, 0})->Args({3072, 0})->Args({768, 1})->Unit(benchmark::kMillisecond)
    ->UseRealTime()->MinTime(1.0);

// SOAP's eigenbasis refresh: the power step's product L·Q and the QR of it, against the fp32 eigh
// that builds the basis on the first step (and that the QR refresh replaces), for one factor.
void BM_EigenbasisRefresh(benchmark::State& state) {
  const int64_t n = state.range(0);
  const bool qr = state.range(1) != 0;
  auto b = random_vector(n * n, 5);
  std::vector<float> l(n * n), q(n * n), p(n * n), w(n);
  Tensor tb = Tensor::view(b.data(), {n, n}), tl = Tensor::view(l.data(), {n, n});
  Tensor tq = Tensor::view(q.data(), {n, n}), tp = Tensor::view(p.data(), {n, n});
  precon::kernels::syrk(tl, tb);
  precon::kernels::symmetric_eigh(Tensor::view(w.data(), {n}), tq, tl, false);
  for (auto _ : state) {
    if (qr) {
      precon::kernels::gemm(tp, tl, tq);
      precon::kernels::qr_orthonormal(tp, tp);
    } else {
      precon::kernels::symmetric_eigh(Tensor::view(w.data(), {n}), tp, tl, false);
    }
    benchmark::DoNotOptimize(p.data());
  }
  state.SetLabel(qr ? "power step + QR" : "eigh");
}
BENCHMARK(BM_EigenbasisRefresh)->Args({768, 1})->Args({768, 0})->Args({3072, 1})->Args({3072, 0})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// NorMuon's per-neuron normalisation of a 768 × 3072 update (one pass for the sums of squares
// along a dim, one to scale), beside sum_squares over the same matrix (one streaming pass) as the
// yardstick of memory speed. Args: dim (0 rows, 1 columns; -1 the yardstick).
void BM_NormalizeAlong(benchmark::State& state) {
  const int64_t rows = 768, cols = 3072;
  const int dim = static_cast<int>(state.range(0));
  auto x = random_vector(rows * cols, 6);
  std::vector<float> sums(dim == 1 ? cols : rows), ones(sums.size(), 1.0f);
  Tensor tx = Tensor::view(x.data(), {rows, cols});
  Tensor ts = Tensor::view(sums.data(), {static_cast<int64_t>(sums.size())});
  Tensor t1 = Tensor::view(ones.data(), {static_cast<int64_t>(ones.size())});
  for (auto _ : state) {
    if (dim < 0) {
      benchmark::DoNotOptimize(precon::kernels::sum_squares(tx));
      continue;
    }
    precon::kernels::sum_squares_along(ts, tx, dim);
    precon::kernels::scale_along(tx, t1, dim);  // by ones: the values stay as they are
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * static_cast<int64_t>(sizeof(float)));
  state.SetLabel(dim < 0 ? "sum_squares (yardstick)" : dim == 0 ? "rows" : "columns");
}
BENCHMARK(BM_NormalizeAlong)->Arg(-1)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
