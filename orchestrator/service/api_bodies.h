// The JSON bodies the API accepts, read and checked apart from the routes that act on them (so
// each is testable, and fuzzed, without a store). Every refusal is an HttpError 400 naming the
// field; a body that is not JSON at all answers 400 bad_json (json_body).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orchestrator/http/router.h"
#include "orchestrator/store/store.h"

namespace precon::orch {

// POST /api/v1/experiments: {"recipe": "<TOML text>", "source": "name.toml", "overrides": ["key=value", ...]}.
struct SubmissionBody {
  std::string recipe;
  std::string source = "recipe.toml";
  std::vector<std::string> overrides;
};
SubmissionBody parse_submission_body(const Request& request);

// POST /api/v1/report: {"trial": "<id>", "records": [{"step", "time", "values": {name: value | null}}]}.
// Reports are refused whole, never cut to fit: a worker must learn that its points were not
// stored (400 bad_report, naming what is wrong).
struct ReportBody {
  int64_t trial = 0;
  std::vector<MetricPoint> points;
};
ReportBody parse_report_body(const Request& request);

}  // namespace precon::orch
