#include "orchestrator/service/api_bodies.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "orchestrator/common/clock.h"

namespace precon::orch {

using nlohmann::json;

namespace {

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
  const double latest = epoch_seconds() + kMaxClockSkewSeconds;
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

SubmissionBody parse_submission_body(const Request& request) {
  const json body = json_body(request);
  if (!body.is_object() || !body.contains("recipe") || !body["recipe"].is_string())
    throw HttpError(400, "bad_request", "expected {\"recipe\": \"<TOML text>\", \"source\": ..., \"overrides\": [...]}");
  SubmissionBody out;
  out.recipe = body["recipe"].get<std::string>();
  if (body.contains("overrides")) {
    if (!body["overrides"].is_array()) throw HttpError(400, "bad_request", "\"overrides\" must be an array");
    for (const json& o : body["overrides"]) {
      if (!o.is_string()) throw HttpError(400, "bad_request", "overrides are \"key=value\" strings");
      out.overrides.push_back(o.get<std::string>());
    }
  }
  out.source = body.value("source", "recipe.toml");
  return out;
}

ReportBody parse_report_body(const Request& request) {
  const json body = json_body(request);
  if (!body.is_object() || !body.contains("trial"))
    throw HttpError(400, "bad_report", "expected {\"trial\": \"<id>\", \"records\": [...]}");
  ReportBody out;
  out.trial = report_trial(body);
  out.points = report_points(body);
  return out;
}

}  // namespace precon::orch
