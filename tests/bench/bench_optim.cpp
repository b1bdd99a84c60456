// One optimizer step over GPT-2 config (b) (L=6, C=384, NH=6, V=50257, T=256): AdamW, Muon
// (5 keller steps) and Shampoo (frequency 10, blocks <= 1024), with per-phase seconds per step as
// counters and, for Muon, the Newton–Schulz rate on the nominal count 5·(4m²n + 2m³) per block
// (m ≤ n the block's sides). Then the same step at GPT-2 124M's shapes (C=768, NH=12, V=50257,
// two of its twelve layers: the per-layer matrices are the model's, their count a sixth) for Muon,
// NorMuon, Shampoo and SOAP (frequency 10, both sides rotated), side by side. Last, a MoE layer's
// routed experts (64 × SwiGLU of d_model 256, ffn 128: 128 matrices 128×256 and 64 of 256×128):
// their Newton–Schulz one matrix per call (as Muon did) against one batched call per shape (as
// Muon does), and Muon's whole step on that layer.
// Run: precon_bench_optim [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>

#include "kernels/backend.h"
#include "kernels/newton_schulz.h"
#include "worker/model/params.h"
#include "worker/optim/optimizer.h"

namespace {

using namespace precon::worker;

ModelConfig gpt2_shape(int64_t layers, int64_t heads, int64_t width, int64_t seq_len) {
  ModelConfig m;
  m.n_layer = layers;
  m.n_head = heads;
  m.d_model = width;
  m.seq_len = seq_len;
  m.vocab_size = 50257;
  return m;
}

ModelConfig config_b() { return gpt2_shape(6, 6, 384, 256); }

// GPT-2 124M's widths, two layers.
ModelConfig config_124m_two_layers() { return gpt2_shape(2, 12, 768, 1024); }

void fill(const precon::kernels::Tensor& t, unsigned seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
}

// Nominal Newton–Schulz FLOPs of one Muon step (split_qkv: c_attn as three C×C blocks).
double ns_flops(const ParamStore& store, int steps) {
  double flops = 0;
  for (size_t i = 0; i < store.size(); ++i) {
    const ParamSpec& s = store.spec(i);
    if (s.kind != ParamKind::matrix) continue;
    const double rows = double(s.fan_out) / s.qkv_blocks, cols = double(s.fan_in);
    const double m = std::min(rows, cols), n = std::max(rows, cols);
    flops += s.qkv_blocks * steps * (4 * m * m * n + 2 * m * m * m);
  }
  return flops;
}

void run(benchmark::State& state, const OptimizerConfig& config, int64_t first_step,
         const ModelConfig& model = config_b()) {
  ParamStore store(gpt2_param_table(model), precon::kernels::Device::cpu);
  fill(store.all_params(), 1, 0.02f);
  fill(store.all_grads(), 2, 0.01f);
  std::vector<OptimParam> params;
  for (size_t i = 0; i < store.size(); ++i) params.push_back({&store.spec(i), store.param(i), store.grad(i), store.tp()});
  auto opt = make_optimizer(config, params, precon::kernels::Device::cpu);
  int64_t step = 1;
  for (; step < first_step; ++step) opt->step(StepContext{step, 1.0, 1.0f});  // state warm-up
  const PhaseSeconds before = opt->phase_seconds();
  for (auto _ : state) opt->step(StepContext{step++, 1.0, 1.0f});
  const PhaseSeconds after = opt->phase_seconds();
  const double n = double(state.iterations());
  state.counters["newton_schulz_s"] = (after.newton_schulz - before.newton_schulz) / n;
  state.counters["statistics_s"] = (after.statistics - before.statistics) / n;
  state.counters["inverse_root_s"] = (after.inverse_root - before.inverse_root) / n;
  state.counters["grafting_s"] = (after.grafting - before.grafting) / n;
  state.counters["eigenbasis_s"] = (after.eigenbasis - before.eigenbasis) / n;
  state.counters["adamw_s"] = (after.adamw - before.adamw) / n;
  state.counters["other_s"] = (after.other - before.other) / n;
  if (config.name == "muon" && after.newton_schulz > before.newton_schulz) {
    state.counters["ns_GFLOP/s"] =
        ns_flops(store, int(config.muon.ns_steps)) * n / (after.newton_schulz - before.newton_schulz) / 1e9;
  }
  state.SetLabel(opt->routing_summary());
}

void BM_OptimAdamW(benchmark::State& state) {
  OptimizerConfig c;
  c.name = "adamw";
  c.weight_decay = 0.1;
  run(state, c, 1);
}

OptimizerConfig muon_config(bool normuon) {
  OptimizerConfig c;
  c.name = "muon";
  c.lr = 0.02;
  c.muon.ns_steps = 5;
  c.muon.coefficients = "keller";
  if (normuon) c.muon.variant = "normuon";
  return c;
}

OptimizerConfig shampoo_config() {
  OptimizerConfig c;
  c.name = "shampoo";
  c.shampoo.precondition_frequency = 10;
  c.shampoo.max_preconditioner_dim = 1024;
  c.shampoo.epsilon = 1e-8;
  return c;
}

void BM_OptimMuon(benchmark::State& state) { run(state, muon_config(false), 1); }

// Ten iterations from step 11: nine plain preconditioned steps and one inverse-root refresh
// (step 20), so the counters are the amortised cost at frequency 10.
void BM_OptimShampoo(benchmark::State& state) { run(state, shampoo_config(), 11); }

void BM_Optim124mMuon(benchmark::State& state) { run(state, muon_config(false), 1, config_124m_two_layers()); }

void BM_Optim124mNorMuon(benchmark::State& state) { run(state, muon_config(true), 1, config_124m_two_layers()); }

// Steps 11 to 20: nine preconditioned steps and one refresh, as above.
void BM_Optim124mShampoo(benchmark::State& state) { run(state, shampoo_config(), 11, config_124m_two_layers()); }

// Steps 2 to 11 (step 1 builds the bases by eigh and is left out): nine rotated Adam steps and one
// refresh (power step + QR, after step 11's update), every side of every matrix rotated.
void BM_Optim124mSoap(benchmark::State& state) {
  OptimizerConfig c;
  c.name = "soap";
  c.lr = 3e-3;
  c.soap.precondition_frequency = 10;
  run(state, c, 2, config_124m_two_layers());
}

// One MoE layer of 64 routed experts (d_model 256, expert ffn 128, top-8), nothing else routed to
// Muon but its router and norms (AdamW).
ModelConfig moe_layer_64_experts() {
  ModelConfig m;
  m.arch = "llama";
  m.n_layer = 1;
  m.n_head = 4;
  m.d_model = 256;
  m.seq_len = 256;
  m.vocab_size = 256;
  m.moe.experts = 64;
  m.moe.top_k = 8;
  m.moe.ffn_hidden = 128;
  return m;
}

// The experts' Newton–Schulz alone: range(0) = 0, one 2-D call per matrix; 1, one call per shape.
void BM_MoeExpertsNewtonSchulz(benchmark::State& state) {
  namespace k = precon::kernels;
  const int64_t experts = 64, d = 256, ffn = 128;
  std::vector<float> wide(static_cast<size_t>(2 * experts * ffn * d)), tall(static_cast<size_t>(experts * d * ffn));
  std::vector<float> out_wide(wide.size()), out_tall(tall.size());
  fill(k::Tensor::view(wide.data(), {int64_t(wide.size())}), 3, 0.01f);
  fill(k::Tensor::view(tall.data(), {int64_t(tall.size())}), 4, 0.01f);
  const k::NsOptions opt{k::ns_schedule("keller", 5), 1e-7f, k::DType::f32};
  const bool batched = state.range(0) == 1;
  for (auto _ : state) {
    if (batched) {
      k::newton_schulz(k::Tensor::view(out_wide.data(), {2 * experts, ffn, d}),
                       k::Tensor::view(wide.data(), {2 * experts, ffn, d}), opt);
      k::newton_schulz(k::Tensor::view(out_tall.data(), {experts, d, ffn}),
                       k::Tensor::view(tall.data(), {experts, d, ffn}), opt);
      continue;
    }
    for (int64_t i = 0; i < 2 * experts; ++i)
      k::newton_schulz(k::Tensor::view(out_wide.data() + i * ffn * d, {ffn, d}),
                       k::Tensor::view(wide.data() + i * ffn * d, {ffn, d}), opt);
    for (int64_t i = 0; i < experts; ++i)
      k::newton_schulz(k::Tensor::view(out_tall.data() + i * d * ffn, {d, ffn}),
                       k::Tensor::view(tall.data() + i * d * ffn, {d, ffn}), opt);
  }
  const double m = double(ffn), n = double(d);
  state.counters["ns_GFLOP/s"] = benchmark::Counter(3.0 * experts * 5 * (4 * m * m * n + 2 * m * m * m) / 1e9,
                                                    benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(batched ? "batched by shape" : "per matrix");
}

void run_llama(benchmark::State& state, const OptimizerConfig& config, const ModelConfig& model) {
  ParamStore store(llama_param_table(model), precon::kernels::Device::cpu);
  fill(store.all_params(), 1, 0.02f);
  fill(store.all_grads(), 2, 0.01f);
  std::vector<OptimParam> params;
  for (size_t i = 0; i < store.size(); ++i) params.push_back({&store.spec(i), store.param(i), store.grad(i), store.tp()});
  auto opt = make_optimizer(config, params, precon::kernels::Device::cpu);
  int64_t step = 1;
  const PhaseSeconds before = opt->phase_seconds();
  for (auto _ : state) opt->step(StepContext{step++, 1.0, 1.0f});
  const PhaseSeconds after = opt->phase_seconds();
  const double n = double(state.iterations());
  state.counters["newton_schulz_s"] = (after.newton_schulz - before.newton_schulz) / n;
  state.counters["other_s"] = (after.other - before.other) / n;
  state.SetLabel(opt->routing_summary());
}

// Muon's step on the 64-expert layer: its experts batched by shape.
void BM_OptimMoeLayerMuon(benchmark::State& state) { run_llama(state, muon_config(false), moe_layer_64_experts()); }

BENCHMARK(BM_OptimAdamW)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_OptimMuon)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_OptimShampoo)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK(BM_Optim124mMuon)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK(BM_Optim124mNorMuon)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK(BM_Optim124mShampoo)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK(BM_Optim124mSoap)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK(BM_MoeExpertsNewtonSchulz)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_OptimMoeLayerMuon)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
