// GET /metrics: the controller's Prometheus registry in the text exposition format 0.0.4. No
// token: scrapers do not carry one, and nothing here is secret beyond what the read-only API
// shows. Values that live in the store are read at scrape time.
#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/service/controller.h"

namespace precon::orch {

void Controller::add_metrics_route() {
  router_->add({"GET", "/metrics", [this](Request&) {
                  metrics_->set_trial_counts(store_->trial_state_counts());
                  metrics_->set_metric_cache_points(store_->metric_cache_points());
                  Response r;
                  r.content_type = ControllerMetrics::kContentType;
                  r.body = metrics_->serialize();
                  r.headers["Cache-Control"] = "no-store";
                  return r;
                }, false, "metrics", nullptr});
}

}  // namespace precon::orch
