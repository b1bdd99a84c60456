// The controller's HTTP API: one flat route table; handlers are named functions over the store,
// the scheduler and the queries shared with the CLI.
#include <algorithm>
#include <memory>

#include "orchestrator/service/api_bodies.h"
#include "orchestrator/service/controller.h"
#include "orchestrator/service/queries.h"
#include "orchestrator/service/report_limits.h"
#include "orchestrator/service/routes_dashboard.h"
#include "orchestrator/service/views.h"

namespace precon::orch {

using nlohmann::json;

namespace {

TrialRow trial_or_404(const Store& store, const Request& req) {
  auto t = store.trial(path_int(req, "id"));
  if (!t) throw HttpError(404, "not_found", "no trial " + req.params.at("id"));
  return *t;
}

// Summary rows of the trials; only those that reported are looked up in the metrics.
json trial_summaries_json(const Store& store, const std::vector<TrialRow>& rows, const ExperimentRow& e) {
  const std::vector<int64_t> reported = store.trials_with_metrics(e.id);
  json trials = json::array();
  for (const TrialRow& t : rows)
    trials.push_back(trial_summary_json(store, t, e, std::binary_search(reported.begin(), reported.end(), t.id)));
  return trials;
}

}  // namespace

void Controller::add_routes() {
  Router& r = *router_;
  Store& store = *store_;

  r.add({"GET", "/healthz", [&](Request&) {
           // Nothing about the machine (the database path was here): anyone may ask.
           return json_response({{"ok", true}, {"schema", store.schema_version()}});
         }, false, "healthz", nullptr});

  r.add({"GET", "/api/v1/experiments", [&](Request&) {
           json list = json::array();
           for (const ExperimentRow& e : store.experiments()) list.push_back(experiment_json(e, store.trial_state_counts(e.id)));
           return json_response({{"experiments", list}});
         }, false, "experiments_list", nullptr});

  r.add({"POST", "/api/v1/experiments", [this](Request& req) {
           const SubmissionBody body = parse_submission_body(req);
           // A recipe the schema refuses (worker::ConfigError) answers 400 bad_recipe (errors.h).
           const int64_t id = submit_recipe(body.recipe, body.source, body.overrides);
           auto exp = store_->experiment(id);
           return json_response(experiment_json(*exp, store_->trial_state_counts(id)), 201);
         }, true, "experiments_submit", nullptr});

  r.add({"GET", "/api/v1/experiments/{id}", [&](Request& req) {
           ExperimentRow e = experiment_or_404(store, req);
           const std::vector<TrialRow> rows = store.trials(e.id);
           json j = experiment_json(e, rows, true);
           j["trial_list"] = trial_summaries_json(store, rows, e);
           return json_response(j);
         }, false, "experiment_show", nullptr});

  r.add({"POST", "/api/v1/experiments/{id}/cancel", [this](Request& req) {
           ExperimentRow e = experiment_or_404(*store_, req);
           if (!scheduler_->cancel_experiment(e.id, "cancelled through the API"))
             throw HttpError(409, "already_finished",
                             "experiment " + std::to_string(e.id) + " already finished (" +
                                 experiment_state_name(store_->experiment(e.id)->state) + "); nothing to cancel");
           return json_response({{"ok", true}, {"experiment", e.id}});
         }, true, "experiment_cancel", nullptr});

  r.add({"GET", "/api/v1/experiments/{id}/trials", [&](Request& req) {
           ExperimentRow e = experiment_or_404(store, req);
           return json_response({{"trials", trial_summaries_json(store, store.trials(e.id), e)}});
         }, false, "experiment_trials", nullptr});

  r.add({"GET", "/api/v1/experiments/{id}/best", [&](Request& req) {
           ExperimentRow e = experiment_or_404(store, req);
           return json_response(best_to_json(best_report(store, e)));
         }, false, "experiment_best", nullptr});

  r.add({"GET", "/api/v1/trials/{id}", [&](Request& req) {
           TrialRow t = trial_or_404(store, req);
           json j = trial_json(t, true);
           json attempts = json::array(), checkpoints = json::array();
           for (const AttemptRow& a : store.attempts(t.id)) attempts.push_back(attempt_json(a));
           for (const CheckpointRow& c : store.checkpoints(t.id)) checkpoints.push_back(checkpoint_json(c));
           j["attempts"] = attempts;
           j["checkpoints"] = checkpoints;
           j["metrics"] = store.metric_names(t.id);
           return json_response(j);
         }, false, "trial_show", nullptr});

  r.add({"GET", "/api/v1/trials/{id}/metrics", [&](Request& req) {
           TrialRow t = trial_or_404(store, req);
           const int64_t max_points = query_int(req, "max_points", 2000);
           if (max_points < 0 || max_points > 1000000)
             throw HttpError(400, "bad_param", "max_points must be between 0 and 1000000");
           return json_response({{"trial", t.id},
                                 {"metrics", trial_metrics_json(store, t.id, query_string(req, "name"),
                                                                static_cast<size_t>(max_points))}});
         }, false, "trial_metrics", nullptr});

  r.add({"GET", "/api/v1/trials/{id}/logs", [&](Request& req) {
           TrialRow t = trial_or_404(store, req);
           const std::string stream = query_string(req, "stream", "stderr");
           if (stream != "stdout" && stream != "stderr")
             throw HttpError(400, "bad_param", "stream must be stdout or stderr");
           const int64_t lines = query_int(req, "lines", 200);
           if (lines < 1 || lines > 100000) throw HttpError(400, "bad_param", "lines must be between 1 and 100000");
           std::string text;
           try {
             text = tail_file(t.run_dir + "/" + stream + ".log", static_cast<size_t>(lines));
           } catch (const LogFileError& e) {
             throw HttpError(409, "bad_log", std::string("trial ") + std::to_string(t.id) + "'s " + stream + " log: " + e.what());
           }
           return json_response({{"trial", t.id}, {"stream", stream}, {"text", text}});
         }, false, "trial_logs", nullptr});

  r.add({"POST", "/api/v1/trials/{id}/cancel", [this](Request& req) {
           TrialRow t = trial_or_404(*store_, req);
           if (!scheduler_->cancel_trial(t.id, "cancelled through the API"))
             throw HttpError(409, "already_finished",
                             "trial " + std::to_string(t.id) + " already finished (" +
                                 trial_state_name(store_->trial(t.id)->state) + "); nothing to cancel");
           return json_response({{"ok", true}, {"trial", t.id}});
         }, true, "trial_cancel", nullptr});

  r.add({"GET", "/api/v1/events", [&](Request& req) {
           const int64_t since = query_int(req, "since", 0);
           const int64_t limit = query_int(req, "limit", 500);
           if (limit < 1 || limit > 10000) throw HttpError(400, "bad_param", "limit must be between 1 and 10000");
           json events = json::array();
           int64_t cursor = since;
           for (const EventRow& e : store.events_since(since, static_cast<size_t>(limit), query_int(req, "experiment", 0))) {
             events.push_back(event_json(e));
             cursor = e.id;
           }
           return json_response({{"events", events}, {"cursor", cursor}});
         }, false, "events", nullptr});

  // Workers authenticate with their trial's token, checked by the scheduler (the router only
  // refuses a report without any token, before its body is read).
  // 401 bad_token for an unknown trial or a wrong token (one answer, so ids cannot be probed; it
  // comes before anything about the trial is looked at), 409 trial_finished once the trial ended.
  // Past the trial's bounds (report_limits.h) it is 400 bad_report, checked only once the token
  // is: the scheduler authenticates a report of no points first, which stores nothing.
  auto limits = std::make_shared<ReportLimits>(store);
  r.add({"POST", "/api/v1/report", [this, limits](Request& req) {
           const ReportBody body = parse_report_body(req);
           const std::string token = bearer_token(req);
           ReportAnswer answer;
           try {
             scheduler_->report(body.trial, token, {});
             limits->check_and_reserve(body.trial, body.points);
             try {
               answer = scheduler_->report(body.trial, token, body.points);
             } catch (...) {
               limits->forget(body.trial);  // its names may not all be stored: reload them next time
               throw;
             }
           } catch (const ReportRefused& e) {
             if (e.kind == ReportRefused::kFinished) throw HttpError(409, "trial_finished", e.what());
             throw HttpError(401, "bad_token", e.what());
           }
           return json_response({{"ok", true}, {"stop", answer.stop}, {"reason", answer.reason}});
         }, false, "report", [](const Request& req) { return !bearer_token(req).empty(); }});

  add_dashboard_routes(r, store);
  if (!options_.web_dir.empty()) r.add_static("/", options_.web_dir, "dashboard");
}

}  // namespace precon::orch
