// Recipe parsing: every table, the [sweep] tables, --set overrides, and each kind of bad input
// with its file, line, key and hint.
#include <gtest/gtest.h>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "tests/orchestrator/support/recipe_failure.h"

namespace precon::orch {
namespace {

using Failure = testing::RecipeFailure;
using testing::contains;

// Parses and expands; the first problem a user would see, or an empty message.
Failure failure_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return testing::recipe_failure(text, "r.toml", overrides);
}

const char* kFullRecipe = R"(# every table of docs/design.md, Recipe TOML
[experiment]
name = "full"
description = "every table"

[model]
n_layer = 2
n_head = 2
d_model = 64
seq_len = 32
vocab_size = 256

[data]
train = "a.bin,b.bin"
val = "v.bin"

[train]
steps = 300
batch_size = 4
seed = 7
eval_every = 25
checkpoint_every = 100
threads = 1

[optimizer]
name = "muon"
lr = 0.02
schedule = "wsd"
warmup_steps = 20

[optimizer.adamw]
lr = 3e-3
beta2 = 0.99

[optimizer.muon]
ns_steps = 6
coefficients = "polar-express"

[optimizer.shampoo]
precondition_frequency = 20

[parallel]
tensor = 1
data = 1

[resources]
executor = "local"
cpus_per_task = 1
setup = ["module load openblas"]

[objective]
metric = "val_loss"
mode = "min"

[sweep]
method = "random"
samples = 12
seed = 3
max_concurrent = 3
max_attempts = 2

[sweep.parameters]
"optimizer.lr" = { log_uniform = [1e-3, 1e-1] }
"optimizer.muon.ns_steps" = [4, 5, 6]
optimizer.muon.momentum = { uniform = [0.85, 0.99] }
"train.batch_size" = { int_uniform = [2, 8] }
"optimizer.muon.scale" = { choice = ["shape", "spectral"] }

[sweep.early_stop]
method = "asha"
min_step = 50
reduction_factor = 2
min_early_stopping_rate = 1
)";

TEST(Recipe, ParsesEveryTable) {
  Recipe r = parse_recipe_text(kFullRecipe, "full.toml");
  const worker::TrialConfig& c = r.base.config;
  EXPECT_EQ(r.source, "full.toml");
  EXPECT_EQ(c.experiment.name, "full");
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.data.train, (std::vector<worker::DataSource>{{"a.bin,b.bin", 1.0}}));
  EXPECT_EQ(c.train.steps, 300);
  EXPECT_EQ(c.optimizer.name, "muon");
  EXPECT_DOUBLE_EQ(c.optimizer.adamw.beta2, 0.99);
  EXPECT_EQ(c.optimizer.muon.coefficients, "polar-express");
  EXPECT_EQ(c.optimizer.shampoo.precondition_frequency, 20);
  EXPECT_EQ(c.resources.setup, std::vector<std::string>{"module load openblas"});
  EXPECT_EQ(r.base.origin.at("optimizer.muon.ns_steps"), "full.toml:36");

  const SweepConfig& s = r.sweep;
  EXPECT_EQ(s.method, "random");
  EXPECT_EQ(s.samples, 12);
  EXPECT_EQ(s.seed, 3);
  EXPECT_EQ(s.max_concurrent, 3);
  EXPECT_EQ(s.max_attempts, 2);
  // In the order of the file (toml++ itself orders tables by key), dotted keys flattened.
  ASSERT_EQ(s.parameters.size(), 5u);
  EXPECT_EQ(s.parameters[0].key, "optimizer.lr");
  EXPECT_EQ(s.parameters[0].kind, SweepKind::log_uniform);
  EXPECT_EQ(s.parameters[0].line, 63);
  EXPECT_DOUBLE_EQ(s.parameters[0].lo, 1e-3);
  EXPECT_DOUBLE_EQ(s.parameters[0].hi, 1e-1);
  EXPECT_EQ(s.parameters[1].key, "optimizer.muon.ns_steps");
  EXPECT_EQ(s.parameters[1].kind, SweepKind::values);
  EXPECT_EQ(s.parameters[1].values.size(), 3u);
  EXPECT_EQ(s.parameters[2].key, "optimizer.muon.momentum");
  EXPECT_EQ(s.parameters[2].kind, SweepKind::uniform);
  EXPECT_EQ(s.parameters[3].kind, SweepKind::int_uniform);
  EXPECT_EQ(s.parameters[4].kind, SweepKind::choice);
  EXPECT_TRUE(s.grids.empty());
  EXPECT_EQ(s.early_stop.method, "asha");
  EXPECT_EQ(s.early_stop.min_step, 50);
  EXPECT_EQ(s.early_stop.reduction_factor, 2);
  EXPECT_EQ(s.early_stop.min_early_stopping_rate, 1);
  EXPECT_EQ(s.early_stop.metric, "val_loss");  // from [objective]
  EXPECT_EQ(s.early_stop.mode, "min");
  EXPECT_EQ(expand_sweep(r).size(), 12u);
}

TEST(Recipe, WithoutSweepIsOneTrial) {
  Recipe r = parse_recipe_text("[train]\nsteps = 20\n[objective]\nmetric = \"train_loss\"\nmode = \"min\"\n", "r.toml");
  EXPECT_TRUE(r.sweep.parameters.empty());
  EXPECT_EQ(r.sweep.early_stop.method, "none");
  EXPECT_EQ(r.sweep.early_stop.metric, "train_loss");
  auto trials = expand_sweep(r);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].label, "");
  EXPECT_TRUE(trials[0].params.empty());
  EXPECT_EQ(trials[0].config.train.steps, 20);
  EXPECT_EQ(sweep_size(r), 1);
}

TEST(Recipe, OverridesReachTrialAndSweepKeys) {
  Recipe r = parse_recipe_text(kFullRecipe, "full.toml",
                               {"train.steps=500", "optimizer.schedule=cosine", "sweep.max_concurrent=4",
                                "sweep.samples = 20", "sweep.early_stop.method=median", "sweep.early_stop.metric=train_loss",
                                "sweep.parameters.optimizer.lr={ uniform = [0.01, 0.03] }",
                                "sweep.parameters.optimizer.weight_decay=[0, 0.1]"});
  EXPECT_EQ(r.base.config.train.steps, 500);
  EXPECT_EQ(r.base.config.optimizer.schedule, "cosine");
  EXPECT_EQ(r.sweep.max_concurrent, 4);
  EXPECT_EQ(r.sweep.samples, 20);
  EXPECT_EQ(r.sweep.early_stop.method, "median");
  EXPECT_EQ(r.sweep.early_stop.metric, "train_loss");
  ASSERT_EQ(r.sweep.parameters.size(), 6u);
  EXPECT_EQ(r.sweep.parameters[0].key, "optimizer.lr");  // replaced in place
  EXPECT_EQ(r.sweep.parameters[0].kind, SweepKind::uniform);
  EXPECT_EQ(r.sweep.parameters[0].line, 0);
  EXPECT_EQ(r.sweep.parameters[5].key, "optimizer.weight_decay");  // added
  auto trials = expand_sweep(r);
  ASSERT_EQ(trials.size(), 20u);
  for (const TrialSpec& t : trials) {
    EXPECT_EQ(t.config.train.steps, 500);
    EXPECT_GE(t.config.optimizer.lr, 0.01);
    EXPECT_LE(t.config.optimizer.lr, 0.03);
  }

  Failure f = failure_of(kFullRecipe, {"optimizer.muon.ns_steps=5"});
  EXPECT_TRUE(contains(f.message, "--set: optimizer.muon.ns_steps: this key is swept (r.toml:64)")) << f.message;
  EXPECT_TRUE(contains(f.message, "sweep.parameters.optimizer.muon.ns_steps=[...]")) << f.message;
  f = failure_of(kFullRecipe, {"sweep.max_concurent=4"});
  EXPECT_TRUE(contains(f.message, "--set: sweep.max_concurent: unknown key (did you mean sweep.max_concurrent?)"))
      << f.message;
  f = failure_of(kFullRecipe, {"sweep.samples=many"});
  EXPECT_TRUE(contains(f.message, "--set: sweep.samples: expected integer, got a string")) << f.message;
  f = failure_of(kFullRecipe, {"train.stepz=5"});
  EXPECT_TRUE(contains(f.message, "did you mean train.steps")) << f.message;
  f = failure_of(kFullRecipe, {"sweep.parameters.optimizer.muon.ns_steps=[5, \"six\"]"});
  EXPECT_TRUE(contains(f.message, "--set: optimizer.muon.ns_steps: expected integer, got a string")) << f.message;
}

TEST(Recipe, KeyTableDocumentsSweepKeys) {
  const std::string table = recipe_key_table();
  for (const std::string& k : sweep_key_names()) EXPECT_TRUE(contains(table, k)) << k;
  EXPECT_TRUE(contains(table, "optimizer.muon.ns_steps"));
  EXPECT_TRUE(contains(table, "sweep.early_stop.reduction_factor"));
  EXPECT_TRUE(contains(table, "log_uniform"));
  // Same layout as the worker's rows: the description column starts at the same place.
  const size_t header_desc = table.find("description");
  const size_t row = table.find("\nsweep.method");
  ASSERT_NE(row, std::string::npos);
  EXPECT_EQ(table.find("grid: every", row) - (row + 1), header_desc);
}

TEST(RecipeErrors, MalformedTomlNamesTheLine) {
  Failure f = failure_of("[model]\nn_layer = 2\n[sweep\nmethod = \"grid\"\n");
  EXPECT_EQ(f.line, 3) << f.message;
  EXPECT_TRUE(contains(f.message, "r.toml:3: TOML syntax error")) << f.message;
  f = failure_of("[sweep.parameters]\n\"optimizer.lr\" = [1e-3, 2e-3\n");
  EXPECT_TRUE(contains(f.message, "TOML syntax error")) << f.message;
}

TEST(RecipeErrors, UnknownKeysSuggestTheClosest) {
  Failure f = failure_of("[trian]\nsteps = 5\n");
  EXPECT_TRUE(contains(f.message, "r.toml:2: trian.steps: unknown key (did you mean train.steps?)")) << f.message;
  f = failure_of("[sweep]\nmax_concurent = 2\n[sweep.parameters]\n\"train.seed\" = [1, 2]\n");
  EXPECT_TRUE(contains(f.message, "r.toml:2: sweep.max_concurent: unknown key (did you mean sweep.max_concurrent?)"))
      << f.message;
  f = failure_of("[sweep.parameters]\n\"train.seed\" = [1]\n[sweep.early_stop]\nmethod = \"asha\"\nmin_stp = 10\n");
  EXPECT_EQ(f.line, 5);
  EXPECT_TRUE(contains(f.message, "did you mean sweep.early_stop.min_step?")) << f.message;
  f = failure_of("[sweeps]\nmethod = \"grid\"\n");
  EXPECT_TRUE(contains(f.message, "did you mean sweep.method?")) << f.message;
}

TEST(RecipeErrors, WrongTypesAndRanges) {
  Failure f = failure_of("[model]\nn_layer = \"four\"\n");
  EXPECT_TRUE(contains(f.message, "r.toml:2: model.n_layer: expected integer, got a string")) << f.message;
  f = failure_of("[sweep]\nsamples = \"many\"\n[sweep.parameters]\n\"train.seed\" = [1]\n");
  EXPECT_TRUE(contains(f.message, "r.toml:2: sweep.samples: expected integer, got a string")) << f.message;
  f = failure_of("[sweep]\nmax_concurrent = 0\n[sweep.parameters]\n\"train.seed\" = [1]\n");
  EXPECT_TRUE(contains(f.message, "sweep.max_concurrent: value 0 is out of range")) << f.message;
  f = failure_of("[sweep]\nmethod = \"bayes\"\n[sweep.parameters]\n\"train.seed\" = [1]\n");
  EXPECT_TRUE(contains(f.message, "\"bayes\" is not one of \"grid\", \"random\"")) << f.message;
  f = failure_of("[sweep.parameters]\n\"train.seed\" = [1]\n[sweep.early_stop]\nreduction_factor = 1\n");
  EXPECT_TRUE(contains(f.message, "r.toml:4: sweep.early_stop.reduction_factor: value 1 is out of range")) << f.message;
}

TEST(RecipeErrors, SweptValuesAreCheckedAtTheirLine) {
  Failure f = failure_of("[sweep.parameters]\n\"train.seed\" = [1]\n\"optimizer.muon.ns_steps\" = [5, \"six\"]\n");
  EXPECT_EQ(f.line, 3);
  EXPECT_TRUE(contains(f.message, "r.toml:3: optimizer.muon.ns_steps: expected integer, got a string")) << f.message;
  f = failure_of("[sweep.parameters]\n\"model.n_layer\" = [\n  2,\n  0,\n]\n");
  EXPECT_EQ(f.line, 4) << f.message;
  EXPECT_TRUE(contains(f.message, "out of range")) << f.message;
  f = failure_of("[sweep.parameters]\n\"optimizer.name\" = [\"adamw\", \"sgd\"]\n");
  EXPECT_TRUE(contains(f.message, "r.toml:2: optimizer.name: \"sgd\" is not one of")) << f.message;
  f = failure_of("[sweep]\nmethod = \"random\"\n[sweep.parameters]\n\"optimizer.lr\" = { uniform = [-1, 1] }\n");
  EXPECT_TRUE(contains(f.message, "r.toml:4: optimizer.lr: value -1 is out of range")) << f.message;
  f = failure_of("[sweep.parameters]\n\"optimizer.lr\" = 0.01\n");
  EXPECT_TRUE(contains(f.message, "expected a list of values [v, ...] or a distribution table, got a number")) << f.message;
}

TEST(RecipeErrors, UnknownSweptKeySuggestsTheClosest) {
  Failure f = failure_of("[sweep.parameters]\n\"train.seed\" = [1, 2]\n\"optimizer.muon.ns_step\" = [3, 5]\n");
  EXPECT_EQ(f.line, 3);
  EXPECT_TRUE(contains(f.message, "r.toml:3: optimizer.muon.ns_step: cannot sweep an unknown key (did you mean "
                                  "optimizer.muon.ns_steps?)"))
      << f.message;
  f = failure_of("[sweep]\nmethod = \"random\"\n[sweep.parameters]\noptimizer.lrr = { log_uniform = [1e-3, 1e-1] }\n");
  EXPECT_TRUE(contains(f.message, "r.toml:4: optimizer.lrr: cannot sweep an unknown key (did you mean optimizer.lr?)"))
      << f.message;
  f = failure_of("[[sweep.grid]]\n\"optimizer.nam\" = [\"muon\"]\n");
  EXPECT_TRUE(contains(f.message, "did you mean optimizer.name?")) << f.message;
}

TEST(RecipeErrors, EmptySweeps) {
  Failure f = failure_of("[model]\nn_layer = 2\n\n[sweep]\nmethod = \"grid\"\n");
  EXPECT_EQ(f.line, 4);
  EXPECT_TRUE(contains(f.message, "the sweep is empty")) << f.message;
  f = failure_of("[sweep.parameters]\n");
  EXPECT_TRUE(contains(f.message, "the sweep is empty")) << f.message;
  f = failure_of("[sweep.parameters]\n\"train.seed\" = [1]\n\"optimizer.lr\" = []\n");
  EXPECT_TRUE(contains(f.message, "r.toml:3: optimizer.lr: empty list of values")) << f.message;
  f = failure_of("[[sweep.grid]]\n\"train.seed\" = [1]\n[[sweep.grid]]\n");
  EXPECT_TRUE(contains(f.message, "r.toml:3: sweep.grid: this [[sweep.grid]] table is empty")) << f.message;
  f = failure_of("[sweep]\nmethod = \"random\"\n[[sweep.grid]]\n\"train.seed\" = [1]\n[[sweep.grid]]\n[sweep.grid.optimizer]\n");
  EXPECT_TRUE(contains(f.message, "r.toml:5: sweep.grid: this [[sweep.grid]] table is empty")) << f.message;
  f = failure_of("[sweep]\nmethod = \"random\"\n[sweep.parameters]\n\"optimizer.lr\" = { choice = [] }\n");
  EXPECT_TRUE(contains(f.message, "empty list of values")) << f.message;
}

TEST(RecipeErrors, DistributionsOutsideRandomSearch) {
  Failure f = failure_of("[sweep.parameters]\n\"train.seed\" = [1, 2]\n\"optimizer.lr\" = { log_uniform = [1e-4, 1e-2] }\n");
  EXPECT_EQ(f.line, 3);
  EXPECT_TRUE(contains(f.message, "r.toml:3: optimizer.lr: a distribution (log_uniform) needs sweep.method = \"random\""))
      << f.message;
  f = failure_of("[[sweep.grid]]\n\"optimizer.lr\" = { uniform = [1e-4, 1e-2] }\n");
  EXPECT_TRUE(contains(f.message, "r.toml:2: optimizer.lr: a [[sweep.grid]] table takes lists of values")) << f.message;
  f = failure_of("[sweep]\nmethod = \"random\"\n[[sweep.grid]]\n\"train.seed\" = [1]\n");
  EXPECT_TRUE(contains(f.message, "[[sweep.grid]] tables need sweep.method = \"grid\"")) << f.message;
  const std::string random = "[sweep]\nmethod = \"random\"\n[sweep.parameters]\n";
  f = failure_of(random + "\"optimizer.lr\" = { loguniform = [1e-4, 1e-2] }\n");
  EXPECT_TRUE(contains(f.message, "unknown distribution \"loguniform\" (did you mean log_uniform?)")) << f.message;
  f = failure_of(random + "\"optimizer.lr\" = { log_uniform = [0, 1e-2] }\n");
  EXPECT_TRUE(contains(f.message, "log_uniform needs 0 < lo")) << f.message;
  f = failure_of(random + "\"optimizer.lr\" = { uniform = [0.1, 0.01] }\n");
  EXPECT_TRUE(contains(f.message, "lo < hi")) << f.message;
  f = failure_of(random + "\"optimizer.muon.ns_steps\" = { uniform = [1, 10] }\n");
  EXPECT_TRUE(contains(f.message, "uniform draws real numbers but the key is integer; use int_uniform")) << f.message;
  f = failure_of(random + "\"optimizer.muon.ns_steps\" = { int_uniform = [1, 2.5] }\n");
  EXPECT_TRUE(contains(f.message, "int_uniform bounds must be integers")) << f.message;
  f = failure_of(random + "\"optimizer.lr\" = { uniform = [0.1, 0.2], log_uniform = [0.1, 0.2] }\n");
  EXPECT_TRUE(contains(f.message, "a distribution table has one entry")) << f.message;
}

TEST(RecipeErrors, DuplicateKeys) {
  // TOML itself: the same key twice in a table.
  Failure f = failure_of("[sweep.parameters]\n\"train.seed\" = [1]\n\"train.seed\" = [2]\n");
  EXPECT_EQ(f.line, 3) << f.message;
  EXPECT_TRUE(contains(f.message, "TOML syntax error")) << f.message;
  // The same trial key written quoted and dotted.
  f = failure_of("[sweep.parameters]\n\"train.seed\" = [1, 2]\ntrain.seed = [3]\n");
  EXPECT_EQ(f.line, 3) << f.message;
  EXPECT_TRUE(contains(f.message, "r.toml:3: train.seed: duplicate key: swept twice (also at r.toml:2)")) << f.message;
  // In [sweep.parameters] and in a sub-grid.
  f = failure_of("[sweep.parameters]\n\"train.seed\" = [1, 2]\n[[sweep.grid]]\n\"optimizer.name\" = [\"muon\"]\n"
                 "\"train.seed\" = [3]\n");
  EXPECT_EQ(f.line, 5) << f.message;
  EXPECT_TRUE(contains(f.message, "swept both in a [[sweep.grid]] table and in [sweep.parameters] (r.toml:2)"))
      << f.message;
}

TEST(RecipeErrors, InvalidCombinationsNameTheTrial) {
  Failure f = failure_of("[model]\nd_model = 64\n[sweep.parameters]\n\"model.n_head\" = [4, 3]\n\"train.seed\" = [1]\n");
  EXPECT_EQ(f.key, "model.n_head");
  EXPECT_EQ(f.line, 4);
  EXPECT_TRUE(contains(f.message, "r.toml:4: model.n_head: invalid combination in sweep trial 1 "
                                  "(model.n_head=3 train.seed=1): n_head = 3 must divide d_model = 64"))
      << f.message;
  // Without a sweep the base config is checked at parse time.
  f = failure_of("[model]\nd_model = 64\nn_head = 3\n");
  EXPECT_TRUE(contains(f.message, "r.toml:3: model.n_head")) << f.message;
  f = failure_of("[optimizer.muon]\ncoefficients = \"explicit\"\n");
  EXPECT_TRUE(contains(f.message, "coefficient_list")) << f.message;
}

TEST(RecipeErrors, EveryMistakeIsReportedInLineOrder) {
  // Three mistakes in a trial table, the sweep settings and the swept values, and one in --set:
  // all four come back from one parse, the file's in line order, then --set.
  const std::string text =
      "[optimizer.muon]\nns_steps = 0\n"                    // 2: out of range
      "[sweep]\nmax_atempts = 2\n"                          // 4: typo
      "[sweep.parameters]\n\"optimizer.lr\" = [0.1, -1]\n"; // 6: a swept value out of range
  try {
    parse_recipe_text(text, "r.toml", {"train.stpes=3"});
    FAIL() << "accepted";
  } catch (const worker::ConfigError& e) {
    const auto& issues = e.issues();
    ASSERT_EQ(issues.size(), 4u) << e.what();
    EXPECT_EQ(issues[0].line, 2);
    EXPECT_EQ(issues[0].key, "optimizer.muon.ns_steps");
    EXPECT_EQ(issues[1].line, 4);
    EXPECT_TRUE(contains(issues[1].message, "did you mean sweep.max_attempts?")) << issues[1].message;
    EXPECT_EQ(issues[2].line, 6);
    EXPECT_EQ(issues[2].key, "optimizer.lr");
    EXPECT_EQ(issues[3].source, "--set");
    EXPECT_TRUE(contains(issues[3].message, "did you mean train.steps?")) << issues[3].message;
  }
}

TEST(RecipeErrors, EveryTrialThatBreaksARuleIsReported) {
  Failure f = failure_of("[model]\nd_model = 64\n[sweep.parameters]\n\"model.n_head\" = [3, 4, 5]\n");
  EXPECT_TRUE(contains(f.message, "sweep trial 0 (model.n_head=3)")) << f.message;
  EXPECT_TRUE(contains(f.message, "sweep trial 2 (model.n_head=5)")) << f.message;
  EXPECT_FALSE(contains(f.message, "sweep trial 1")) << f.message;
}

TEST(RecipeErrors, SweepSizeHasOneCap) {
  Failure f = failure_of("[sweep]\nmethod = \"random\"\nsamples = 2000000\n[sweep.parameters]\n\"train.seed\" = [1]\n");
  EXPECT_EQ(f.key, "sweep.samples");
  EXPECT_TRUE(contains(f.message, "between 1 and 100000")) << f.message;
}

TEST(RecipeErrors, MissingFileIsAnError) {
  try {
    parse_recipe_file("/nonexistent/recipe.toml");
    FAIL() << "no error";
  } catch (const worker::ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "/nonexistent/recipe.toml: cannot open the file")) << e.what();
  }
}

TEST(RecipeEarlyStop, BohbIsTpeWithHyperbandsBrackets) {
  const std::string text = "[train]\nsteps = 900\n[sweep]\nmethod = \"bohb\"\nsamples = 8\n"
                           "[sweep.parameters]\n\"optimizer.lr\" = { log_uniform = [1e-4, 1e-1] }\n";
  const Recipe r = parse_recipe_text(text, "bohb.toml");
  EXPECT_EQ(sweep_method(r.sweep), SweepMethod::tpe);
  EXPECT_EQ(r.sweep.early_stop.method, "hyperband") << "bohb's early stopping when the recipe names none";
  EXPECT_EQ(expand_sweep(r).size(), 1u) << "TPE makes its trials one at a time";
  // Another rule is refused at its line; so is a first rung past the longest run.
  const Failure asha = testing::recipe_failure(text + "[sweep.early_stop]\nmethod = \"asha\"\n", "bohb.toml");
  EXPECT_EQ(asha.key, "sweep.early_stop.method");
  EXPECT_EQ(asha.line, 9);
  EXPECT_TRUE(contains(asha.message, "Hyperband")) << asha.message;
  const Failure past = testing::recipe_failure(text + "[sweep.early_stop]\nmin_step = 1000\n", "bohb.toml");
  EXPECT_EQ(past.key, "sweep.early_stop.min_step");
  EXPECT_EQ(past.line, 9);
  EXPECT_TRUE(contains(past.message, "the longest train.steps (900)")) << past.message;
  // A swept train.steps: its largest value is the longest run.
  EXPECT_TRUE(testing::recipe_failure(text + "\"train.steps\" = { int_uniform = [100, 2000] }\n[sweep.early_stop]\nmin_step = 1000\n",
                                      "bohb.toml").message.empty());
  const Failure set = testing::recipe_failure(text, "bohb.toml", {"sweep.early_stop.max_step=50"});
  EXPECT_EQ(set.source, "--set");
  EXPECT_TRUE(contains(set.message, "sweep.early_stop.max_step (50)")) << set.message;
  EXPECT_TRUE(testing::recipe_failure(text, "bohb.toml", {"sweep.early_stop.max_step=5000"}).message.empty());
}

TEST(RecipeEarlyStop, HyperbandOnAGridAndATpeKeyOnBohb) {
  const std::string grid = "[train]\nsteps = 300\n[sweep.parameters]\n\"optimizer.lr\" = [0.01, 0.02]\n"
                           "[sweep.early_stop]\nmethod = \"hyperband\"\nmin_step = 10\n";
  const Recipe r = parse_recipe_text(grid, "grid.toml");
  EXPECT_EQ(r.sweep.early_stop.method, "hyperband");
  EXPECT_EQ(expand_sweep(r).size(), 2u);
  // [sweep.tpe] keys work under bohb (its proposals are TPE's).
  EXPECT_TRUE(testing::recipe_failure("[sweep]\nmethod = \"bohb\"\n[sweep.tpe]\nn_startup_trials = 4\n"
                                      "[sweep.parameters]\nx = { uniform = [0, 1] }\n[trial]\ncommand = [\"true\", \"{x}\"]\n",
                                      "b.toml").message.empty());
}

}  // namespace
}  // namespace precon::orch
