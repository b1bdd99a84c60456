// What the dashboard's routes (api.h: dashboard_*) shape from stored data for web/: overviews with
// best objectives, a trial table with the latest training figures, and many trials' curves on one
// shared x grid in one request. Thread-safety: these only read the store, safe from any thread.
#pragma once

#include <nlohmann/json.hpp>

#include "orchestrator/http/router.h"
#include "orchestrator/store/store.h"

namespace precon::orch {

// The experiment the route's {id} names; HttpError 404 when there is none.
ExperimentRow experiment_or_404(const Store& store, const Request& req);

// {"name", "x": "step"|"time", "grid": [x...], "trials": [{"id", "values": [v|null per x]}]}.
// Each trial's series (downsampled keeping extremes) is binned onto `points` bins of a grid
// shared by all trials: steps, or seconds since the trial started. A bin's value is the mean
// of the trial's points in it; bins empty for every trial are left out of the grid.
nlohmann::json experiment_curves_json(const Store& store, const std::vector<TrialRow>& trials,
                                      const std::string& name, bool by_time, size_t points);

}  // namespace precon::orch
