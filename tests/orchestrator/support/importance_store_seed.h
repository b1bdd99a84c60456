// A finished random sweep in a Store, without running anything: 60 trials of a command recipe
// over lr (log-uniform), opt (a list) and unused (uniform), whose val_loss depends on lr much,
// on opt a little and on unused not at all; trial 58 ends with a NaN loss and trial 59 stays
// pending. Shared by the importance report's unit, CLI and route tests.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/store/store.h"

namespace precon::orch::testing {

inline const char* kImportanceSweepRecipe =
    "[experiment]\nname = \"imp\"\n[trial]\ncommand = [\"prog\", \"{lr}\", \"{opt}\", \"{unused}\"]\n"
    "[sweep]\nmethod = \"random\"\nsamples = 60\nseed = 9\n[sweep.parameters]\n"
    "lr = { log_uniform = [1e-3, 1e-1] }\nopt = [\"adamw\", \"muon\", \"soap\"]\nunused = { uniform = [0, 1] }\n";

// Creates the experiment; returns its id.
inline int64_t seed_importance_sweep(Store& store, const std::string& run_root) {
  const Recipe recipe = parse_recipe_text(kImportanceSweepRecipe, "imp.toml");
  ExperimentRow e;
  e.name = "imp";
  e.recipe_path = "imp.toml";
  e.recipe_text = kImportanceSweepRecipe;
  e.overrides_json = "[]";
  e.run_root = run_root;
  std::vector<TrialRow> rows;
  for (const TrialSpec& s : expand_sweep(recipe)) {
    TrialRow t;
    t.index = s.index;
    t.params_json = s.params.dump();
    t.config_toml = s.config_toml;
    rows.push_back(t);
  }
  const int64_t id = store.create_experiment(e, rows);
  for (TrialRow t : store.trials(id)) {
    if (t.index == 59) continue;  // still pending
    const nlohmann::json p = nlohmann::json::parse(t.params_json);
    const double lr = p["lr"];
    const double loss = 2.0 + 100 * (lr - 0.03) * (lr - 0.03) + (p["opt"] == "adamw" ? 0.05 : 0.0);
    store.insert_metrics(t.id, {{"val_loss", 100, t.index == 58 ? std::nan("") : loss, 0}});
    t.state = TrialState::completed;
    store.update_trial(t);
  }
  return id;
}

}  // namespace precon::orch::testing
