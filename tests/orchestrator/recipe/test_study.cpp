// A recipe's [study]: parsing, every refusal (file, line, key), the expansion into trials (order,
// the derived steps and learning rates against a hand computation), and the study report on a
// store seeded with finished trials whose losses follow known curves.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/study/report.h"
#include "tests/orchestrator/support/store_fixture.h"
#include "tests/orchestrator/support/study_store_seed.h"

namespace precon::orch {
namespace {

// Line numbers below refer to this text.
const char* kStudyRecipeText = R"([experiment]
name = "s"

[model]
n_layer = 2
seq_len = 32
vocab_size = 256

[train]
batch_size = 3
seed = 7

[optimizer]
lr = 3e-3

[study]
baseline = "adamw"
lr_grid = [0.5, 1.0, 2.0]
lr_scale = "width"
seeds = 2

[[study.sizes]]
model = {d_model = 32, n_head = 2}
[[study.sizes]]
"model.d_model" = 64
model.n_head = 4
[[study.sizes]]
model = {d_model = 128, n_head = 4}

[[study.arms]]
optimizer = {name = "adamw"}

[[study.arms]]
name = "muon5"
optimizer = {name = "muon", lr = 0.02, adamw = {lr = 3e-3}, muon = {ns_steps = 5}}

[[study.arms]]
name = "muon3"
optimizer.name = "muon"
optimizer.lr = 0.02
optimizer.muon.ns_steps = 3
)";

std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

bool has_text(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The issue of a refused study recipe (parse and expansion) that names `key`; key "" when none does.
worker::ConfigIssue study_issue(const std::string& text, const std::string& key,
                                const std::vector<std::string>& overrides = {}) {
  try {
    expand_sweep(parse_recipe_text(text, "s.toml", overrides));
  } catch (const worker::ConfigError& e) {
    for (const worker::ConfigIssue& i : e.issues())
      if (i.key == key) return i;
    ADD_FAILURE() << "no issue names " << key << ":\n" << e.what();
    return {};
  }
  ADD_FAILURE() << "accepted; expected an issue naming " << key;
  return {};
}

// N of a tied gpt2 model (V, T, C, L): wte V·C, wpe T·C, per layer 12C² + 13C, ln_f 2C.
int64_t gpt2_parameters(int64_t V, int64_t T, int64_t C, int64_t L) { return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C; }

TEST(StudyRecipe, Parses) {
  const Recipe r = parse_recipe_text(kStudyRecipeText, "s.toml");
  const StudyConfig& s = r.study;
  ASSERT_TRUE(s.present);
  EXPECT_EQ(s.line, 16);
  EXPECT_EQ(s.baseline, "adamw");
  EXPECT_EQ(s.lr_grid, (std::vector<double>{0.5, 1.0, 2.0}));
  EXPECT_EQ(s.lr_scale, LrScale::width);
  EXPECT_EQ(s.seeds, 2);
  EXPECT_DOUBLE_EQ(s.tokens_per_parameter, 20);
  ASSERT_EQ(s.sizes.size(), 3u);
  ASSERT_EQ(s.sizes[1].keys.size(), 2u);
  EXPECT_EQ(s.sizes[1].keys[0].key, "model.d_model");
  EXPECT_EQ(s.sizes[1].keys[0].line, 25);
  EXPECT_EQ(s.sizes[1].keys[1].key, "model.n_head");
  ASSERT_EQ(s.arms.size(), 3u);
  EXPECT_EQ(s.arms[0].name, "adamw") << "an unnamed arm takes its optimizer's name";
  EXPECT_EQ(s.arms[1].name, "muon5");
  EXPECT_EQ(s.arms[2].name, "muon3");
  EXPECT_EQ(s.arms[1].keys.size(), 4u);  // name is the arm's, not a key
  EXPECT_EQ(sweep_size(r), 3 * 3 * 3 * 2);
}

TEST(StudyRecipe, ExpandsInGridOrderWithStepsLrAndSeeds) {
  const Recipe r = parse_recipe_text(kStudyRecipeText, "s.toml");
  const std::vector<TrialSpec> trials = expand_sweep(r);
  ASSERT_EQ(trials.size(), 54u);
  // Grid order: size (slowest), arm, lr factor, seed (fastest).
  EXPECT_EQ(trials[0].label, "study.size=0 study.arm=adamw study.lr_factor=0.5 study.seed=0");
  EXPECT_EQ(trials[1].label, "study.size=0 study.arm=adamw study.lr_factor=0.5 study.seed=1");
  EXPECT_EQ(trials[2].label, "study.size=0 study.arm=adamw study.lr_factor=1 study.seed=0");
  EXPECT_EQ(trials[6].label, "study.size=0 study.arm=muon5 study.lr_factor=0.5 study.seed=0");
  EXPECT_EQ(trials[53].label, "study.size=2 study.arm=muon3 study.lr_factor=2 study.seed=1");
  EXPECT_EQ(trials[19].params, (nlohmann::json{{"study.arm", "adamw"}, {"study.size", 1}, {"study.lr_factor", 0.5},
                                               {"study.seed", 1}}));
  for (size_t i = 0; i < trials.size(); ++i) EXPECT_EQ(trials[i].index, static_cast<int64_t>(i));

  // steps = ceil(20 · N / (3 · 32)), N by hand: 24C² + 316C for L = 2, T = 32, V = 256.
  const int64_t widths[3] = {32, 64, 128};
  const int64_t n_by_hand[3] = {34688, 118528, 433664};
  const int64_t steps_by_hand[3] = {7227, 24694, 90347};  // 693760 / 96, 2370560 / 96, 8673280 / 96, rounded up
  for (int z = 0; z < 3; ++z) {
    EXPECT_EQ(gpt2_parameters(256, 32, widths[z], 2), n_by_hand[z]);
    EXPECT_EQ(worker::estimate_memory(trials[18 * z].config).parameters, n_by_hand[z]);
    for (int k = 0; k < 18; ++k) {
      const worker::TrialConfig& c = trials[18 * z + k].config;
      EXPECT_EQ(c.model.d_model, widths[z]);
      EXPECT_EQ(c.train.steps, steps_by_hand[z]) << "size " << z;
      EXPECT_EQ(c.train.seed, 7 + k % 2);
    }
  }
  EXPECT_NE(trials[0].config_toml.find("steps = 7227\n"), std::string::npos);
  EXPECT_EQ(trials[6].config.optimizer.name, "muon");
  EXPECT_EQ(trials[6].config.optimizer.muon.ns_steps, 5);
  EXPECT_EQ(trials[12].config.optimizer.muon.ns_steps, 3);
}

TEST(StudyRecipe, LearningRatesFollowTheFactorAndTheWidth) {
  const std::vector<TrialSpec> trials = expand_sweep(parse_recipe_text(kStudyRecipeText, "s.toml"));
  auto at = [&](int size, int arm, int factor) -> const worker::OptimizerConfig& {
    return trials[static_cast<size_t>(18 * size + 6 * arm + 2 * factor)].config.optimizer;
  };
  // lr = centre × factor × d_model(size 0) / d_model: 32/32, 32/64, 32/128.
  EXPECT_DOUBLE_EQ(at(0, 0, 1).lr, 3e-3);  // adamw's centre: [optimizer] lr
  EXPECT_DOUBLE_EQ(at(0, 0, 0).lr, 1.5e-3);
  EXPECT_DOUBLE_EQ(at(2, 0, 2).lr, 3e-3 * 2 * 0.25);
  EXPECT_DOUBLE_EQ(at(2, 0, 2).adamw.lr, 0) << "0 means optimizer.lr: it follows it unscaled";
  EXPECT_DOUBLE_EQ(at(1, 1, 0).lr, 0.02 * 0.5 * 0.5);
  EXPECT_DOUBLE_EQ(at(1, 1, 0).adamw.lr, 3e-3 * 0.5 * 0.5);
  EXPECT_DOUBLE_EQ(at(2, 2, 1).lr, 0.02 * 0.25);

  // lr_scale = "none": the centre at every width.
  const std::vector<TrialSpec> flat =
      expand_sweep(parse_recipe_text(with(kStudyRecipeText, "lr_scale = \"width\"", "lr_scale = \"none\""), "s.toml"));
  EXPECT_DOUBLE_EQ(flat[18 * 2 + 6 + 2 * 2].config.optimizer.lr, 0.02 * 2);
  EXPECT_DOUBLE_EQ(flat[18 * 2 + 6 + 2 * 2].config.optimizer.adamw.lr, 3e-3 * 2);
}

TEST(StudyRecipe, ExplicitTokensAndOverrides) {
  const std::string tokens = with(kStudyRecipeText, "seeds = 2\n", "seeds = 2\ntokens = [960, 1000, 9600]\n");
  const std::vector<TrialSpec> t = expand_sweep(parse_recipe_text(tokens, "s.toml"));
  EXPECT_EQ(t[0].config.train.steps, 10);
  EXPECT_EQ(t[18].config.train.steps, 11);  // ceil(1000 / 96)
  EXPECT_EQ(t[36].config.train.steps, 100);

  const Recipe r = parse_recipe_text(kStudyRecipeText, "s.toml",
                                     {"study.seeds=1", "study.tokens_per_parameter=2", "study.lr_grid=[1.0]"});
  const std::vector<TrialSpec> few = expand_sweep(r);
  ASSERT_EQ(few.size(), 9u);
  EXPECT_EQ(few[0].config.train.steps, (2 * 34688 + 95) / 96);
  EXPECT_EQ(few[0].config.train.seed, 7);
  // The base seed and a centre lr no arm sets are the recipe's to change.
  EXPECT_EQ(expand_sweep(parse_recipe_text(kStudyRecipeText, "s.toml", {"train.seed=100"}))[1].config.train.seed, 101);
}

TEST(StudyRecipe, RefusesTooFewSizesOrArms) {
  worker::ConfigIssue i = study_issue(with(kStudyRecipeText, "[[study.sizes]]\nmodel = {d_model = 128, n_head = 4}\n", ""),
                                      "study.sizes");
  EXPECT_EQ(i.source, "s.toml");
  EXPECT_EQ(i.line, 22);
  EXPECT_TRUE(has_text(i.message, "2 size(s): a study needs 3 or more")) << i.message;
  const std::string one_arm = kStudyRecipeText;
  i = study_issue(one_arm.substr(0, one_arm.find("\n[[study.arms]]\nname = \"muon5\"")), "study.arms");
  EXPECT_EQ(i.line, 30);
  EXPECT_TRUE(has_text(i.message, "1 arm(s): a study needs 2 or more")) << i.message;
}

TEST(StudyRecipe, RefusesAMissingUnknownOrAmbiguousBaseline) {
  worker::ConfigIssue i = study_issue(with(kStudyRecipeText, "baseline = \"adamw\"\n", ""), "study.baseline");
  EXPECT_EQ(i.line, 16);
  EXPECT_TRUE(has_text(i.message, "missing")) << i.message;
  i = study_issue(with(kStudyRecipeText, "baseline = \"adamw\"", "baseline = \"adam\""), "study.baseline");
  EXPECT_EQ(i.line, 17);
  EXPECT_TRUE(has_text(i.message, "\"adam\" is not an arm's name (arms: adamw, muon5, muon3)")) << i.message;
  i = study_issue(with(kStudyRecipeText, "name = \"muon3\"", "name = \"muon5\""), "study.arms");
  EXPECT_EQ(i.line, 37);
  EXPECT_TRUE(has_text(i.message, "two arms are named \"muon5\" (also at line 33)")) << i.message;
  i = study_issue(with(kStudyRecipeText, "name = \"muon3\"", "name = \"muon 3\""), "study.arms.name");
  EXPECT_EQ(i.line, 38);
}

TEST(StudyRecipe, RefusesKeysThatAreNotRecipeKeys) {
  worker::ConfigIssue i = study_issue(with(kStudyRecipeText, "{name = \"adamw\"}", "{nmae = \"adamw\"}"), "optimizer.nmae");
  EXPECT_EQ(i.line, 31);
  EXPECT_TRUE(has_text(i.message, "in study arm 0: unknown key (did you mean optimizer.name?)")) << i.message;
  i = study_issue(with(kStudyRecipeText, "{d_model = 32, n_head = 2}", "{d_modle = 32, n_head = 2}"), "model.d_modle");
  EXPECT_EQ(i.line, 23);
  EXPECT_TRUE(has_text(i.message, "in study size 0: unknown key (did you mean model.d_model?)")) << i.message;
  i = study_issue(with(kStudyRecipeText, "seeds = 2", "seed = 2"), "study.seed");
  EXPECT_EQ(i.line, 20);
  EXPECT_TRUE(has_text(i.message, "did you mean study.seeds?")) << i.message;
  i = study_issue(with(kStudyRecipeText, "optimizer.lr = 0.02", "optimizer.lr = \"fast\""), "optimizer.lr");
  EXPECT_EQ(i.line, 40);
  EXPECT_TRUE(has_text(i.message, "in study arm \"muon3\": expected number, got a string")) << i.message;
}

TEST(StudyRecipe, RefusesASizeThatBreaksAModelRule) {
  worker::ConfigIssue i = study_issue(with(kStudyRecipeText, "{d_model = 128, n_head = 4}", "{d_model = 128, n_head = 3}"),
                                      "model.n_head");
  EXPECT_EQ(i.line, 28);
  EXPECT_TRUE(has_text(i.message, "invalid combination in study size 2 (model.d_model=128 model.n_head=3)")) << i.message;
  try {
    expand_sweep(parse_recipe_text(with(kStudyRecipeText, "{d_model = 128, n_head = 4}", "{d_model = 128, n_head = 3}"),
                                   "s.toml"));
  } catch (const worker::ConfigError& e) {
    EXPECT_EQ(e.issues().size(), 1u) << "one problem, reported once:\n" << e.what();
  }
  // Listed largest first, the ladder is refused: the fit's largest size is the last.
  i = study_issue(with(kStudyRecipeText, "model = {d_model = 32, n_head = 2}", "model = {d_model = 256, n_head = 2}"),
                  "study.sizes");
  EXPECT_EQ(i.line, 24);
  EXPECT_TRUE(has_text(i.message, "list the sizes from smallest to largest")) << i.message;
  // A warm-up longer than a size's derived steps breaks the worker's rule there.
  i = study_issue(with(kStudyRecipeText, "lr = 3e-3\n", "lr = 3e-3\nwarmup_steps = 10000\n"), "optimizer.warmup_steps");
  EXPECT_TRUE(has_text(i.message, "study size 0")) << i.message;
}

TEST(StudyRecipe, RefusesBadLrGridsAndTokenBudgets) {
  worker::ConfigIssue i = study_issue(with(kStudyRecipeText, "lr_grid = [0.5, 1.0, 2.0]", "lr_grid = []"), "study.lr_grid");
  EXPECT_EQ(i.line, 18);
  EXPECT_TRUE(has_text(i.message, "empty list")) << i.message;
  i = study_issue(with(kStudyRecipeText, "lr_grid = [0.5, 1.0, 2.0]", "lr_grid = [0.5, 0]"), "study.lr_grid");
  EXPECT_TRUE(has_text(i.message, "expected positive numbers, got 0")) << i.message;
  i = study_issue(with(kStudyRecipeText, "lr_grid = [0.5, 1.0, 2.0]", "lr_grid = [1, 1.0]"), "study.lr_grid");
  EXPECT_TRUE(has_text(i.message, "listed twice")) << i.message;
  i = study_issue(with(kStudyRecipeText, "seeds = 2\n", "seeds = 2\ntokens = [1e6, 2e6, 4e6]\ntokens_per_parameter = 10\n"),
                  "study.tokens");
  EXPECT_EQ(i.line, 21);
  EXPECT_TRUE(has_text(i.message, "not both")) << i.message;
  i = study_issue(with(kStudyRecipeText, "seeds = 2\n", "seeds = 2\ntokens = [1e6, 2e6]\n"), "study.tokens");
  EXPECT_TRUE(has_text(i.message, "2 token budgets for 3 sizes")) << i.message;
  i = study_issue(with(kStudyRecipeText, "seeds = 2", "seeds = 0"), "study.seeds");
  EXPECT_EQ(i.line, 20);
}

TEST(StudyRecipe, RefusesWhatTheStudyDerivesOrASweepBesideIt) {
  worker::ConfigIssue i = study_issue(with(kStudyRecipeText, "seed = 7\n", "seed = 7\nsteps = 100\n"), "train.steps");
  EXPECT_EQ(i.line, 12);
  EXPECT_TRUE(has_text(i.message, "derives train.steps")) << i.message;
  i = study_issue(with(kStudyRecipeText, "optimizer = {name = \"adamw\"}", "optimizer = {name = \"adamw\"}\ntrain.steps = 5"),
                  "train.steps");
  EXPECT_EQ(i.line, 32);
  i = study_issue(with(kStudyRecipeText, "optimizer = {name = \"adamw\"}", "optimizer = {name = \"adamw\"}\ntrain.seed = 5"),
                  "train.seed");
  EXPECT_TRUE(has_text(i.message, "in study arm 0: a study sets train.seed")) << i.message;
  i = study_issue(std::string(kStudyRecipeText) + "\n[sweep.parameters]\n\"optimizer.lr\" = [1e-3, 2e-3]\n", "study");
  EXPECT_EQ(i.line, 16);
  EXPECT_TRUE(has_text(i.message, "[study] and [sweep.parameters] (s.toml:44) do not combine")) << i.message;
  i = study_issue(std::string(kStudyRecipeText) + "\n[[sweep.grid]]\n\"optimizer.lr\" = [1e-3]\n", "study");
  EXPECT_TRUE(has_text(i.message, "[[sweep.grid]]")) << i.message;
  i = study_issue(with(kStudyRecipeText, "optimizer.muon.ns_steps = 3", "optimizer.muon.ns_steps = 3\nmodel.d_model = 48"),
                  "model.d_model");
  EXPECT_EQ(i.line, 42);
  EXPECT_TRUE(has_text(i.message, "set by arm \"muon3\" and by study size 0 (line 23)")) << i.message;
  i = study_issue(kStudyRecipeText, "model.d_model", {"model.d_model=48"});
  EXPECT_EQ(i.source, "--set");
  EXPECT_TRUE(has_text(i.message, "the study sets this key in study size 0 (line 23)")) << i.message;
  i = study_issue(kStudyRecipeText, "train.steps", {"train.steps=10"});
  EXPECT_TRUE(has_text(i.message, "--set study.tokens_per_parameter")) << i.message;
  i = study_issue(kStudyRecipeText, "study.sizes", {"study.sizes=[]"});
  EXPECT_TRUE(has_text(i.message, "edit the recipe")) << i.message;
}

TEST(StudyRecipe, KeysAreListed) {
  const std::string table = recipe_key_table();
  for (const std::string& k : study_key_names()) EXPECT_TRUE(has_text(table, "\n" + k + " ")) << k;
  EXPECT_TRUE(has_text(table, "lr ∝ 1/d_model"));
}

// The report on a seeded store: losses L = (E + A (k C)^-alpha) · penalty(lr) · seed offset, with
// k = 1 for AdamW and 2 for Muon (Muon's multiplier is 2), the lr penalty smallest at a factor
// that differs per cell, Muon's compute 1.1× the model's FLOPs (optimizer FLOPs in compute_flops),
// AdamW's only the model's (flops).
class StudyReportTest : public testing::StoreTest {
 protected:
  std::map<std::pair<std::string, int>, double> best_factor_ = {
      {{"adamw", 0}, 1.0}, {{"adamw", 1}, 1.0}, {{"adamw", 2}, 0.5},
      {{"muon", 0}, 2.0},  {{"muon", 1}, 1.0},  {{"muon", 2}, 1.0}};

  testing::SeededMetrics curve(const testing::SeedCell& c) const {
    const bool muon = c.arm == "muon";
    const double compute = muon ? 1.1 * c.model_flops : c.model_flops;
    const double best = best_factor_.at({c.arm, c.size});
    const double penalty = 1 + 0.1 * std::pow(std::log2(c.lr_factor) - std::log2(best), 2);
    const double offset = c.seed == 0 ? -0.004 : 0.004;
    const double loss = (1.8 + 2000 * std::pow((muon ? 2 : 1) * compute, -0.3)) * penalty * std::exp(offset);
    return {loss, c.model_flops, muon ? compute : 0};
  }
};

TEST_F(StudyReportTest, PicksEachCellsBestLrAndFitsItsSeeds) {
  Store store(path_);
  const testing::SeededStudy seeded =
      testing::seed_study(store, testing::kSeededStudyRecipe, [&](const testing::SeedCell& c) { return curve(c); });
  const study::StudyReport r = study::build_study_report(store, seeded.experiment);
  EXPECT_EQ(r.baseline, "adamw");
  EXPECT_EQ(r.arms, (std::vector<std::string>{"adamw", "muon"}));
  EXPECT_TRUE(r.complete);
  ASSERT_EQ(r.points.size(), 36u);
  std::vector<study::Point> direct;
  for (const study::StudyPoint& p : r.points) {
    const bool expected = p.lr_factor == best_factor_.at({p.arm, p.size});
    EXPECT_EQ(p.winner, expected) << p.arm << " size " << p.size << " lr ×" << p.lr_factor;
    if (expected) direct.push_back({p.arm, p.size, p.seed, p.compute, p.loss, ""});
  }
  ASSERT_EQ(direct.size(), 12u);
  // The same points fitted directly give the same multiplier and interval.
  const study::FitResult fit = study::fit_compute_multiplier(direct, "adamw");
  ASSERT_TRUE(fit.ok) << fit.reason;
  ASSERT_TRUE(r.fit.ok) << r.reason;
  ASSERT_EQ(r.fit.arms.size(), 2u);
  EXPECT_NEAR(r.fit.arms[1].multiplier, fit.arms[1].multiplier, 1e-9 * fit.arms[1].multiplier);
  EXPECT_NEAR(r.fit.arms[1].lo, fit.arms[1].lo, 1e-6 * fit.arms[1].lo);
  EXPECT_NEAR(r.fit.arms[1].hi, fit.arms[1].hi, 1e-6 * fit.arms[1].hi);
  EXPECT_NEAR(r.fit.arms[1].multiplier, 2.0, 0.05);
  EXPECT_LE(r.fit.arms[1].lo, 2.0);
  EXPECT_GE(r.fit.arms[1].hi, 2.0);
  std::printf("study report: muon %.4f [%.4f, %.4f]\n", r.fit.arms[1].multiplier, r.fit.arms[1].lo, r.fit.arms[1].hi);

  // Each size: its model, its tokens, Muon the compute-optimal arm at its own mean compute.
  ASSERT_EQ(r.sizes.size(), 3u);
  const worker::TrialConfig& c0 = seeded.specs[0].config;
  EXPECT_EQ(r.sizes[0].params, worker::estimate_memory(c0).parameters);
  EXPECT_DOUBLE_EQ(r.sizes[0].tokens, static_cast<double>(c0.train.steps * 2 * 16));
  for (const study::StudySize& z : r.sizes) EXPECT_EQ(z.winner, "muon") << z.size;
  // Compute: compute_flops where reported, else flops (with a warning); device-seconds from step_seconds.
  const study::StudyPoint& first = r.points[0];
  const int64_t steps = c0.train.steps;
  const double model_flops = 6.0 * static_cast<double>(r.sizes[0].params) * r.sizes[0].tokens;
  EXPECT_DOUBLE_EQ(first.compute, model_flops);
  EXPECT_EQ(r.points[6].arm, "muon");
  EXPECT_DOUBLE_EQ(r.points[6].compute, 1.1 * model_flops);
  EXPECT_NEAR(first.device_seconds, 0.01 * static_cast<double>(steps), 1e-9);
  bool fallback = false;
  for (const std::string& w : r.warnings) fallback |= has_text(w, "18 trial(s) report no compute_flops");
  EXPECT_TRUE(fallback);
  bool edge = false;  // adamw's best factor at size 2 and muon's at size 0 are the grid's ends
  for (const std::string& w : r.warnings) edge |= has_text(w, "adamw at size 2 (×0.5), muon at size 0 (×2)");
  EXPECT_TRUE(edge);

  const nlohmann::json j = study::study_report(store, seeded.experiment);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"E", "arms", "baseline", "complete", "experiment", "name", "ok", "points",
                                            "reason", "sizes", "warnings"}));
  EXPECT_EQ(j["experiment"], seeded.experiment);
  EXPECT_EQ(j["name"], "tiny-study");
  EXPECT_EQ(j["arms"][1]["arm"], "muon");
  EXPECT_DOUBLE_EQ(j["E"].get<double>(), r.fit.E);
  std::vector<std::string> point_keys;
  for (const auto& [k, v] : j["points"][0].items()) point_keys.push_back(k);
  EXPECT_EQ(point_keys, (std::vector<std::string>{"arm", "compute", "device_seconds", "loss", "lr", "lr_factor", "seed",
                                                  "size", "trial", "winner"}));
  EXPECT_EQ(j["points"][0]["trial"], seeded.trials[0].id);
  EXPECT_DOUBLE_EQ(j["points"][0]["lr"].get<double>(), 1e-3 * 0.5);
  EXPECT_EQ(j["sizes"][2]["winner"], "muon");
}

TEST_F(StudyReportTest, AnUnfinishedStudyIsProvisional) {
  Store store(path_);
  const testing::SeededStudy seeded = testing::seed_study(
      store, testing::kSeededStudyRecipe, [&](const testing::SeedCell& c) { return curve(c); }, 2);
  const nlohmann::json j = study::study_report(store, seeded.experiment);
  EXPECT_EQ(j["complete"], false);
  EXPECT_EQ(j["points"].size(), 34u);
  EXPECT_EQ(j["ok"], true) << "the last cell still has its other lr points";
  EXPECT_TRUE(has_text(j["warnings"][0].get<std::string>(), "2 of 36 trials have not finished")) << j["warnings"];

  // Nothing finished: no fit, a reason, every size listed without a winner.
  Store empty(dir_ / "empty.db");
  const testing::SeededStudy none = testing::seed_study(
      empty, testing::kSeededStudyRecipe, [&](const testing::SeedCell& c) { return curve(c); }, 36);
  const nlohmann::json n = study::study_report(empty, none.experiment);
  EXPECT_EQ(n["ok"], false);
  EXPECT_EQ(n["reason"], "no trial of the study has completed yet");
  EXPECT_EQ(n["arms"], nlohmann::json::array());
  EXPECT_TRUE(n["E"].is_null());
  ASSERT_EQ(n["sizes"].size(), 3u);
  EXPECT_TRUE(n["sizes"][0]["winner"].is_null());
}

TEST_F(StudyReportTest, AnExperimentThatIsNotAStudyIsRefused) {
  Store store(path_);
  const int64_t id = testing::one_trial(store);
  const int64_t experiment = store.trial(id)->experiment_id;
  EXPECT_THROW(study::study_report(store, experiment), std::invalid_argument);
  try {
    study::study_report(store, experiment);
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(has_text(e.what(), "is not a study")) << e.what();
  }
}

}  // namespace
}  // namespace precon::orch
