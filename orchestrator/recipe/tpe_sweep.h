// sweep.method = "tpe" over a recipe's sweep: the recipe's swept keys as TPE's search space, the
// store's trials as its observations, and the next trial it proposes. [sweep.parameters] are
// searched in every trial; with [[sweep.grid]] tables the table is one more categorical dimension,
// and a table's own keys are searched only among the trials of that table. Pure functions;
// thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/recipe/nsga2.h"
#include "orchestrator/recipe/tpe.h"

namespace precon::orch {

// A trial of the experiment as TPE sees it (failed and cancelled trials are left out by the caller).
struct TpeHistoryTrial {
  nlohmann::json params;  // the trial's params (TrialSpec::params, the store's params_json)
  TpeObservation::State state = TpeObservation::complete;  // pending trials count as running
  double value = 0;       // complete: the objective's last value; pruned: its last value (NaN: none)
  int64_t step = -1;      // pruned: the step of that value (-1: none)
  // Several objectives (objective.metrics), complete trials: each one's last value, in order.
  std::vector<double> values{};
};

// What the proposal was chosen by (`precon recipe suggest`).
struct TpeSuggestion {
  TpeProposal common;   // [sweep.parameters] (and the table, last, with [[sweep.grid]])
  TpeProposal branch;   // the chosen [[sweep.grid]] table's keys (empty without tables)
  int64_t table = -1;   // that table, from 0; -1 without tables
};

// The trial at `index` proposed from `history` (trials in creation order). Deterministic in
// (sweep.seed, index, history). Throws worker::ConfigError when the proposed values break a rule
// of the trial config (as expand_sweep does).
TrialSpec propose_tpe_trial(const Recipe& recipe, int64_t index, const std::vector<TpeHistoryTrial>& history,
                            TpeSuggestion* detail = nullptr);

// sweep.method = "nsga2": the trial at `index` bred by NSGA-II (nsga2.h) from `history`, likewise
// deterministic in (sweep.seed, index, history).
TrialSpec propose_nsga2_trial(const Recipe& recipe, int64_t index, const std::vector<TpeHistoryTrial>& history);

// The trial at `index` proposed by the recipe's method (tpe, bohb or nsga2).
TrialSpec propose_sweep_trial(const Recipe& recipe, int64_t index, const std::vector<TpeHistoryTrial>& history);

}  // namespace precon::orch
