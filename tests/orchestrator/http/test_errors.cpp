// The one mapping from an exception to an HTTP status and code (errors.h): directly, then over
// a real socket, where a handler's error and a malformed request get the mapped answer.
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orchestrator/http/client.h"
#include "orchestrator/http/errors.h"
#include "orchestrator/http/router.h"
#include "orchestrator/http/server.h"
#include "orchestrator/store/store.h"
#include "worker/common/error.h"
#include "worker/config/parse.h"

namespace precon::orch {
namespace {

using json = nlohmann::json;

template <class Throw>
ErrorAnswer answer_for(Throw&& thrower) {
  try {
    thrower();
  } catch (...) {
    return error_answer(std::current_exception());
  }
  ADD_FAILURE() << "nothing was thrown";
  return {};
}

void expect_answer(const ErrorAnswer& a, int status, const std::string& code) {
  EXPECT_EQ(a.status, status) << a.code << ": " << a.message;
  EXPECT_EQ(a.code, code) << a.message;
  EXPECT_FALSE(a.message.empty());
}

TEST(HttpErrors, EachErrorTypeHasOneStatusAndCode) {
  ErrorAnswer a = answer_for([] { throw HttpError(409, "conflict", "already done"); });
  expect_answer(a, 409, "conflict");
  EXPECT_EQ(a.message, "already done");
  EXPECT_TRUE(a.cause.empty());  // a client's mistake is not logged
  expect_answer(answer_for([] { throw HttpError(503, "busy", "try later"); }), 503, "busy");

  a = answer_for([] { [[maybe_unused]] const json j = json::parse("{\"a\": "); });
  expect_answer(a, 400, "bad_json");
  EXPECT_NE(a.message.find("not valid JSON"), std::string::npos) << a.message;
  expect_answer(answer_for([] { [[maybe_unused]] const int i = json("x").get<int>(); }), 400, "bad_request");
  expect_answer(answer_for([] { throw std::invalid_argument("data files are missing"); }), 400, "bad_request");

  a = answer_for([] { throw worker::ConfigError("r.toml", 3, "optimizer.muon.ns_steps", "must be >= 1"); });
  expect_answer(a, 400, "bad_recipe");
  EXPECT_NE(a.message.find("optimizer.muon.ns_steps"), std::string::npos) << a.message;

  // Other worker errors (files, checkpoints, data the controller read) are the controller's problem.
  a = answer_for([] { throw worker::IoError("open /runs/x: No space left on device", 28); });
  expect_answer(a, 500, "worker_error");
  EXPECT_EQ(a.cause, "open /runs/x: No space left on device");
  EXPECT_EQ(a.message, "internal error: open /runs/x: No space left on device");
  expect_answer(answer_for([] { throw worker::CheckpointError("no checkpoint verifies"); }), 500, "worker_error");
  expect_answer(answer_for([] { throw worker::DataError("bad shard"); }), 500, "worker_error");

  a = answer_for([] { throw StoreError("database is locked"); });
  expect_answer(a, 500, "internal");
  EXPECT_EQ(a.cause, "database is locked");
  expect_answer(answer_for([] { throw std::out_of_range("map::at"); }), 500, "internal");
  a = answer_for([] { throw 7; });
  expect_answer(a, 500, "internal");
  EXPECT_EQ(a.message, "internal error");
  expect_answer(error_answer(nullptr), 500, "internal");
}

TEST(HttpErrors, HandlersAndMalformedRequestsGetTheMappedStatusOverASocket) {
  std::mutex mutex;
  std::vector<std::string> logged;
  const auto log = [&](const std::string& m) {
    std::lock_guard lock(mutex);
    logged.push_back(m);
  };
  Router router({"", log});
  router.add({"POST", "/recipe",
              [](Request&) -> Response { throw worker::ConfigError("r.toml", 7, "train.steps", "must be >= 1"); },
              false, "recipe", {}});
  router.add({"GET", "/disk", [](Request&) -> Response { throw worker::IoError("write /runs/t: EIO", 5); }, false,
              "disk", {}});
  router.add({"POST", "/json", [](Request& r) { return json_response(json_body(r)); }, false, "json", {}});
  ServerOptions options;
  options.log = log;
  HttpServer server(router, options);
  server.start();
  const std::string url = server.url();

  const auto expect = [](const ClientResponse& r, int status, const std::string& code) {
    EXPECT_EQ(r.status, status) << r.body;
    const json body = json::parse(r.body);
    EXPECT_EQ(body.at("error").at("code"), code) << r.body;
  };
  expect(http_request(url, "POST", "/recipe", "{}"), 400, "bad_recipe");
  expect(http_request(url, "POST", "/json", "{\"a\": "), 400, "bad_json");
  expect(http_request(url, "GET", "/json?x=%zz"), 400, "bad_query");  // fails before any route runs
  {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(logged.empty());
  }
  expect(http_request(url, "GET", "/disk"), 500, "worker_error");
  // Logged before the answer was sent. Checked before the stop: under load (a neighbouring test's
  // 64 clients) a stop has once waited out its timeout and said so, which is not this test's
  // subject (HttpServer.StopLetsRequestsInProgressFinish is).
  std::lock_guard lock(mutex);
  std::string all;
  for (const std::string& m : logged) all += m + "\n";
  ASSERT_EQ(logged.size(), 1u) << all;
  EXPECT_NE(logged[0].find("write /runs/t: EIO"), std::string::npos) << logged[0];
}

}  // namespace
}  // namespace precon::orch
