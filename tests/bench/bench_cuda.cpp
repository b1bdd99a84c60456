// CUDA kernels at GPT-2 small shapes: cuBLAS GEMM (bf16 and fp32), Newton–Schulz and inverse
// roots. Each case reports TFLOP/s; Newton–Schulz also reports its ratio to the bf16 GEMM rate
// measured once in the same run (counter vs_bf16_gemm). The mixture-of-experts ops (4096 tokens,
// 64 experts, top 8, C = 512) report the bytes they must move, per second. Every timed region ends with a device
// synchronize, and the time is reported as manual time. Without a GPU every case is skipped
// with an error. Run: precon_bench_cuda [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/inverse_root.h"
#include "kernels/linalg.h"
#include "kernels/nn.h"
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

// Mixture of experts: N tokens, E experts, K per token, M = N·K assignments, C channels.
constexpr int64_t kMoeN = 4096, kMoeE = 64, kMoeK = 8, kMoeC = 512, kMoeM = kMoeN * kMoeK;

// A device i32 tensor holding host values.
struct DeviceInts {
  k::Buffer buffer;
  Tensor t;
};

DeviceInts device_ints(std::vector<int32_t>& host, std::initializer_list<int64_t> shape) {
  DeviceInts d{k::Buffer(kGpu, host.size() * sizeof(int32_t)), {}};
  d.t = d.buffer.view(shape, DType::i32);
  k::copy(d.t, Tensor::view(host.data(), shape, DType::i32));
  return d;
}

// The routing of random logits (on the CPU) and its assignments grouped by expert, as the MoE
// layer groups them: rows[p] is the token of slot p, pos[n, j] the slot of token n's j-th expert.
struct MoeDeviceRouting {
  DeviceTensor logits, probs, w;
  DeviceInts idx, rows, pos;
};

MoeDeviceRouting moe_device_routing() {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> logits(kMoeN * kMoeE), probs(kMoeN * kMoeE), w(kMoeM);
  for (float& x : logits) x = dist(rng);
  std::vector<int32_t> idx(kMoeM), rows(kMoeM), pos(kMoeM);
  k::moe_router_forward(Tensor::view(probs.data(), {kMoeN, kMoeE}), Tensor::view(idx.data(), {kMoeN, kMoeK}, DType::i32),
                        Tensor::view(w.data(), {kMoeN, kMoeK}), Tensor::view(logits.data(), {kMoeN, kMoeE}));
  std::vector<int64_t> next(kMoeE + 1, 0);
  for (int32_t e : idx) ++next[e + 1];
  for (int64_t e = 0; e < kMoeE; ++e) next[e + 1] += next[e];
  for (int64_t i = 0; i < kMoeM; ++i) {
    const int64_t p = next[idx[i]]++;
    rows[p] = static_cast<int32_t>(i / kMoeK);
    pos[i] = static_cast<int32_t>(p);
  }
  MoeDeviceRouting r{random_device({kMoeN, kMoeE}, DType::f32, 12), random_device({kMoeN, kMoeE}, DType::f32, 13),
                     random_device({kMoeN, kMoeK}, DType::f32, 14), device_ints(idx, {kMoeN, kMoeK}),
                     device_ints(rows, {kMoeM}), device_ints(pos, {kMoeN, kMoeK})};
  k::copy(r.logits.t, Tensor::view(logits.data(), {kMoeN, kMoeE}));
  k::copy(r.probs.t, Tensor::view(probs.data(), {kMoeN, kMoeE}));
  k::copy(r.w.t, Tensor::view(w.data(), {kMoeN, kMoeK}));
  return r;
}

// Arg: backward (0 = forward). The router is fp32 whatever the activations.
void BM_CudaMoeRouter(benchmark::State& state) {
  if (!require_gpu(state)) return;
  const bool backward = state.range(0) != 0;
  MoeDeviceRouting r = moe_device_routing();
  auto dw = random_device({kMoeN, kMoeK}, DType::f32, 15), aux = random_device({kMoeE}, DType::f32, 16);
  auto dlogits = random_device({kMoeN, kMoeE}, DType::f32, 17);
  if (backward)
    run_timed(state, 0.0, [&] { k::moe_router_backward(dlogits.t, dw.t, r.probs.t, r.idx.t, r.w.t, aux.t); });
  else
    run_timed(state, 0.0, [&] { k::moe_router_forward(r.probs.t, r.idx.t, r.w.t, r.logits.t); });
  const int64_t bytes = (kMoeN * kMoeE * (backward ? 3 : 2) + kMoeM * (backward ? 3 : 2)) * int64_t(sizeof(float));
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel(backward ? "backward" : "forward");
}
BENCHMARK(BM_CudaMoeRouter)->ArgNames({"backward"})->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Args: f32 (0 = bf16, 1 = f32), op (0 gather_rows, 1 scatter_add_rows, 2 combine forward,
// 3 combine backward).
void BM_CudaMoeRows(benchmark::State& state) {
  if (!require_gpu(state)) return;
  const DType dt = dtype_arg(state.range(0));
  const int64_t op = state.range(1);
  MoeDeviceRouting r = moe_device_routing();
  auto tokens = random_device({kMoeN, kMoeC}, dt, 18), tokens2 = random_device({kMoeN, kMoeC}, dt, 19);
  auto slots = random_device({kMoeM, kMoeC}, dt, 20), slots2 = random_device({kMoeM, kMoeC}, dt, 21);
  auto dw = random_device({kMoeN, kMoeK}, DType::f32, 22);
  const int64_t e = int64_t(k::dtype_size(dt)), tok = kMoeN * kMoeC * e, slot = kMoeM * kMoeC * e;
  int64_t bytes = 0;
  const char* name = "";
  switch (op) {
    case 0:
      run_timed(state, 0.0, [&] { k::gather_rows(slots.t, tokens.t, r.rows.t); });
      bytes = tok + slot;
      name = "gather_rows";
      break;
    case 1:
      run_timed(state, 0.0, [&] { k::scatter_add_rows(tokens.t, slots.t, r.rows.t); });
      bytes = 2 * tok + slot;
      name = "scatter_add_rows";
      break;
    case 2:
      run_timed(state, 0.0, [&] { k::moe_combine_forward(tokens.t, slots.t, r.pos.t, r.w.t); });
      bytes = tok + slot;
      name = "combine_forward";
      break;
    default:
      run_timed(state, 0.0, [&] { k::moe_combine_backward(slots2.t, dw.t, tokens2.t, slots.t, r.pos.t, r.w.t); });
      bytes = tok + 3 * slot;
      name = "combine_backward";
      break;
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel(std::string(name) + " " + k::dtype_name(dt));
}
BENCHMARK(BM_CudaMoeRows)
    ->ArgNames({"f32", "op"})
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
