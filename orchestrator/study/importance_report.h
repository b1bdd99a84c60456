// `precon importance EXP`: which swept keys mattered for an experiment's objective, by fANOVA
// (importance.h) over its completed trials. The search space is the recipe's: a distribution
// (uniform, log_uniform, int_uniform) is a numeric key on its range, a list of values or a choice
// a categorical one; the keys are those every completed trial has (Optuna's intersection search
// space), the objective each trial's last value of the experiment's metric. Thread-safety: reads
// the store only (any thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/store/store.h"
#include "orchestrator/study/importance.h"

namespace precon::study {

struct ImportanceReport {
  int64_t experiment = 0;
  std::string metric;
  int64_t trials = 0;                      // completed trials with a finite objective and every key
  std::vector<ImportanceParam> params;     // the keys compared, in the recipe's order
  std::vector<ParamImportance> importance; // largest first
  std::vector<std::string> notes;          // keys left out and why
};

// Throws ImportanceError (a sweep without keys, fewer than 2 usable trials, an objective that does
// not vary) and std::out_of_range for an unknown experiment.
ImportanceReport importance_report(const orch::Store& store, int64_t experiment, const ImportanceSettings& settings = {});

nlohmann::json importance_to_json(const ImportanceReport& report);
std::string format_importance_table(const ImportanceReport& report);

}  // namespace precon::study
