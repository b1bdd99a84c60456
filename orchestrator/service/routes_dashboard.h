// Routes that shape stored data for the web dashboard (web/): overviews with best objectives,
// a trial table with the latest training figures, and many trials' curves on one shared x grid
// in one request. Read-only; the general API stays in routes.cpp. Thread-safety: the handlers
// only read the store, which is safe from any thread.
#pragma once

#include <nlohmann/json.hpp>

#include "orchestrator/http/router.h"
#include "orchestrator/store/store.h"

namespace precon::orch {

void add_dashboard_routes(Router& router, const Store& store);

// The experiment the route's {id} names; HttpError 404 when there is none.
ExperimentRow experiment_or_404(const Store& store, const Request& req);

// {"name", "x": "step"|"time", "grid": [x...], "trials": [{"id", "values": [v|null per x]}]}.
// Each trial's series (downsampled keeping extremes) is binned onto `points` bins of a grid
// shared by all trials: steps, or seconds since the trial started. A bin's value is the mean
// of the trial's points in it; bins empty for every trial are left out of the grid.
nlohmann::json experiment_curves_json(const Store& store, const std::vector<TrialRow>& trials,
                                      const std::string& name, bool by_time, size_t points);

}  // namespace precon::orch
