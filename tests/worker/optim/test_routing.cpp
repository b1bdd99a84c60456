// Routing (every parameter really gets its optimizer's update, and the summary says so) and
// Shampoo's handling of failed inverse roots.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kernels/nn.h"
#include "tests/worker/support/optim_util.h"

namespace precon::worker {
namespace {

using testing::host_visible;

// What AdamW (kernels::adamw_update, step 1) would make of parameter i.
std::vector<float> adamw_prediction(const ParamStore& store, size_t i, const std::vector<float>& init, double lr,
                                    double wd, const AdamWConfig& a) {
  std::vector<float> p = init, g = host_visible(store, i, true), m(p.size(), 0.0f), v(p.size(), 0.0f);
  kernels::AdamWParams hp;
  hp.lr = float(lr);
  hp.beta1 = float(a.beta1);
  hp.beta2 = float(a.beta2);
  hp.eps = float(a.eps);
  hp.weight_decay = float(wd);
  hp.step = 1;
  const int64_t n = int64_t(p.size());
  kernels::adamw_update(test::host_view(p, {n}), test::host_view(g, {n}), test::host_view(m, {n}),
                        test::host_view(v, {n}), hp);
  return p;
}

std::string count_text(const std::string& name, size_t tensors, int64_t numel) {
  char buf[96];
  if (numel >= 1000000) std::snprintf(buf, sizeof buf, "%s: %zu tensors, %.1fM params", name.c_str(), tensors, numel / 1e6);
  else if (numel >= 1000) std::snprintf(buf, sizeof buf, "%s: %zu tensors, %.1fK params", name.c_str(), tensors, numel / 1e3);
  else std::snprintf(buf, sizeof buf, "%s: %zu tensors, %lld params", name.c_str(), tensors, (long long)numel);
  return buf;
}

// One step of config over the tiny model; checks that parameters with routed(spec) = true changed
// and differ from AdamW's update while all others got exactly AdamW's update (with the side
// group's lr/wd, or the top-level ones in an adamw run), and the routing summary.
void check_routing(const OptimizerConfig& config, const std::function<bool(const ParamSpec&)>& routed,
                   const std::string& name) {
  ParamStore store(gpt2_param_table(testing::tiny_model()), kernels::Device::cpu);
  testing::fill_random(store, 5, 0.02f, false);
  testing::fill_random(store, 6, 0.1f, true);
  std::vector<std::vector<float>> init;
  for (size_t i = 0; i < store.size(); ++i) init.push_back(host_visible(store, i));
  auto opt = make_optimizer(config, testing::optim_params(store), kernels::Device::cpu);
  const double lr_scale = 0.7;
  opt->step(StepContext{1, lr_scale, 1.0f});
  const bool adamw_run = name == "adamw";
  const double side_lr = (config.adamw.lr > 0 && !adamw_run ? config.adamw.lr : config.lr) * lr_scale;
  const double side_wd =
      config.adamw.weight_decay >= 0 && !adamw_run ? config.adamw.weight_decay : config.weight_decay;
  size_t n_routed = 0, n_side = 0;
  int64_t e_routed = 0, e_side = 0;
  for (size_t i = 0; i < store.size(); ++i) {
    const ParamSpec& s = store.spec(i);
    std::vector<float> after = host_visible(store, i);
    EXPECT_GT(test::max_abs_diff(after, init[i]), 0.0) << s.name << " was not updated";
    if (routed(s)) {
      ++n_routed, e_routed += s.numel();
      std::vector<float> adamw = adamw_prediction(store, i, init[i], config.lr * lr_scale, config.weight_decay, config.adamw);
      EXPECT_GT(test::max_abs_diff(after, adamw), 1e-5) << s.name << " got AdamW's update instead of " << name << "'s";
    } else {
      ++n_side, e_side += s.numel();
      std::vector<float> adamw = adamw_prediction(store, i, init[i], side_lr, side_wd, config.adamw);
      EXPECT_EQ(test::max_abs_diff(after, adamw), 0.0) << s.name << " did not get the AdamW side group's update";
    }
  }
  std::string expect = count_text(name, n_routed, e_routed);
  if (name == "shampoo") {
    // One block per matrix at the default max_preconditioner_dim.
    expect += " in " + std::to_string(n_routed) + " blocks";
  }
  EXPECT_EQ(opt->routing_summary(), adamw_run ? count_text("adamw", n_side, e_side)
                                              : expect + "; " + count_text("adamw", n_side, e_side));
  std::printf("%s\n", opt->routing_summary().c_str());
}

OptimizerConfig base(const std::string& name) {
  OptimizerConfig c;
  c.name = name;
  c.lr = 0.02;
  c.weight_decay = 0.1;
  c.adamw.lr = 3e-3;
  c.adamw.weight_decay = 0.01;
  return c;
}

TEST(OptimRouting, MuonUpdatesEveryMatrixAndAdamWTheRest) {
  check_routing(base("muon"), [](const ParamSpec& s) { return s.kind == ParamKind::matrix; }, "muon");
}

TEST(OptimRouting, ShampooHiddenUpdatesEveryMatrixAndAdamWTheRest) {
  OptimizerConfig c = base("shampoo");
  c.shampoo.precondition_frequency = 1;
  check_routing(c, [](const ParamSpec& s) { return s.kind == ParamKind::matrix; }, "shampoo");
}

TEST(OptimRouting, ShampooAllMatricesAddsEmbeddings) {
  OptimizerConfig c = base("shampoo");
  c.shampoo.params = "all-matrices";
  c.shampoo.precondition_frequency = 1;
  check_routing(c, [](const ParamSpec& s) { return s.shape.size() == 2; }, "shampoo");
}

TEST(OptimRouting, AdamWRunUsesTheTopLevelLrAndDecay) {
  OptimizerConfig c = base("adamw");  // adamw.lr / adamw.weight_decay are set and must be ignored
  check_routing(c, [](const ParamSpec&) { return false; }, "adamw");
}

TEST(OptimRouting, UnknownNamesAndOptionsAreClearErrors) {
  ParamStore store(gpt2_param_table(testing::tiny_model()), kernels::Device::cpu);
  OptimizerConfig c = base("lion");
  EXPECT_THROW(make_optimizer(c, testing::optim_params(store), kernels::Device::cpu), OptimizerError);
  c = base("muon");
  c.muon.coefficients = "explicit";  // without a list
  EXPECT_THROW(make_optimizer(c, testing::optim_params(store), kernels::Device::cpu), OptimizerError);
  c = base("muon");
  c.muon.ns_precision = "bf16";  // CPU tensors
  EXPECT_THROW(make_optimizer(c, testing::optim_params(store), kernels::Device::cpu), OptimizerError);
  c = base("shampoo");
  c.shampoo.grafting = "adafactor";
  EXPECT_THROW(make_optimizer(c, testing::optim_params(store), kernels::Device::cpu), OptimizerError);
  c = base("shampoo");
  c.shampoo.root_method = "newton";
  c.shampoo.exponent = 0.3;  // root 1/0.3 is not an integer
  EXPECT_THROW(make_optimizer(c, testing::optim_params(store), kernels::Device::cpu), OptimizerError);
}

TEST(OptimRouting, ShampooKeepsThePreviousRootAndStopsAfterTooManyFailures) {
  ParamStore store(gpt2_param_table(testing::tiny_model()), kernels::Device::cpu);
  testing::fill_random(store, 7, 0.02f, false);
  OptimizerConfig c = base("shampoo");
  c.shampoo.precondition_frequency = 1;
  c.shampoo.epsilon = 1e-6;
  c.shampoo.max_root_failures = 2;
  std::vector<std::string> warnings;
  OptimizerHooks hooks;
  hooks.warn = [&](const std::string& w) { warnings.push_back(w); };
  auto opt = make_optimizer(c, testing::optim_params(store), kernels::Device::cpu, hooks);
  const std::string bad = "h.0.attn.c_proj.weight", block = bad + ".block0";
  auto root = [&]() {
    for (const NamedState& s : opt->state_tensors()) {
      if (s.name == block + ".L_inv_root") return std::vector<float>(s.tensor.f32(), s.tensor.f32() + s.tensor.numel());
    }
    ADD_FAILURE() << "no state " << block << ".L_inv_root";
    return std::vector<float>{};
  };
  auto failures = [&]() { return opt->state_scalars().at("consecutive_root_failures").at(block).get<int64_t>(); };

  testing::fill_random(store, 1, 0.1f, true);
  opt->step(StepContext{1, 1.0, 1.0f});
  EXPECT_TRUE(warnings.empty());
  const std::vector<float> good_root = root();
  std::vector<float> identity(good_root.size(), 0.0f);
  for (size_t i = 0; i < 16; ++i) identity[i * 16 + i] = 1.0f;
  EXPECT_GT(test::max_abs_diff(good_root, identity), 0.0) << "step 1 should have refreshed the root";

  for (int64_t t = 2; t <= 3; ++t) {
    testing::fill_random(store, t, 0.1f, true);
    if (t == 2) store.grad(bad).f32()[3] = std::nanf("");  // the running sum L stays NaN from now on
    opt->step(StepContext{t, 1.0, 1.0f});
    ASSERT_EQ(warnings.size(), size_t(t - 1));
    EXPECT_NE(warnings.back().find(bad), std::string::npos) << warnings.back();
    EXPECT_NE(warnings.back().find("step " + std::to_string(t)), std::string::npos) << warnings.back();
    EXPECT_EQ(root(), good_root) << "a failed refresh must keep the previous root";
    EXPECT_EQ(failures(), t - 1);
    EXPECT_EQ(opt->inverse_root_failures(), t - 1);  // reported as inverse_root_failures
    EXPECT_EQ(opt->state_scalars()["consecutive_root_failures"]["h.0.mlp.c_fc.weight.block0"], 0);
  }
  // The run's count survives a resume (trainer.json carries it).
  auto resumed = make_optimizer(c, testing::optim_params(store), kernels::Device::cpu, hooks);
  resumed->load_state_scalars(opt->state_scalars());
  EXPECT_EQ(resumed->inverse_root_failures(), 2);
  testing::fill_random(store, 4, 0.1f, true);
  try {
    opt->step(StepContext{4, 1.0, 1.0f});
    FAIL() << "a third consecutive failure with max_root_failures = 2 must stop the run";
  } catch (const OptimizerError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_root_failures"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace precon::worker
