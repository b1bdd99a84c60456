// The objectives a stored experiment ranks its trials by: objective.metrics/modes when the recipe
// gave several (kept in the experiment's early_stop_json as "objectives", so the schema stays as
// it is), else its one objective_metric/objective_mode. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/store/store.h"

namespace precon::orch {

struct StoredObjective {
  std::string metric;
  std::string mode;  // "min" | "max"
};

std::vector<StoredObjective> experiment_objectives(const ExperimentRow& experiment);

// The "objectives" entry written into early_stop_json (the scheduler, at submit).
nlohmann::json objectives_json(const std::vector<StoredObjective>& objectives);

}  // namespace precon::orch
