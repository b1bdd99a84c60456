// The controller's HTTP API: what its handlers share (Api) and the handlers, one named function
// per route. routes.cpp lists them in one table with their method, pattern, access and cost.
// Thread-safety: handlers run on the io threads and the server's worker pool at once; they read
// the store (safe from any thread) and post changes to the scheduler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "orchestrator/http/router.h"
#include "orchestrator/store/store.h"

namespace precon::orch {

class BestCache;
class Controller;
class ReportLimits;

struct Api {
  Controller& controller;  // its scheduler exists once it started, before the server answers
  Store& store;
  ReportLimits& limits;
  BestCache& best;
};

using ApiHandler = Response (*)(const Api&, Request&);

// routes.cpp: the general API.
Response healthz(const Api& api, Request& req);
Response experiments_list(const Api& api, Request& req);
Response experiments_submit(const Api& api, Request& req);
Response experiment_show(const Api& api, Request& req);
Response experiment_cancel(const Api& api, Request& req);
Response experiment_trials(const Api& api, Request& req);
Response experiment_best(const Api& api, Request& req);
Response experiment_study(const Api& api, Request& req);
Response experiment_importance(const Api& api, Request& req);
Response trial_show(const Api& api, Request& req);
Response trial_metrics(const Api& api, Request& req);
Response trial_logs(const Api& api, Request& req);
Response trial_cancel(const Api& api, Request& req);
Response events(const Api& api, Request& req);
Response report(const Api& api, Request& req);
bool report_authorize(const Request& req);  // the router's check before the body: a token at all
// routes_dashboard.cpp: views shaped for web/.
Response dashboard_experiments(const Api& api, Request& req);
Response dashboard_experiment(const Api& api, Request& req);
Response dashboard_curves(const Api& api, Request& req);
// prometheus_route.cpp.
Response metrics_page(const Api& api, Request& req);

// A page of a long list: `?limit=N&cursor=C`. limit from 1 to max_limit (default_limit when
// absent); the cursor is the next_cursor a previous page gave (0 when absent: the first page).
// HttpError 400 bad_param saying what is allowed otherwise.
struct PageParams {
  size_t limit = 0;
  int64_t cursor = 0;
};
constexpr size_t kDefaultPage = 1000;
constexpr size_t kMaxPage = 5000;
PageParams page_params(const Request& req, size_t default_limit = kDefaultPage, size_t max_limit = kMaxPage);

// Whether the request sees the host's view (absolute paths, recipe and config texts): a reader
// with the read or admin token, or one on this machine (a loopback peer). Anyone else, which
// only --public-reads on an address other machines reach lets in, sees remote_view's (views.h).
bool host_view(const Request& req);
// json_response of the view, through remote_view (views.h) unless host_view.
Response view_response(const Request& req, nlohmann::json view);

}  // namespace precon::orch
