// The controller's HTTP API: the one route table, then the handlers of the general API (the
// dashboard's are in routes_dashboard.cpp, /metrics in prometheus_route.cpp).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>
#include <stdexcept>

#include "orchestrator/service/api.h"
#include "orchestrator/service/api_bodies.h"
#include "orchestrator/service/controller.h"
#include "orchestrator/service/queries.h"
#include "orchestrator/service/report_limits.h"
#include "orchestrator/service/routes_dashboard.h"
#include "orchestrator/service/views.h"
#include "orchestrator/store/store_pages.h"

namespace precon::orch {

using nlohmann::json;

namespace {

// Who may call a route: anyone; readers (the read or admin token unless reads are public);
// the admin token; a worker with its trial's token (checked by the handler).
enum class Access { kPublic, kRead, kAdmin, kWorker };
// Where it is answered: on the io thread; on the server's worker pool (slow on a big experiment, or
// waiting for the scheduler, which waits for the store); on its writer pool (writes the store).
enum class Cost { kCheap, kSlow, kWrite };

struct ApiRoute {
  const char* method;
  const char* pattern;
  ApiHandler handler;
  Access access;
  Cost cost;
  bool reserved;     // answered even at the connection caps (ServerOptions::reserved_connections)
  const char* name;  // the route label of /metrics
};

// clang-format off
constexpr ApiRoute kApiRoutes[] = {
  // method  pattern                                       handler                access          cost          reserved name
  {"GET",  "/healthz",                                     healthz,               Access::kPublic, Cost::kCheap, true,  "healthz"},
  {"GET",  "/metrics",                                     metrics_page,          Access::kPublic, Cost::kCheap, false, "metrics"},
  {"GET",  "/api/v1/experiments",                          experiments_list,      Access::kRead,   Cost::kCheap, false, "experiments_list"},
  {"POST", "/api/v1/experiments",                          experiments_submit,    Access::kAdmin,  Cost::kSlow,  false, "experiments_submit"},
  {"GET",  "/api/v1/experiments/{id}",                     experiment_show,       Access::kRead,   Cost::kSlow,  false, "experiment_show"},
  {"POST", "/api/v1/experiments/{id}/cancel",              experiment_cancel,     Access::kAdmin,  Cost::kSlow,  false, "experiment_cancel"},
  {"GET",  "/api/v1/experiments/{id}/trials",              experiment_trials,     Access::kRead,   Cost::kSlow,  false, "experiment_trials"},
  {"GET",  "/api/v1/experiments/{id}/best",                experiment_best,       Access::kRead,   Cost::kSlow,  false, "experiment_best"},
  {"GET",  "/api/v1/experiments/{id}/study",               experiment_study,      Access::kRead,   Cost::kSlow,  false, "experiment_study"},
  {"GET",  "/api/v1/experiments/{id}/importance",          experiment_importance, Access::kRead,   Cost::kSlow,  false, "experiment_importance"},
  {"GET",  "/api/v1/trials/{id}",                          trial_show,            Access::kRead,   Cost::kCheap, false, "trial_show"},
  {"GET",  "/api/v1/trials/{id}/metrics",                  trial_metrics,         Access::kRead,   Cost::kSlow,  false, "trial_metrics"},
  {"GET",  "/api/v1/trials/{id}/logs",                     trial_logs,            Access::kRead,   Cost::kCheap, false, "trial_logs"},
  {"POST", "/api/v1/trials/{id}/cancel",                   trial_cancel,          Access::kAdmin,  Cost::kSlow,  false, "trial_cancel"},
  {"GET",  "/api/v1/events",                               events,                Access::kRead,   Cost::kCheap, false, "events"},
  {"POST", "/api/v1/report",                               report,                Access::kWorker, Cost::kWrite, true,  "report"},
  {"GET",  "/api/v1/dashboard/experiments",                dashboard_experiments, Access::kRead,   Cost::kSlow,  false, "dashboard_experiments"},
  {"GET",  "/api/v1/dashboard/experiments/{id}",           dashboard_experiment,  Access::kRead,   Cost::kSlow,  false, "dashboard_experiment"},
  {"GET",  "/api/v1/dashboard/experiments/{id}/curves",    dashboard_curves,      Access::kRead,   Cost::kSlow,  false, "dashboard_curves"},
};
// clang-format on

TrialRow trial_or_404(const Store& store, const Request& req) {
  auto t = store.trial(path_int(req, "id"));
  if (!t) throw HttpError(404, "not_found", "no trial " + req.params.at("id"));
  return *t;
}

// Summary rows of the trials; only those that reported are looked up in the metrics.
json trial_summaries_json(const Store& store, const std::vector<TrialRow>& rows, const ExperimentRow& e) {
  json trials = json::array();
  for (const TrialRow& t : rows) trials.push_back(trial_summary_json(store, t, e, has_metrics(store, t.id)));
  return trials;
}

json cursor_json(int64_t next) { return next > 0 ? json(next) : json(nullptr); }

}  // namespace

void Controller::add_routes() {
  Router& r = *router_;
  api_ = std::make_unique<Api>(Api{*this, *store_, *report_limits_, *best_cache_});
  for (const ApiRoute& a : kApiRoutes) {
    Route route;
    route.method = a.method;
    route.pattern = a.pattern;
    route.handler = [api = api_.get(), handler = a.handler](Request& req) { return handler(*api, req); };
    route.name = a.name;
    route.needs_token = a.access == Access::kAdmin;
    route.needs_read_token = a.access == Access::kRead;
    if (a.access == Access::kWorker) route.authorize = report_authorize;
    route.offload = a.cost == Cost::kSlow;
    route.writes = a.cost == Cost::kWrite;
    route.reserved = a.reserved;
    r.add(std::move(route));
  }
  if (!options_.web_dir.empty()) r.add_static("/", options_.web_dir, "dashboard");
}

Response healthz(const Api& api, Request&) {
  // Nothing about the machine (the database path was here): anyone may ask. The controller
  // answers while another process holds the database locked; "store" says so.
  json store = {{"blocked", false}};
  if (const auto since = api.store.write_blocked_since()) {
    store = {{"blocked", true},
             {"blocked_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - *since).count()}};
  }
  return json_response({{"ok", true}, {"schema", api.store.schema_version()}, {"store", store}});
}

Response experiments_list(const Api& api, Request& req) {
  json list = json::array();
  for (const ExperimentRow& e : api.store.experiments()) list.push_back(experiment_json(e, api.store.trial_state_counts(e.id)));
  return view_response(req, {{"experiments", list}});
}

Response experiments_submit(const Api& api, Request& req) {
  const SubmissionBody body = parse_submission_body(req);
  // A recipe the schema refuses (worker::ConfigError) answers 400 bad_recipe (errors.h).
  const int64_t id = api.controller.submit_recipe(body.recipe, body.source, body.overrides);
  return json_response(experiment_json(*api.store.experiment(id), api.store.trial_state_counts(id)), 201);
}

// One experiment with its recipe and one page of its trials' summaries (trial_list, next_cursor).
Response experiment_show(const Api& api, Request& req) {
  const ExperimentRow e = experiment_or_404(api.store, req);
  const PageParams page = page_params(req);
  const TrialPage trials = trial_page(api.store, e.id, page.cursor, page.limit);
  json j = experiment_json(e, api.store.trial_state_counts(e.id), true);
  j["trial_list"] = trial_summaries_json(api.store, trials.rows, e);
  j["next_cursor"] = cursor_json(trials.next_cursor);
  return view_response(req, std::move(j));
}

Response experiment_cancel(const Api& api, Request& req) {
  const ExperimentRow e = experiment_or_404(api.store, req);
  if (!api.controller.scheduler().cancel_experiment(e.id, "cancelled through the API"))
    throw HttpError(409, "already_finished",
                    "experiment " + std::to_string(e.id) + " already finished (" +
                        experiment_state_name(api.store.experiment(e.id)->state) + "); nothing to cancel");
  return json_response({{"ok", true}, {"experiment", e.id}});
}

Response experiment_trials(const Api& api, Request& req) {
  const ExperimentRow e = experiment_or_404(api.store, req);
  const PageParams page = page_params(req);
  const TrialPage trials = trial_page(api.store, e.id, page.cursor, page.limit);
  return view_response(req, {{"trials", trial_summaries_json(api.store, trials.rows, e)},
                             {"next_cursor", cursor_json(trials.next_cursor)}});
}

// The rankings and the Pareto front, each cut to the page [cursor, cursor + limit) of its entries:
// the cursor is an offset here. The report is computed once per version of the experiment's data.
Response experiment_best(const Api& api, Request& req) {
  const ExperimentRow e = experiment_or_404(api.store, req);
  const PageParams page = page_params(req);
  const std::shared_ptr<const BestReport> full = api.best.report(api.store, e);
  const BestPage cut = best_page(*full, static_cast<size_t>(page.cursor), page.limit);
  json j = best_to_json(cut.report);
  j["next_cursor"] = cursor_json(cut.next_cursor);
  return view_response(req, std::move(j));
}

// A study's fit (study/report.h), computed once per version of the experiment's data. An
// experiment that is not a study answers 409 not_a_study: it exists, it has no study to show.
Response experiment_study(const Api& api, Request& req) {
  const ExperimentRow e = experiment_or_404(api.store, req);
  std::shared_ptr<const json> study;
  try {
    study = api.best.study(api.store, e);
  } catch (const std::invalid_argument& err) {
    throw HttpError(409, "not_a_study", err.what());
  }
  return json_response(*study);
}

// Which swept keys mattered (study/importance_report.h), computed once per version of the
// experiment's data. One with nothing to rank yet (no swept key, fewer than 2 completed trials, an
// objective that does not vary) answers "ok": false with the reason.
Response experiment_importance(const Api& api, Request& req) {
  const ExperimentRow e = experiment_or_404(api.store, req);
  return json_response(*api.best.importance(api.store, e));
}

Response trial_show(const Api& api, Request& req) {
  const TrialRow t = trial_or_404(api.store, req);
  json j = trial_json(t, true);
  json attempts = json::array(), checkpoints = json::array();
  for (const AttemptRow& a : api.store.attempts(t.id)) attempts.push_back(attempt_json(a));
  for (const CheckpointRow& c : api.store.checkpoints(t.id)) checkpoints.push_back(checkpoint_json(c));
  j["attempts"] = attempts;
  j["checkpoints"] = checkpoints;
  j["metrics"] = api.store.metric_names(t.id);
  return view_response(req, std::move(j));
}

Response trial_metrics(const Api& api, Request& req) {
  const TrialRow t = trial_or_404(api.store, req);
  const int64_t max_points = query_int(req, "max_points", 2000);
  if (max_points < 0 || max_points > 1000000) throw HttpError(400, "bad_param", "max_points must be between 0 and 1000000");
  return json_response({{"trial", t.id},
                        {"metrics", trial_metrics_json(api.store, t.id, query_string(req, "name"),
                                                       static_cast<size_t>(max_points))}});
}

Response trial_logs(const Api& api, Request& req) {
  const TrialRow t = trial_or_404(api.store, req);
  const std::string stream = query_string(req, "stream", "stderr");
  if (stream != "stdout" && stream != "stderr") throw HttpError(400, "bad_param", "stream must be stdout or stderr");
  const int64_t lines = query_int(req, "lines", 200);
  if (lines < 1 || lines > 100000) throw HttpError(400, "bad_param", "lines must be between 1 and 100000");
  std::string text;
  try {
    text = tail_file(t.run_dir + "/" + stream + ".log", static_cast<size_t>(lines));
  } catch (const LogFileError& e) {
    const std::string what = "trial " + std::to_string(t.id) + "'s " + stream + " log";
    // The message names the host path: for the host's readers only.
    if (!host_view(req)) throw HttpError(409, "bad_log", what + " is not a regular file that can be read");
    throw HttpError(409, "bad_log", what + ": " + e.what());
  }
  return json_response({{"trial", t.id}, {"stream", stream}, {"text", text}});
}

Response trial_cancel(const Api& api, Request& req) {
  const TrialRow t = trial_or_404(api.store, req);
  if (!api.controller.scheduler().cancel_trial(t.id, "cancelled through the API"))
    throw HttpError(409, "already_finished",
                    "trial " + std::to_string(t.id) + " already finished (" +
                        trial_state_name(api.store.trial(t.id)->state) + "); nothing to cancel");
  return json_response({{"ok", true}, {"trial", t.id}});
}

Response events(const Api& api, Request& req) {
  const int64_t since = query_int(req, "since", 0);
  const int64_t limit = query_int(req, "limit", 500);
  if (limit < 1 || limit > 10000) throw HttpError(400, "bad_param", "limit must be between 1 and 10000");
  json list = json::array();
  int64_t cursor = since;
  for (const EventRow& e : api.store.events_since(since, static_cast<size_t>(limit), query_int(req, "experiment", 0))) {
    list.push_back(event_json(e));
    cursor = e.id;
  }
  return json_response({{"events", list}, {"cursor", cursor}});
}

// Workers authenticate with their trial's token, checked by the scheduler (the router only
// refuses a report without any token, before its body is read).
// 401 bad_token for an unknown trial or a wrong token (one answer, so ids cannot be probed; it
// comes before anything about the trial is looked at), 409 trial_finished once the trial ended.
// Past the trial's bounds (report_limits.h) it is 400 bad_report, checked only once the token
// is: the scheduler authenticates a report of no points first, which stores nothing.
Response report(const Api& api, Request& req) {
  const ReportBody body = parse_report_body(req);
  const std::string token = bearer_token(req);
  Scheduler& scheduler = api.controller.scheduler();
  ReportAnswer answer;
  try {
    scheduler.report(body.trial, token, {});
    const int64_t experiment = api.limits.check_and_reserve(body.trial, body.points);
    try {
      // A locked database answers 503 store_busy at once (errors.h); the worker sends it again.
      answer = scheduler.report(body.trial, token, body.points, WriteWait::kBrief);
    } catch (...) {
      api.limits.forget(body.trial);  // its names may not all be stored: reload them next time
      throw;
    }
    if (!body.points.empty()) api.best.metrics_stored(experiment);
  } catch (const ReportRefused& e) {
    if (e.kind == ReportRefused::kFinished) throw HttpError(409, "trial_finished", e.what());
    throw HttpError(401, "bad_token", e.what());
  }
  return json_response({{"ok", true}, {"stop", answer.stop}, {"reason", answer.reason}});
}

bool report_authorize(const Request& req) { return !bearer_token(req).empty(); }

PageParams page_params(const Request& req, size_t default_limit, size_t max_limit) {
  PageParams page;
  const std::string limit = query_string(req, "limit");
  const std::string cursor = query_string(req, "cursor");
  const std::string range = "an integer from 1 to " + std::to_string(max_limit);
  page.limit = default_limit;
  if (req.query.count("limit")) {
    const bool digits = !limit.empty() && limit.size() <= 9 && std::all_of(limit.begin(), limit.end(), ::isdigit);
    const size_t n = digits ? std::stoul(limit) : 0;
    if (n < 1 || n > max_limit) throw HttpError(400, "bad_param", "limit must be " + range + ", got \"" + limit + "\"");
    page.limit = n;
  }
  if (req.query.count("cursor")) {
    const bool digits = !cursor.empty() && cursor.size() <= 18 && std::all_of(cursor.begin(), cursor.end(), ::isdigit);
    if (!digits)
      throw HttpError(400, "bad_param",
                      "cursor must be the next_cursor of the previous page (a non-negative integer), got \"" + cursor + "\"");
    page.cursor = std::stoll(cursor);
  }
  return page;
}

bool host_view(const Request& req) {
  if (req.token_holder) return true;
  // remote is "address:port" as the server fills it; "" outside the server (tests, fuzzing).
  const size_t colon = req.remote.rfind(':');
  return colon == std::string::npos || !reachable_from_other_machines(req.remote.substr(0, colon));
}

Response view_response(const Request& req, json view) {
  if (!host_view(req)) remote_view(view);
  return json_response(view);
}

}  // namespace precon::orch
