// Batched Newton–Schulz over same-shape matrices (worker/optim/ns_batch.h) and Muon on a MoE model's
// many expert matrices: the batch against each matrix orthogonalised alone (the 2-D kernel call, at
// fp32 rounding), and Muon's two steps on every matrix against a double-precision reference built
// from the naive Newton–Schulz of kernels/reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "kernels/reference/linalg_reference.h"
#include "tests/worker/support/optim_util.h"
#include "worker/optim/ns_batch.h"

namespace precon::worker {
namespace {

namespace ref = kernels::reference;

kernels::NsOptions ns_batch_keller() {
  return {kernels::ns_schedule("keller", 5), 1e-7f, kernels::DType::f32};
}

TEST(NsBatches, EachBatchEqualsEveryMatrixAloneAcrossFullAndPartialBatches) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // 70 problems of one shape (a full batch of kMaxNsBatch and a rest of 6), 3 of another, and one
  // of its own shape (not batched), interleaved as a MoE layer's gate, up and down are.
  struct Problem {
    int64_t rows, cols;
    std::vector<float> g;
  };
  std::vector<Problem> problems;
  for (size_t i = 0; i < 74; ++i) {
    const bool wide = i % 25 == 3;
    const int64_t rows = i == 73 ? 5 : wide ? 12 : 8, cols = i == 73 ? 9 : wide ? 6 : 12;
    problems.push_back({rows, cols, test::random_normal(static_cast<size_t>(rows * cols), seed + i)});
  }
  optim::NsBatches batches;
  for (size_t i = 0; i < problems.size(); ++i) batches.add(i, problems[i].rows, problems[i].cols);
  // Large matrices: two of 2048 × 2048 exceed the slots' budget (not batched); three of 1024 × 2048
  // go two at a time. Registered only (never filled here).
  for (size_t i = 100; i < 102; ++i) batches.add(i, 2048, 2048);
  for (size_t i = 200; i < 203; ++i) batches.add(i, 1024, 2048);
  batches.allocate(kernels::Device::cpu);
  EXPECT_EQ(batches.counts(), (std::pair<size_t, size_t>{76, 3}));
  EXPECT_FALSE(batches.batched(73));
  EXPECT_FALSE(batches.batched(100));
  EXPECT_TRUE(batches.batched(202));
  EXPECT_EQ(batches.slot(202).data, batches.slot(200).data);  // the third starts a second batch
  const kernels::NsOptions options = ns_batch_keller();
  std::map<size_t, std::vector<float>> results;
  for (size_t i = 0; i < 73; ++i) {
    kernels::Tensor slot = batches.slot(i);
    std::memcpy(slot.data, problems[i].g.data(), problems[i].g.size() * sizeof(float));
    batches.filled(i, options, [&](size_t id, const kernels::Tensor& o) {
      EXPECT_EQ(results.count(id), 0u) << "problem " << id << " returned twice";
      results[id] = std::vector<float>(o.f32(), o.f32() + o.numel());
    });
  }
  ASSERT_EQ(results.size(), 73u);
  double worst = 0, worst_naive = 0;
  for (size_t i = 0; i < 73; ++i) {
    Problem& p = problems[i];
    std::vector<float> alone(p.g.size());
    kernels::newton_schulz(test::host_view(alone, {p.rows, p.cols}), test::host_view(p.g, {p.rows, p.cols}), options);
    worst = std::max(worst, test::max_abs_diff(results[i], alone));
    const auto naive = ref::to_float(ref::newton_schulz(ref::from_float(p.g, p.rows, p.cols), options.schedule, 1e-7));
    worst_naive = std::max(worst_naive, test::max_abs_diff(results[i], naive));
  }
  std::printf("batched vs alone: max |diff| %.3g; vs the naive double NS %.3g\n", worst, worst_naive);
  // The same fp32 operations per matrix; only the thread that runs them differs (a sum's order
  // inside one product may change: a few ulps of the O(1) entries).
  EXPECT_LE(worst, 1e-6);
  EXPECT_LT(worst_naive, 2e-4);  // the kernel tests' fp32-vs-double budget
}

TEST(NsBatches, FillingOutOfOrderIsRefusedAndEachStepStartsAfresh) {
  optim::NsBatches batches;
  for (size_t i = 0; i < 3; ++i) batches.add(i, 4, 4);
  batches.allocate(kernels::Device::cpu);
  for (size_t i = 0; i < 3; ++i) std::fill(batches.slot(i).f32(), batches.slot(i).f32() + 16, 1.0f + float(i));
  int done = 0;
  auto count = [&](size_t, const kernels::Tensor&) { ++done; };
  batches.begin_step();
  batches.filled(0, ns_batch_keller(), count);
  EXPECT_THROW(batches.filled(2, ns_batch_keller(), count), std::logic_error);
  // A step cut short leaves nothing behind for the next.
  batches.begin_step();
  for (size_t i = 0; i < 3; ++i) batches.filled(i, ns_batch_keller(), count);
  EXPECT_EQ(done, 3);
}

// Muon (ema momentum 0.9, Nesterov, keller 5 steps, shape scale, decoupled decay) on a 2-layer
// Llama MoE of 8 experts + a shared one: two steps of every matrix in double.
TEST(NsBatches, MuonOnMoeExpertsMatchesPerMatrixDoubleReference) {
  ModelConfig m;
  m.arch = "llama";
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.d_model = 32;
  m.ffn_hidden = 48;
  m.seq_len = 8;
  m.vocab_size = 64;
  m.moe.experts = 8;
  m.moe.top_k = 2;
  m.moe.ffn_hidden = 16;
  m.moe.shared_experts = 1;
  ParamStore store(llama_param_table(m), kernels::Device::cpu);
  testing::fill_random(store, 11, 0.05f, false);
  OptimizerConfig c;
  c.name = "muon";
  c.lr = 0.02;
  c.weight_decay = 0.1;
  auto opt = make_optimizer(c, testing::optim_params(store), kernels::Device::cpu);
  const double mu = c.muon.momentum, lr = c.lr, wd = c.weight_decay;
  const std::vector<kernels::NsCoefficients> schedule = kernels::ns_schedule("keller", 5);

  struct Expected {
    ref::Matrix w, momentum;
  };
  std::map<size_t, Expected> expected;
  for (size_t i = 0; i < store.size(); ++i) {
    const ParamSpec& s = store.spec(i);
    if (s.kind != ParamKind::matrix) continue;
    expected[i] = {ref::from_float(testing::host_visible(store, i), s.shape[0], s.shape[1]),
                   ref::Matrix(s.shape[0], s.shape[1])};
  }
  size_t experts = 0;
  for (const auto& [i, e] : expected) experts += store.spec(i).expert >= 0;
  ASSERT_EQ(experts, 2u * 8u * 3u);
  for (int t = 1; t <= 2; ++t) {
    testing::fill_random(store, 100 + t, 1.0f, true);
    StepContext ctx;
    ctx.step = t;
    opt->step(ctx);
    for (auto& [i, e] : expected) {
      const ParamSpec& s = store.spec(i);
      const ref::Matrix g = ref::from_float(testing::host_visible(store, i, true), s.shape[0], s.shape[1]);
      ref::Matrix u(g.rows, g.cols);
      for (size_t k = 0; k < g.v.size(); ++k) {
        e.momentum.v[k] = mu * e.momentum.v[k] + (1 - mu) * g.v[k];
        u.v[k] = (1 - mu) * g.v[k] + mu * e.momentum.v[k];
      }
      const ref::Matrix o = ref::newton_schulz(u, schedule, 1e-7);
      const double scale = std::sqrt(std::max(1.0, double(s.fan_out) / double(s.fan_in)));
      for (size_t k = 0; k < o.v.size(); ++k) e.w.v[k] = e.w.v[k] * (1 - lr * wd) - lr * scale * o.v[k];
    }
  }
  double worst = 0, worst_expert = 0;
  for (const auto& [i, e] : expected) {
    const double diff = test::max_abs_diff(testing::host_visible(store, i), ref::to_float(e.w));
    worst = std::max(worst, diff);
    if (store.spec(i).expert >= 0) worst_expert = std::max(worst_expert, diff);
    // fp32 NS against double: ≤ 2e-4 of O(1) entries, times lr·scale ≤ 0.04 per step.
    EXPECT_LT(diff, 2e-5) << store.spec(i).name;
  }
  std::printf("Muon on %zu matrices (%zu experts') vs double reference: max |diff| %.3g (experts %.3g)\n",
              expected.size(), experts, worst, worst_expert);
}

}  // namespace
}  // namespace precon::worker
