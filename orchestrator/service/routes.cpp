// The controller's HTTP API: one flat route table; handlers are named functions over the store,
// the scheduler and the queries shared with the CLI.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>

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

// Reports are refused whole, never cut to fit: a worker must learn that its points were not
// stored. Answers (all {"error": {"code", "message"}}): 400 bad_report for a malformed body,
// 401 bad_token for an unknown trial or a wrong token (one answer, so ids cannot be probed; it
// comes before anything about the trial is looked at), 409 trial_finished once the trial ended.

// Summary rows of the trials; only those that reported are looked up in the metrics.
json trial_summaries_json(const Store& store, const std::vector<TrialRow>& rows, const ExperimentRow& e) {
  const std::vector<int64_t> reported = store.trials_with_metrics(e.id);
  json trials = json::array();
  for (const TrialRow& t : rows)
    trials.push_back(trial_summary_json(store, t, e, std::binary_search(reported.begin(), reported.end(), t.id)));
  return trials;
}

// Worker clocks may run ahead of the controller's a little; a time further out is garbage.
constexpr double kMaxClockSkewSeconds = 86400;

// A client's value quoted in an error message, cut short.
std::string brief(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

// "trial": a positive decimal id, as a string of digits only or a JSON integer.
int64_t report_trial(const json& body) {
  const json& t = body["trial"];
  int64_t id = 0;
  bool ok = false;
  if (t.is_string()) {
    const std::string& s = t.get_ref<const std::string&>();
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), id);
    ok = !s.empty() && s.front() != '-' && s.front() != '+' && ec == std::errc() && ptr == s.data() + s.size();
  } else if (t.is_number_unsigned()) {
    ok = t.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    id = ok ? static_cast<int64_t>(t.get<uint64_t>()) : 0;
  } else if (t.is_number_integer()) {
    id = t.get<int64_t>();
    ok = true;
  }
  if (!ok || id <= 0) throw HttpError(400, "bad_report", "\"trial\" must be a trial id (a positive integer), got " + brief(t));
  return id;
}

// {"trial": "<id>", "records": [{"step", "time", "values": {name: value | null}}]}
std::vector<MetricPoint> report_points(const json& body) {
  if (!body.contains("records") || !body["records"].is_array())
    throw HttpError(400, "bad_report", "expected {\"trial\": ..., \"records\": [...]}");
  const double latest = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() +
                        kMaxClockSkewSeconds;
  std::vector<MetricPoint> points;
  for (const json& r : body["records"]) {
    if (!r.is_object() || !r.contains("values") || !r["values"].is_object())
      throw HttpError(400, "bad_report", "each record needs an integer \"step\" and a \"values\" object");
    // A step is a non-negative int64: nlohmann holds 2^63..2^64-1 as unsigned (get<int64_t> would
    // wrap them negative) and larger ones as floating point.
    const json& s = r.value("step", json());
    const bool step_ok = (s.is_number_unsigned() && s.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) ||
                         (s.is_number_integer() && !s.is_number_unsigned() && s.get<int64_t>() >= 0);
    if (!step_ok) throw HttpError(400, "bad_report", "\"step\" must be an integer from 0 to 2^63-1, got " + brief(s));
    const int64_t step = s.get<int64_t>();
    double time = 0;
    if (r.contains("time")) {
      if (!r["time"].is_number() || !(r["time"].get<double>() >= 0 && r["time"].get<double>() <= latest))
        throw HttpError(400, "bad_report",
                        "\"time\" must be unix seconds, not negative nor more than a day ahead, got " + brief(r["time"]));
      time = r["time"].get<double>();
    }
    for (auto& [name, v] : r["values"].items()) {
      const bool printable_name = std::all_of(name.begin(), name.end(), [](char c) {
        return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
      });
      if (name.empty() || name.size() > 128 || !printable_name)
        throw HttpError(400, "bad_report", "metric names are 1 to 128 characters without control characters");
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
           // Nothing about the machine (the database path was here): anyone may ask.
           return json_response({{"ok", true}, {"schema", store.schema_version()}});
         }, false, "healthz", nullptr});

  r.add({"GET", "/api/v1/experiments", [&](Request&) {
           json list = json::array();
           for (const ExperimentRow& e : store.experiments()) list.push_back(experiment_json(e, store.trial_state_counts(e.id)));
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
           return json_response({{"trial", t.id},
                                 {"stream", stream},
                                 {"text", tail_file(t.run_dir + "/" + stream + ".log", static_cast<size_t>(lines))}});
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
  r.add({"POST", "/api/v1/report", [this](Request& req) {
           json body = json_body(req);
           if (!body.is_object() || !body.contains("trial"))
             throw HttpError(400, "bad_report", "expected {\"trial\": \"<id>\", \"records\": [...]}");
           const int64_t trial = report_trial(body);
           std::vector<MetricPoint> points = report_points(body);
           ReportAnswer answer;
           try {
             answer = scheduler_->report(trial, bearer_token(req), points);
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
