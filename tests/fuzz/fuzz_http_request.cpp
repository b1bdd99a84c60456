// HTTP requests as the controller's server reads them: the bytes of one connection through
// read_requests (Beast's parser, the framing checks, the refusal before the body, the body limit)
// into a Router shaped like the API's table (literal, {param} and {rest*} routes, admin-token and
// own-token routes, a static directory). Handlers read path, query and JSON like the API's.
// Invariants: every answer is a status 100..599 with a JSON error shape when >= 400; the static
// route serves only the files inside its directory (never the one next to it, nor what a symlink
// inside points to); nothing but the last answer closes the connection.
#include <nlohmann/json.hpp>

#include "orchestrator/http/request_reader.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace precon::orch;

constexpr std::string_view kIndex = "<html>dashboard</html>";
constexpr std::string_view kScript = "console.log(1)";
constexpr size_t kBodyLimit = 64 << 10;

Router make_router() {
  namespace fs = std::filesystem;
  const fs::path root = precon::fuzz::scratch_dir();
  fs::create_directories(root / "web" / "assets");
  precon::fuzz::write_scratch("web/index.html", kIndex);
  precon::fuzz::write_scratch("web/assets/app.js", kScript);
  precon::fuzz::write_scratch("secret.txt", "outside the static directory");
  std::error_code ec;
  fs::create_symlink(root / "secret.txt", root / "web" / "link.txt", ec);

  Router router(RouterOptions{"admin-token", [](const std::string&) {}});
  const auto echo = [](Request& req) {
    nlohmann::json j = {{"params", req.params}, {"query", req.query}};
    return json_response(j);
  };
  router.add({"GET", "/healthz", echo, false, "healthz", nullptr});
  router.add({"GET", "/api/v1/experiments/{id}", [](Request& req) {
                return json_response({{"id", path_int(req, "id")}});
              }, false, "experiment_show", nullptr});
  router.add({"GET", "/api/v1/trials/{id}/metrics", [](Request& req) {
                return json_response({{"id", path_int(req, "id")},
                                      {"max", query_int(req, "max_points", 2000)},
                                      {"x", query_double(req, "x", 0.5)},
                                      {"name", query_string(req, "name")}});
              }, false, "trial_metrics", nullptr});
  router.add({"POST", "/api/v1/experiments", [](Request& req) {
                return json_response(json_body(req), 201);
              }, true, "experiments_submit", nullptr});
  router.add({"POST", "/api/v1/experiments/{id}/cancel", [](Request& req) {
                return json_response({{"ok", true}, {"experiment", path_int(req, "id")}});
              }, true, "experiment_cancel", nullptr});
  router.add({"POST", "/api/v1/report", [](Request& req) {
                return json_response({{"ok", json_body(req).is_object()}});
              }, false, "report", [](const Request& req) { return bearer_token(req) == "trial-token"; }});
  router.add({"GET", "/api/v1/files/{path*}", echo, false, "files", nullptr});
  router.add_static("/", root / "web", "dashboard");
  return router;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Router router = make_router();
  const std::vector<ReadOutcome> answers = read_requests(precon::fuzz::as_text(data, size), router, kBodyLimit);
  for (size_t i = 0; i < answers.size(); ++i) {
    const Response& r = answers[i].response;
    if (r.status < 100 || r.status > 599) precon::fuzz::fail("status " + std::to_string(r.status));
    if (answers[i].request.route == "dashboard" && r.status == 200 && r.body != kIndex && r.body != kScript) {
      precon::fuzz::fail("the static route served something outside its directory: " + r.body);
    }
    if (answers[i].closes && i + 1 != answers.size()) precon::fuzz::fail("an answer after the connection closed");
    if (r.status >= 400) {
      const nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
      if (!j.is_object() || !j.contains("error") || !j["error"].contains("code")) {
        precon::fuzz::fail("error answer without the error shape: " + r.body);
      }
    }
  }
  return 0;
}
