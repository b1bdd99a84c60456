// The JSON bodies the API accepts. Input: one byte choosing the body, then the bytes of the body.
//   0  POST /api/v1/experiments: parse_submission_body, then the recipe and its overrides
//      through parse_recipe_text and the sweep's size (small sweeps expanded), as submit does
//      before storing anything;
//   1  POST /api/v1/report: parse_report_body;
//   2  POST /api/v1/experiments/{id}/cancel and /api/v1/trials/{id}/cancel: the id and any body
//      through a router with the API's patterns (the cancel routes read no body: it must not
//      matter what it holds). Input: "<id>" NUL "<body>".
// Allowed failures: what the API answers with a 4xx (error_answer). A 5xx is a bug. Invariants:
// an accepted report holds a positive trial id, steps >= 0, finite times >= 0 and metric names
// of 1..128 printable characters.
#include <cmath>

#include "orchestrator/http/errors.h"
#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/service/api_bodies.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace precon::orch;
using precon::fuzz::fail;

void check_report(const ReportBody& report) {
  if (report.trial <= 0) fail("accepted trial id " + std::to_string(report.trial));
  for (const MetricPoint& p : report.points) {
    if (p.step < 0) fail("accepted step " + std::to_string(p.step));
    if (!std::isfinite(p.time) || p.time < 0) fail("accepted time " + std::to_string(p.time));
    if (p.name.empty() || p.name.size() > 128) fail("accepted a metric name of " + std::to_string(p.name.size()) + " bytes");
    for (char c : p.name) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) fail("accepted a control character in a metric name");
    }
  }
}

Router cancel_router() {
  Router router(RouterOptions{"admin-token", [](const std::string&) {}});
  for (const char* pattern : {"/api/v1/experiments/{id}/cancel", "/api/v1/trials/{id}/cancel"}) {
    router.add({"POST", pattern, [](Request& req) {
                  return json_response({{"ok", true}, {"id", path_int(req, "id")}});
                }, true, pattern, nullptr});
  }
  return router;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int kind = data[0] % 3;
  Request request;
  request.method = "POST";
  request.body = std::string(precon::fuzz::as_text(data + 1, size - 1));
  try {
    if (kind == 0) {
      const SubmissionBody body = parse_submission_body(request);
      const Recipe recipe = parse_recipe_text(body.recipe, body.source, body.overrides);
      const int64_t trials = sweep_size(recipe);
      if (trials < 0) fail("negative sweep size");
      if (trials <= 8) expand_sweep(recipe);
    } else if (kind == 1) {
      check_report(parse_report_body(request));
    } else {
      static const Router router = cancel_router();
      const std::vector<std::string> parts = precon::fuzz::split_nul(request.body, 2);
      for (const char* what : {"experiments", "trials"}) {
        Request cancel;
        cancel.method = "POST";
        cancel.path = std::string("/api/v1/") + what + "/" + parts[0] + "/cancel";
        cancel.headers["authorization"] = "Bearer admin-token";
        Request empty = cancel;
        cancel.body = parts[1];
        const Response with_body = router.dispatch(cancel);
        const Response without = router.dispatch(empty);
        if (with_body.status != without.status || with_body.body != without.body) fail("the cancel body changed the answer");
        if (with_body.status >= 500) fail("cancel answered " + with_body.body);
      }
    }
  } catch (...) {
    const ErrorAnswer answer = error_answer(std::current_exception());
    if (answer.status >= 500) fail("answered " + std::to_string(answer.status) + ": " + answer.cause);
  }
  return 0;
}
