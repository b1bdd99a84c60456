// Optimizer state round trip (what checkpoint resume relies on), its layout (one allocation per
// state kind in parameter-table order) and the learning-rate schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "tests/worker/support/optim_util.h"

namespace precon::worker {
namespace {

struct Saved {
  std::map<std::string, std::vector<float>> tensors;
  std::string scalars;
};

Saved save(Optimizer& opt) {
  Saved s;
  for (const NamedState& n : opt.state_tensors()) {
    EXPECT_EQ(s.tensors.count(n.name), 0u) << "duplicate state name " << n.name;
    s.tensors[n.name] = std::vector<float>(n.tensor.f32(), n.tensor.f32() + n.tensor.numel());
  }
  s.scalars = opt.state_scalars().dump();
  return s;
}

// Loads every saved tensor except those whose name contains `skip` (they keep their fresh state).
void load(Optimizer& opt, const Saved& s, const std::string& skip = "") {
  std::vector<NamedState> states = opt.state_tensors();
  ASSERT_EQ(states.size(), s.tensors.size());
  for (const NamedState& n : states) {
    if (!skip.empty() && n.name.find(skip) != std::string::npos) continue;
    auto it = s.tensors.find(n.name);
    ASSERT_NE(it, s.tensors.end()) << n.name;
    ASSERT_EQ(size_t(n.tensor.numel()), it->second.size()) << n.name;
    std::memcpy(n.tensor.f32(), it->second.data(), it->second.size() * sizeof(float));
  }
  opt.load_state_scalars(nlohmann::json::parse(s.scalars));
}

bool same_params(const ParamStore& a, const ParamStore& b) {
  return std::memcmp(a.all_params().data, b.all_params().data, size_t(a.total_numel()) * sizeof(float)) == 0;
}

// Runs 5 steps, saves, resumes into a fresh optimizer and runs 5 more beside the original.
// `must_matter`: state entries (by name part) that the steps right after the resume read, checked
// by a third run that loads everything else and must diverge.
void round_trip(const OptimizerConfig& config, const std::string& must_matter = "") {
  const ModelConfig model = testing::tiny_model();
  ParamStore a(gpt2_param_table(model), kernels::Device::cpu);
  testing::fill_random(a, 3, 0.02f, false);
  auto opt_a = make_optimizer(config, testing::optim_params(a), kernels::Device::cpu);
  auto ctx = [](int64_t t) { return StepContext{t, 0.5 + 0.05 * double(t), 0.9f}; };
  for (int64_t t = 1; t <= 5; ++t) {
    testing::fill_random(a, 40 + t, 0.1f, true);
    opt_a->step(ctx(t));
  }
  ParamStore b(gpt2_param_table(model), kernels::Device::cpu), fresh(gpt2_param_table(model), kernels::Device::cpu);
  std::memcpy(b.all_params().data, a.all_params().data, size_t(a.total_numel()) * sizeof(float));
  std::memcpy(fresh.all_params().data, a.all_params().data, size_t(a.total_numel()) * sizeof(float));
  auto opt_b = make_optimizer(config, testing::optim_params(b), kernels::Device::cpu);
  auto opt_fresh = make_optimizer(config, testing::optim_params(fresh), kernels::Device::cpu);
  const Saved saved = save(*opt_a);
  load(*opt_b, saved);
  if (!must_matter.empty()) load(*opt_fresh, saved, must_matter);
  for (int64_t t = 6; t <= 10; ++t) {
    for (ParamStore* s : {&a, &b, &fresh}) testing::fill_random(*s, 40 + t, 0.1f, true);
    opt_a->step(ctx(t));
    opt_b->step(ctx(t));
    opt_fresh->step(ctx(t));
  }
  EXPECT_TRUE(same_params(a, b)) << config.name << ": resumed parameters are not bitwise identical";
  // The check has teeth: without the saved state (or without the entries named) the run goes elsewhere.
  EXPECT_FALSE(same_params(a, fresh)) << config.name << ": the state made no difference " << must_matter;
}

TEST(OptimState, AdamWRoundTripIsBitwise) {
  OptimizerConfig c;
  c.name = "adamw";
  c.weight_decay = 0.1;
  round_trip(c);
}

TEST(OptimState, MuonRoundTripIsBitwise) {
  OptimizerConfig c;
  c.name = "muon";
  c.lr = 0.02;
  c.weight_decay = 0.01;
  round_trip(c);
}

TEST(OptimState, ShampooRoundTripIsBitwise) {
  OptimizerConfig c;
  c.name = "shampoo";
  c.lr = 0.01;
  // Refreshes at 4 and 8: steps 6 and 7 after the resume precondition with the roots saved at
  // step 4, so a resume that lost them (identity roots) must diverge.
  c.shampoo.precondition_frequency = 4;
  c.shampoo.max_preconditioner_dim = 10;
  c.shampoo.epsilon = 1e-6;
  round_trip(c);
  round_trip(c, "inv_root");
  c.shampoo.grafting = "adagrad";
  c.shampoo.params = "all-matrices";
  round_trip(c, "inv_root");
}

// Each state kind is one allocation tiled by its tensors, one contiguous range each, parameters in
// table order (blocks in order within one): a data-parallel shard of the state is an offset range
// and (name, shape, offset) locate every checkpoint entry.
void expect_table_order_layout(const OptimizerConfig& config, const std::set<std::string>& want_kinds) {
  SCOPED_TRACE(config.name + " " + config.shampoo.grafting);
  ParamStore store(gpt2_param_table(testing::tiny_model()), kernels::Device::cpu);
  auto opt = make_optimizer(config, testing::optim_params(store), kernels::Device::cpu);
  const std::vector<StateKind> kinds = opt->state_kinds();
  const std::vector<NamedState> states = opt->state_tensors();
  std::set<std::string> seen;
  for (const StateKind& kind : kinds) EXPECT_TRUE(seen.insert(kind.kind).second) << "kind " << kind.kind << " twice";
  EXPECT_EQ(seen, want_kinds);
  for (size_t i = 1; i < states.size(); ++i) {
    if (states[i].kind == states[i - 1].kind) continue;
    for (size_t j = 0; j < i; ++j) EXPECT_NE(states[j].kind, states[i].kind) << states[i].name << ": kinds interleave";
  }
  for (const StateKind& kind : kinds) {
    int64_t next = 0;
    size_t prev_row = 0;
    int prev_block = -1;
    for (const NamedState& s : states) {
      if (s.kind != kind.kind) continue;
      const size_t row = store.index(s.param);
      if (next > 0) {
        EXPECT_TRUE(row > prev_row || (row == prev_row && s.block > prev_block)) << s.name << ": not in table order";
      }
      EXPECT_EQ(s.name, s.param + (s.block >= 0 ? ".block" + std::to_string(s.block) : "") + "." + s.kind);
      EXPECT_EQ(s.offset, next) << s.name << ": offset is not the sum of the previous sizes";
      EXPECT_EQ(s.tensor.f32(), kind.flat.f32() + s.offset) << s.name << ": not its range of " << kind.kind;
      EXPECT_TRUE(s.tensor.contiguous()) << s.name;
      next += s.tensor.numel();
      prev_row = row;
      prev_block = s.block;
    }
    EXPECT_EQ(next, kind.flat.numel()) << kind.kind << ": the allocation is not exactly its tensors";
  }
  for (const NamedState& s : states) EXPECT_EQ(seen.count(s.kind), 1u) << s.name << ": kind without an allocation";
}

TEST(OptimState, EveryStateKindIsOneAllocationInTableOrder) {
  OptimizerConfig c;
  c.name = "adamw";
  expect_table_order_layout(c, {"exp_avg", "exp_avg_sq"});
  c.name = "muon";
  expect_table_order_layout(c, {"momentum", "exp_avg", "exp_avg_sq"});
  c.name = "shampoo";
  c.shampoo.max_preconditioner_dim = 10;  // row and column blocks
  expect_table_order_layout(c, {"momentum", "grafting_adam", "L", "R", "L_inv_root", "R_inv_root", "exp_avg",
                                "exp_avg_sq"});
  c.shampoo.grafting = "adagrad";
  c.shampoo.params = "all-matrices";
  expect_table_order_layout(c, {"momentum", "grafting_adagrad", "L", "R", "L_inv_root", "R_inv_root", "exp_avg",
                                "exp_avg_sq"});
  c.shampoo.grafting = "none";
  expect_table_order_layout(c, {"momentum", "L", "R", "L_inv_root", "R_inv_root", "exp_avg", "exp_avg_sq"});
}

// A shard cut from the flat exp_avg by an entry's offset range is that parameter's first moment:
// after one step from zero, (1 − β1)·g of that parameter's gradient.
TEST(OptimState, AdamWMomentShardByOffsetRangeIsThePerNameTensor) {
  ParamStore store(gpt2_param_table(testing::tiny_model()), kernels::Device::cpu);
  testing::fill_random(store, 3, 0.02f, false);
  testing::fill_random(store, 5, 0.1f, true);
  OptimizerConfig c;
  c.name = "adamw";
  auto opt = make_optimizer(c, testing::optim_params(store), kernels::Device::cpu);
  opt->step(StepContext{1, 1.0, 1.0f});
  const std::vector<StateKind> kinds = opt->state_kinds();
  auto m = std::find_if(kinds.begin(), kinds.end(), [](const StateKind& k) { return k.kind == "exp_avg"; });
  ASSERT_NE(m, kinds.end());
  // What a data-parallel rank would hold: a host copy of the whole allocation, cut by offsets.
  const std::vector<float> flat(m->flat.f32(), m->flat.f32() + m->flat.numel());
  size_t entries = 0;
  for (const NamedState& s : opt->state_tensors()) {
    if (s.kind != "exp_avg") continue;
    ++entries;
    const std::vector<float> shard(flat.begin() + s.offset, flat.begin() + s.offset + s.tensor.numel());
    const std::vector<float> named(s.tensor.f32(), s.tensor.f32() + s.tensor.numel());
    EXPECT_EQ(shard, named) << s.name;
    const std::vector<float> g = testing::host_visible(store, store.index(s.param), true);
    ASSERT_EQ(g.size(), shard.size()) << s.name;
    for (size_t j = 0; j < g.size(); ++j) {
      ASSERT_NEAR(shard[j], (1.0f - static_cast<float>(c.adamw.beta1)) * g[j], 1e-7f) << s.name << "[" << j << "]";
    }
  }
  EXPECT_EQ(entries, store.size());
}

// Hand-computed values with warmup 10, 100 steps, min_lr_ratio 0.1, decay_fraction 0.2.
TEST(OptimSchedule, LrMultiplierAtHandComputedPoints) {
  OptimizerConfig c;
  c.warmup_steps = 10;
  c.min_lr_ratio = 0.1;
  c.decay_fraction = 0.2;
  auto at = [&](const char* schedule, int64_t step) {
    c.schedule = schedule;
    return lr_multiplier(c, step, 100);
  };
  for (const char* s : {"constant", "cosine", "linear", "wsd"}) {
    EXPECT_DOUBLE_EQ(at(s, 1), 0.1) << s;
    EXPECT_DOUBLE_EQ(at(s, 5), 0.5) << s;
    EXPECT_DOUBLE_EQ(at(s, 10), 1.0) << s;
  }
  EXPECT_DOUBLE_EQ(at("constant", 70), 1.0);
  // cosine: 0.1 + 0.9·½(1 + cos(π·(t−10)/90))
  EXPECT_NEAR(at("cosine", 55), 0.55, 1e-12);
  EXPECT_NEAR(at("cosine", 40), 0.1 + 0.45 * (1 + 0.5), 1e-12);  // p = 1/3, cos(π/3) = ½
  EXPECT_NEAR(at("cosine", 100), 0.1, 1e-12);
  // linear: 1 − 0.9·(t−10)/90
  EXPECT_NEAR(at("linear", 40), 0.7, 1e-12);
  EXPECT_NEAR(at("linear", 55), 0.55, 1e-12);
  EXPECT_NEAR(at("linear", 100), 0.1, 1e-12);
  // wsd: stable until 80, then linear to 0.1 at 100
  EXPECT_DOUBLE_EQ(at("wsd", 50), 1.0);
  EXPECT_DOUBLE_EQ(at("wsd", 80), 1.0);
  EXPECT_NEAR(at("wsd", 90), 0.55, 1e-12);
  EXPECT_NEAR(at("wsd", 100), 0.1, 1e-12);
  // Past the end the decay stays at its floor; no warm-up starts at 1.
  EXPECT_NEAR(at("cosine", 150), 0.1, 1e-12);
  c.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(at("constant", 1), 1.0);
  EXPECT_NEAR(at("linear", 50), 0.55, 1e-12);
  c.schedule = "exponential";
  EXPECT_THROW(lr_multiplier(c, 1, 100), OptimizerError);
}

}  // namespace
}  // namespace precon::worker
