// GET /metrics: the controller's Prometheus registry in the text exposition format 0.0.4. No
// token: scrapers do not carry one, and nothing here is secret beyond what the read-only API
// shows. Values that live in the store are read at scrape time.
#include <chrono>

#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/service/api.h"
#include "orchestrator/service/controller.h"

namespace precon::orch {

Response metrics_page(const Api& api, Request&) {
  ControllerMetrics& metrics = api.controller.metrics();
  metrics.set_trial_counts(api.store.trial_state_counts());
  metrics.set_metric_cache_points(api.store.metric_cache_points());
  const auto blocked = api.store.write_blocked_since();
  metrics.set_store_blocked_seconds(
      blocked ? std::chrono::duration<double>(std::chrono::steady_clock::now() - *blocked).count() : 0.0);
  Response r;
  r.content_type = ControllerMetrics::kContentType;
  r.body = metrics.serialize();
  r.headers["Cache-Control"] = "no-store";
  return r;
}

}  // namespace precon::orch
