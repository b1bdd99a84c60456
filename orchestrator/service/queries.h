// Read-side queries shared by the HTTP handlers and the CLI (which may read the database
// directly): the same answers either way.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "orchestrator/service/best.h"
#include "orchestrator/store/store.h"

namespace precon::orch {

// Experiment by id ("12") or by name (the newest with that name); throws std::out_of_range.
ExperimentRow find_experiment(const Store& store, const std::string& id_or_name);

// `precon best`: rankings at equal steps and equal wall-clock, and the Pareto front.
BestReport best_report(const Store& store, const ExperimentRow& experiment);

// A trial's summary row: state, params, last objective value, steps, seconds per step.
// has_metrics false: the trial is known to have none (Store::trials_with_metrics), nothing is read.
nlohmann::json trial_summary_json(const Store& store, const TrialRow& trial, const ExperimentRow& experiment,
                                  bool has_metrics = true);

// Every metric of a trial (or one), each downsampled to max_points.
nlohmann::json trial_metrics_json(const Store& store, int64_t trial_id, const std::string& name, size_t max_points);

}  // namespace precon::orch
