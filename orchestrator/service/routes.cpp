// The controller's HTTP API: one flat route table; handlers are named functions over the store,
// the scheduler and the queries shared with the CLI.
#include <cmath>

#include "orchestrator/service/controller.h"
#include "orchestrator/service/queries.h"
#include "orchestrator/service/routes_dashboard.h"
#include "orchestrator/service/views.h"

namespace precon::orch {

using nlohmann::json;

namespace {

ExperimentRow experiment_or_404(const Store& store, const Request& req) {
  auto e = store.experiment(path_int(req, "id"));
  if (!e) throw HttpError(404, "not_found", "no experiment " + req.params.at("id"));
  return *e;
}

TrialRow trial_or_404(const Store& store, const Request& req) {
  auto t = store.trial(path_int(req, "id"));
  if (!t) throw HttpError(404, "not_found", "no trial " + req.params.at("id"));
  return *t;
}

// {"trial": "<id>", "records": [{"step", "time", "values": {name: value | null}}]}
std::vector<MetricPoint> report_points(const json& body) {
  if (!body.is_object() || !body.contains("records") || !body["records"].is_array())
    throw HttpError(400, "bad_report", "expected {\"trial\": ..., \"records\": [...]}");
  std::vector<MetricPoint> points;
  for (const json& r : body["records"]) {
    if (!r.is_object() || !r.contains("step") || !r["step"].is_number_integer() || !r.contains("values") ||
        !r["values"].is_object())
      throw HttpError(400, "bad_report", "each record needs an integer \"step\" and a \"values\" object");
    const int64_t step = r["step"].get<int64_t>();
    const double time = r.value("time", 0.0);
    for (auto& [name, v] : r["values"].items()) {
      if (name.empty() || name.size() > 128) throw HttpError(400, "bad_report", "bad metric name");
      if (!v.is_number() && !v.is_null())
        throw HttpError(400, "bad_report", "metric \"" + name + "\" must be a number or null");
      points.push_back({name, step, v.is_null() ? NAN : v.get<double>(), time});
    }
  }
  return points;
}

}  // namespace

void Controller::add_routes() {
  Router& r = *router_;
  Store& store = *store_;

  r.add({"GET", "/healthz", [&](Request&) {
           return json_response({{"ok", true}, {"db", store.path().string()}, {"schema", store.schema_version()}});
         }, false, "healthz", nullptr});

  r.add({"GET", "/api/v1/experiments", [&](Request&) {
           json list = json::array();
           for (const ExperimentRow& e : store.experiments()) list.push_back(experiment_json(e, store.trials(e.id)));
           return json_response({{"experiments", list}});
         }, false, "experiments_list", nullptr});

  r.add({"POST", "/api/v1/experiments", [this](Request& req) {
           json body = json_body(req);
           if (!body.is_object() || !body.contains("recipe") || !body["recipe"].is_string())
             throw HttpError(400, "bad_request", "expected {\"recipe\": \"<TOML text>\", \"source\": ..., \"overrides\": [...]}");
           std::vector<std::string> overrides;
           if (body.contains("overrides")) {
             if (!body["overrides"].is_array()) throw HttpError(400, "bad_request", "\"overrides\" must be an array");
             for (const json& o : body["overrides"]) {
               if (!o.is_string()) throw HttpError(400, "bad_request", "overrides are \"key=value\" strings");
               overrides.push_back(o.get<std::string>());
             }
           }
           // A recipe the schema refuses (worker::ConfigError) answers 400 bad_recipe (errors.h).
           const int64_t id =
               submit_recipe(body["recipe"].get<std::string>(), body.value("source", "recipe.toml"), overrides);
           auto exp = store_->experiment(id);
           return json_response(experiment_json(*exp, store_->trials(id)), 201);
         }, true, "experiments_submit", nullptr});

  r.add({"GET", "/api/v1/experiments/{id}", [&](Request& req) {
           ExperimentRow e = experiment_or_404(store, req);
           json j = experiment_json(e, store.trials(e.id), true);
           json trials = json::array();
           for (const TrialRow& t : store.trials(e.id)) trials.push_back(trial_summary_json(store, t, e));
           j["trial_list"] = trials;
           return json_response(j);
         }, false, "experiment_show", nullptr});

  r.add({"POST", "/api/v1/experiments/{id}/cancel", [this](Request& req) {
           ExperimentRow e = experiment_or_404(*store_, req);
           scheduler_->cancel_experiment(e.id, "cancelled through the API");
           return json_response({{"ok", true}, {"experiment", e.id}});
         }, true, "experiment_cancel", nullptr});

  r.add({"GET", "/api/v1/experiments/{id}/trials", [&](Request& req) {
           ExperimentRow e = experiment_or_404(store, req);
           json trials = json::array();
           for (const TrialRow& t : store.trials(e.id)) trials.push_back(trial_summary_json(store, t, e));
           return json_response({{"trials", trials}});
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
           return json_response({{"trial", t.id},
                                 {"stream", stream},
                                 {"text", tail_file(t.run_dir + "/" + stream + ".log", static_cast<size_t>(lines))}});
         }, false, "trial_logs", nullptr});

  r.add({"POST", "/api/v1/trials/{id}/cancel", [this](Request& req) {
           TrialRow t = trial_or_404(*store_, req);
           scheduler_->cancel_trial(t.id, "cancelled through the API");
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

  // Workers authenticate with their trial's token, checked by the scheduler.
  r.add({"POST", "/api/v1/report", [this](Request& req) {
           json body = json_body(req);
           if (!body.is_object() || !body.contains("trial"))
             throw HttpError(400, "bad_report", "expected {\"trial\": \"<id>\", \"records\": [...]}");
           int64_t trial = 0;
           try {
             trial = body["trial"].is_string() ? std::stoll(body["trial"].get<std::string>()) : body["trial"].get<int64_t>();
           } catch (const std::exception&) {
             throw HttpError(400, "bad_report", "\"trial\" must be a trial id");
           }
           std::vector<MetricPoint> points = report_points(body);
           ReportAnswer answer;
           try {
             answer = scheduler_->report(trial, bearer_token(req), points);
           } catch (const std::out_of_range& e) {
             throw HttpError(404, "unknown_trial", e.what());
           } catch (const std::invalid_argument& e) {
             throw HttpError(401, "bad_token", e.what());
           }
           return json_response({{"ok", true}, {"stop", answer.stop}, {"reason", answer.reason}});
         }, false, "report", [](const Request&) { return true; }});

  add_dashboard_routes(r, store);
  if (!options_.web_dir.empty()) r.add_static("/", options_.web_dir, "dashboard");
}

}  // namespace precon::orch
