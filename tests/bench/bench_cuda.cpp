// CUDA kernels at GPT-2 small shapes: cuBLAS GEMM (bf16 and fp32), Newton–Schulz and inverse
// roots. Each case reports TFLOP/s; Newton–Schulz also reports its ratio to the bf16 GEMM rate
// measured once in the same run (counter vs_bf16_gemm). Every timed region ends with a device
// synchronize, and the time is reported as manual time. Without a GPU every case is skipped
// with an error. Run: precon_bench_cuda [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/inverse_root.h"
#include "kernels/linalg.h"
#include "kernels/newton_schulz.h"

namespace {

namespace k = precon::kernels;
using k::Device;
using k::DType;
using k::Tensor;

constexpr Device kGpu = Device::cuda;

// A device tensor filled with N(0, scale²) values, owning its memory.
struct DeviceTensor {
  k::Buffer buffer;
  Tensor t;
};

DeviceTensor random_device(std::initializer_list<int64_t> shape, DType dtype, unsigned seed, float scale = 1.0f) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  DeviceTensor d{k::Buffer(kGpu, n * k::dtype_size(dtype)), {}};
  d.t = d.buffer.view(shape, dtype);
  if (dtype == DType::f32) {
    std::vector<float> host(n);
    for (float& x : host) x = dist(rng);
    k::copy(d.t, Tensor::view(host.data(), shape));
  } else {
    std::vector<k::bf16> host(n);
    for (k::bf16& x : host) x = k::float_to_bf16(dist(rng));
    k::copy(d.t, Tensor::view(host.data(), shape, DType::bf16));
  }
  return d;
}

// Seconds for one call of f, from an idle device to its completion.
template <typename F>
double time_once(F&& f) {
  k::synchronize(kGpu);
  auto t0 = std::chrono::steady_clock::now();
  f();
  k::synchronize(kGpu);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename F>
void run_timed(benchmark::State& state, double flops, F&& f) {
  f();  // warm-up: handles, workspaces, scratch
  double total = 0.0;
  for (auto _ : state) {
    double s = time_once(f);
    state.SetIterationTime(s);
    total += s;
  }
  if (flops > 0.0) state.counters["TFLOP/s"] = flops * double(state.iterations()) / total / 1e12;
}

bool require_gpu(benchmark::State& state) {
  if (k::cuda_available()) return true;
  state.SkipWithError("no CUDA device");
  return false;
}

DType dtype_arg(int64_t a) { return a == 0 ? DType::bf16 : DType::f32; }

// The bf16 GEMM rate (TFLOP/s) on a large square product, measured once per process: the
// reference that Newton–Schulz's achieved rate is compared against.
double bf16_gemm_rate() {
  static const double rate = [] {
    const int64_t n = 4096;
    auto a = random_device({n, n}, DType::bf16, 1), b = random_device({n, n}, DType::bf16, 2);
    auto c = random_device({n, n}, DType::bf16, 3);
    k::gemm(c.t, a.t, b.t);
    double best = 1e30;
    for (int rep = 0; rep < 10; ++rep) best = std::min(best, time_once([&] { k::gemm(c.t, a.t, b.t); }));
    return 2.0 * n * n * n / best / 1e12;
  }();
  return rate;
}

// Args: f32 (0 = bf16, 1 = f32), m, n, k. C (m, n) = A (m, k) B (k, n), output in the input dtype.
void BM_CudaGemm(benchmark::State& state) {
  if (!require_gpu(state)) return;
  DType dt = dtype_arg(state.range(0));
  int64_t m = state.range(1), n = state.range(2), kk = state.range(3);
  auto a = random_device({m, kk}, dt, 1), b = random_device({kk, n}, dt, 2), c = random_device({m, n}, dt, 3);
  run_timed(state, 2.0 * m * n * kk, [&] { k::gemm(c.t, a.t, b.t); });
  state.SetLabel(k::dtype_name(dt));
}
BENCHMARK(BM_CudaGemm)
    ->ArgNames({"f32", "m", "n", "k"})
    ->Args({0, 768, 3072, 768})
    ->Args({0, 768, 768, 3072})
    ->Args({0, 3072, 768, 768})
    ->Args({0, 768, 768, 768})
    ->Args({1, 768, 3072, 768})
    ->Args({1, 768, 768, 3072})
    ->Args({1, 768, 768, 768})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Args: f32 (as above), batch (0 = a single 2-D matrix), rows, cols. 5 keller steps in the given dtype.
void BM_CudaNewtonSchulz(benchmark::State& state) {
  if (!require_gpu(state)) return;
  DType dt = dtype_arg(state.range(0));
  int64_t batch = state.range(1), rows = state.range(2), cols = state.range(3);
  DeviceTensor g = batch ? random_device({batch, rows, cols}, dt, 4) : random_device({rows, cols}, dt, 4);
  DeviceTensor out = batch ? random_device({batch, rows, cols}, dt, 5) : random_device({rows, cols}, dt, 5);
  k::NsOptions options{k::ns_schedule(k::ns_coefficient_set("keller"), 5), 1e-7f, dt};
  // Nominal work per matrix, m <= n: per step X Xᵀ (2m²n), A² (2m³) and B X (2m²n).
  double m = double(std::min(rows, cols)), n = double(std::max(rows, cols));
  double flops = 5.0 * (4.0 * m * m * n + 2.0 * m * m * m) * double(batch ? batch : 1);
  double reference = bf16_gemm_rate();
  run_timed(state, flops, [&] { k::newton_schulz(out.t, g.t, options); });
  state.counters["vs_bf16_gemm"] = state.counters["TFLOP/s"] / reference;
  state.SetLabel(k::dtype_name(dt));
}
BENCHMARK(BM_CudaNewtonSchulz)
    ->ArgNames({"f32", "batch", "rows", "cols"})
    ->Args({0, 0, 768, 3072})
    ->Args({0, 0, 3072, 768})
    ->Args({0, 0, 768, 768})
    ->Args({0, 0, 4096, 4096})
    ->Args({0, 0, 8192, 8192})
    ->Args({0, 16, 768, 768})
    ->Args({1, 0, 768, 3072})
    ->Args({1, 0, 3072, 768})
    ->Args({1, 0, 768, 768})
    ->Args({1, 16, 768, 768})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Args: method (0 eigh, 1 newton), n. A = G Gᵀ / n + I, root 4.
void BM_CudaInverseRoot(benchmark::State& state) {
  if (!require_gpu(state)) return;
  bool newton = state.range(0) == 1;
  int64_t n = state.range(1);
  auto g = random_device({n, n}, DType::f32, 6, 1.0f / std::sqrt(float(n)));
  auto a = random_device({n, n}, DType::f32, 7), out = random_device({n, n}, DType::f32, 8);
  k::syrk(a.t, g.t);
  auto eye_host = std::vector<float>(n * n, 0.0f);
  for (int64_t i = 0; i < n; ++i) eye_host[i * n + i] = 1.0f;
  auto eye = random_device({n, n}, DType::f32, 9);
  k::copy(eye.t, Tensor::view(eye_host.data(), {n, n}));
  k::axpby(a.t, eye.t, 1.0f, 1.0f);
  k::InverseRootOptions options;
  options.method = newton ? k::RootMethod::newton : k::RootMethod::eigh;
  k::InverseRootInfo info;
  // No nominal FLOP count: eigh's work is solver-internal and newton's depends on its iterations.
  run_timed(state, 0.0, [&] { info = k::matrix_inverse_root(out.t, a.t, options); });
  if (newton) state.counters["iters"] = info.iterations;
  state.SetLabel(newton ? "newton" : "eigh");
}
BENCHMARK(BM_CudaInverseRoot)
    ->ArgNames({"newton", "n"})
    ->Args({0, 768})
    ->Args({0, 3072})
    ->Args({1, 768})
    ->Args({1, 3072})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
// n = 8192 (a seconds-long eigh): fewer repetitions.
BENCHMARK(BM_CudaInverseRoot)
    ->ArgNames({"newton", "n"})
    ->Args({0, 8192})
    ->Args({1, 8192})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
