// A study experiment in a Store as a finished run leaves it, without training: the recipe is
// expanded as submit does, each trial is marked completed and given the metrics a worker reports
// (val_loss at the end, flops and compute_flops, step_seconds every 10 steps) with values from
// the test's own curves. Shared by the study report's unit and CLI tests.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/store/store.h"
#include "worker/model/memory_estimate.h"

namespace precon::orch::testing {

// A tiny study: gpt2 models of 1 layer at widths 16, 32, 64 (V 256, T 16, B 2), AdamW against Muon,
// lr factors 0.5 / 1 / 2 and two seeds: 3 × 2 × 3 × 2 = 36 trials.
inline const char* kSeededStudyRecipe = R"([experiment]
name = "tiny-study"

[model]
n_layer = 1
seq_len = 16
vocab_size = 256

[train]
batch_size = 2
log_every = 10
seed = 3

[study]
baseline = "adamw"
tokens_per_parameter = 10
lr_grid = [0.5, 1.0, 2.0]
seeds = 2

[[study.sizes]]
model = {d_model = 16, n_head = 2}
[[study.sizes]]
model = {d_model = 32, n_head = 2}
[[study.sizes]]
model = {d_model = 64, n_head = 4}

[[study.arms]]
optimizer = {name = "adamw", lr = 1e-3}

[[study.arms]]
name = "muon"
optimizer = {name = "muon", lr = 0.02, adamw = {lr = 3e-3}}
)";

// What a seeded trial reports: its final val_loss and FLOPs (model FLOPs in `flops`; when
// `compute_flops` > 0, that too), from its cell.
struct SeededMetrics {
  double loss = 0;
  double flops = 0;
  double compute_flops = 0;  // 0: not reported (a worker without optimizer FLOPs)
};

struct SeedCell {
  std::string arm;
  int size = 0;
  double lr_factor = 0;
  int seed = 0;
  double model_flops = 0;  // 6 · parameters · tokens of the trial
};

struct SeededStudy {
  int64_t experiment = 0;
  std::vector<TrialSpec> specs;
  std::vector<TrialRow> trials;  // by index, as stored
};

// Creates the experiment and its trials; all but the last `unfinished` end completed with the
// metrics of `metrics(cell)`. step_seconds is 0.01 at every 10th step and at the last.
inline SeededStudy seed_study(Store& store, const std::string& recipe_text,
                              const std::function<SeededMetrics(const SeedCell&)>& metrics, size_t unfinished = 0) {
  SeededStudy out;
  const Recipe recipe = parse_recipe_text(recipe_text, "study.toml");
  out.specs = expand_sweep(recipe);
  ExperimentRow e;
  e.name = recipe.base.config.experiment.name;
  e.recipe_path = "study.toml";
  e.recipe_text = recipe_text;
  e.overrides_json = "[]";
  e.created_at = 1700000000;
  e.run_root = "/runs/study";
  std::vector<TrialRow> rows;
  for (const TrialSpec& s : out.specs) {
    TrialRow t;
    t.index = s.index;
    t.params_json = s.params.dump();
    t.config_toml = s.config_toml;
    t.created_at = e.created_at;
    rows.push_back(t);
  }
  out.experiment = store.create_experiment(e, rows);
  out.trials = store.trials(out.experiment);
  for (size_t i = 0; i + unfinished < out.trials.size(); ++i) {
    TrialRow& t = out.trials[i];
    const TrialSpec& s = out.specs[i];
    const worker::TrialConfig& c = s.config;
    const double tokens = static_cast<double>(c.train.steps * c.train.batch_size * c.model.seq_len);
    const SeedCell cell{s.params.at("study.arm").get<std::string>(), s.params.at("study.size").get<int>(),
                        s.params.at("study.lr_factor").get<double>(), s.params.at("study.seed").get<int>(),
                        6.0 * static_cast<double>(worker::estimate_memory(c).parameters) * tokens};
    const SeededMetrics m = metrics(cell);
    std::vector<MetricPoint> points;
    for (int64_t step = 10; step < c.train.steps; step += 10) points.push_back({"step_seconds", step, 0.01, 0});
    points.push_back({"step_seconds", c.train.steps, 0.01, 0});
    points.push_back({"flops", c.train.steps, m.flops, 0});
    if (m.compute_flops > 0) points.push_back({"compute_flops", c.train.steps, m.compute_flops, 0});
    points.push_back({"val_loss", c.train.steps, m.loss, 0});
    store.insert_metrics(t.id, points);
    t.state = TrialState::completed;
    t.started_at = e.created_at + 1;
    t.ended_at = e.created_at + 2;
    store.update_trial(t);
  }
  out.trials = store.trials(out.experiment);
  return out;
}

}  // namespace precon::orch::testing
