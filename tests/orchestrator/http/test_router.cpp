// The router as a pure function of the request: path parameters, query strings, 404/405, bad
// encodings, the admin token, handler exceptions mapped to the one error shape, malformed routes.
#include <gtest/gtest.h>

#include "orchestrator/http/router.h"
#include "tests/orchestrator/support/http_test_util.h"

namespace precon::orch {
namespace {

using testing::echo;
using testing::error_of;
using testing::expect_error;
using json = nlohmann::json;

Router make_router(RouterOptions options = {}) {
  Router router(std::move(options));
  router.add({"GET", "/api/v1/trials", echo, false, "trials", {}});
  router.add({"GET", "/api/v1/trials/{id}", echo, false, "trial", {}});
  router.add({"GET", "/api/v1/trials/{id}/metrics", echo, false, "trial_metrics", {}});
  router.add({"GET", "/api/v1/trials/best", echo, false, "trial_best", {}});
  router.add({"POST", "/api/v1/trials/{id}/cancel", echo, true, "trial_cancel", {}});
  return router;
}

TEST(HttpRouter, PathParamsAndQueryStrings) {
  const Router router = make_router();
  Request request = make_request("GET", "/api/v1/trials/42/metrics?name=val%20loss&max_points=2000&tag=a+b&flag");
  const Response response = router.dispatch(request);
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(response.content_type, "application/json");
  EXPECT_EQ(request.route, "trial_metrics");
  EXPECT_EQ(request.params.at("id"), "42");
  EXPECT_EQ(request.query.at("name"), "val loss");
  EXPECT_EQ(request.query.at("tag"), "a b");
  EXPECT_EQ(request.query.at("flag"), "");
  EXPECT_EQ(path_int(request, "id"), 42);
  EXPECT_EQ(query_int(request, "max_points", 7), 2000);
  EXPECT_EQ(query_int(request, "absent", 7), 7);
  EXPECT_EQ(query_string(request, "absent", "x"), "x");
  EXPECT_DOUBLE_EQ(query_double(request, "max_points", 0), 2000.0);

  // Percent-encoded path parameters are decoded; the literal route wins over {id}.
  Request encoded = make_request("GET", "/api/v1/trials/a%2Fb");
  EXPECT_EQ(router.dispatch(encoded).status, 200);
  EXPECT_EQ(encoded.params.at("id"), "a/b");
  Request best = make_request("GET", "/api/v1/trials/best");
  router.dispatch(best);
  EXPECT_EQ(best.route, "trial_best");
  EXPECT_EQ(router.match("GET", "/api/v1/trials/7")->name, "trial");
  EXPECT_EQ(router.match("GET", "/api/v1/nothing"), nullptr);
  EXPECT_EQ(router.routes().size(), 5u);
}

TEST(HttpRouter, NotFoundMethodNotAllowedAndBadEncoding) {
  const Router router = make_router();
  Request unknown = make_request("GET", "/api/v1/nothing");
  Response r = router.dispatch(unknown);
  expect_error(r.status, r.body, 404, "not_found");
  EXPECT_EQ(unknown.route, "");

  Request wrong_method = make_request("DELETE", "/api/v1/trials/3");
  r = router.dispatch(wrong_method);
  expect_error(r.status, r.body, 405, "method_not_allowed");
  EXPECT_EQ(r.headers.at("Allow"), "GET, HEAD");

  Request trailing = make_request("GET", "/api/v1/trials/3/metrics/");
  r = router.dispatch(trailing);
  expect_error(r.status, r.body, 404, "not_found");

  Request bad_path = make_request("GET", "/api/v1/trials/%zz");
  r = router.dispatch(bad_path);
  expect_error(r.status, r.body, 400, "bad_path");

  EXPECT_THROW(make_request("GET", "/x?a=%4"), HttpError);
  std::string out;
  EXPECT_TRUE(percent_decode("%41%62+c", out, false));
  EXPECT_EQ(out, "Ab+c");
  EXPECT_FALSE(percent_decode("abc%", out, false));
  EXPECT_FALSE(percent_decode("%g0", out, false));
}

TEST(HttpRouter, AdminTokenAndCustomAuthorization) {
  Router router = make_router({"s3cret", nullptr});
  router.add({"POST", "/api/v1/report", echo, false, "report",
              [](const Request& request) { return bearer_token(request) == "trial-token"; }});

  Request missing = make_request("POST", "/api/v1/trials/1/cancel");
  Response r = router.dispatch(missing);
  expect_error(r.status, r.body, 401, "unauthorized");
  EXPECT_EQ(r.headers.at("WWW-Authenticate"), "Bearer");

  Request wrong = make_request("POST", "/api/v1/trials/1/cancel");
  wrong.headers["authorization"] = "Bearer s3cre";
  expect_error(router.dispatch(wrong).status, router.dispatch(wrong).body, 401, "unauthorized");
  // The message says what was wrong: nothing sent, a header that is not a bearer token, or a
  // token that is not the admin token.
  EXPECT_NE(error_of(r.body)["message"].get<std::string>().find("send \"Authorization: Bearer <token>\""),
            std::string::npos) << r.body;
  EXPECT_NE(error_of(router.dispatch(wrong).body)["message"].get<std::string>().find("not this controller's admin token"),
            std::string::npos);
  Request basic = make_request("POST", "/api/v1/trials/1/cancel");
  basic.headers["authorization"] = "Basic czNjcmV0";
  r = router.dispatch(basic);
  expect_error(r.status, r.body, 401, "unauthorized");
  EXPECT_NE(error_of(r.body)["message"].get<std::string>().find("is not \"Bearer <token>\""), std::string::npos) << r.body;

  Request right = make_request("POST", "/api/v1/trials/1/cancel");
  right.headers["authorization"] = "bearer  s3cret ";
  EXPECT_EQ(router.dispatch(right).status, 200);

  Request report = make_request("POST", "/api/v1/report");
  report.headers["authorization"] = "Bearer s3cret";  // the admin token is not the trial's
  EXPECT_EQ(router.dispatch(report).status, 401);
  report.headers["authorization"] = "Bearer trial-token";
  EXPECT_EQ(router.dispatch(report).status, 200);

  // No admin token configured: state-changing routes are refused, not opened.
  const Router open = make_router();
  Request any = make_request("POST", "/api/v1/trials/1/cancel");
  any.headers["authorization"] = "Bearer ";
  EXPECT_EQ(open.dispatch(any).status, 401);

  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
}

TEST(HttpRouter, HandlerExceptionsMapToTheErrorShape) {
  std::vector<std::string> logged;
  Router router({"", [&](const std::string& m) { logged.push_back(m); }});
  router.add({"GET", "/http_error", [](Request&) -> Response { throw HttpError(409, "conflict", "already done"); },
              false, "a", {}});
  router.add({"POST", "/json", [](Request& r) { return json_response(json_body(r)); }, false, "b", {}});
  router.add({"POST", "/raw_parse", [](Request& r) { return json_response(json::parse(r.body)); }, false, "c", {}});
  router.add({"GET", "/type", [](Request&) { return json_response(json("x").get<int>()); }, false, "d", {}});
  router.add({"GET", "/invalid", [](Request&) -> Response { throw std::invalid_argument("bad max_points"); }, false,
              "e", {}});
  router.add({"GET", "/boom", [](Request&) -> Response { throw std::runtime_error("disk on fire"); }, false, "f", {}});
  router.add({"GET", "/int", [](Request&) -> Response { throw 7; }, false, "g", {}});
  router.add({"GET", "/t/{id}", [](Request& r) { return json_response(path_int(r, "id")); }, false, "h", {}});

  const auto call = [&](const std::string& method, const std::string& target, const std::string& body = "") {
    Request request = make_request(method, target, body);
    return router.dispatch(request);
  };
  Response r = call("GET", "/http_error");
  expect_error(r.status, r.body, 409, "conflict");
  EXPECT_EQ(error_of(r.body)["message"], "already done");
  r = call("POST", "/json", "{\"a\": ");
  expect_error(r.status, r.body, 400, "bad_json");
  r = call("POST", "/json", "");
  expect_error(r.status, r.body, 400, "bad_json");
  r = call("POST", "/json", "{\"a\": 1e999}");  // a number past double is a bad body, not a server error
  expect_error(r.status, r.body, 400, "bad_json");
  EXPECT_EQ(call("POST", "/json", "{\"a\": 1}").body, "{\"a\":1}");
  r = call("POST", "/raw_parse", "nope");
  expect_error(r.status, r.body, 400, "bad_json");
  r = call("GET", "/type");
  expect_error(r.status, r.body, 400, "bad_request");
  r = call("GET", "/invalid");
  expect_error(r.status, r.body, 400, "bad_request");
  EXPECT_TRUE(logged.empty());
  r = call("GET", "/boom");
  expect_error(r.status, r.body, 500, "internal");
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("disk on fire"), std::string::npos);
  r = call("GET", "/int");
  expect_error(r.status, r.body, 500, "internal");
  r = call("GET", "/t/12x");
  expect_error(r.status, r.body, 400, "bad_param");
  EXPECT_EQ(call("GET", "/t/-3").body, "-3");
}

TEST(HttpRouter, MalformedRoutesAreRejected) {
  Router router;
  EXPECT_THROW(router.add({"GET", "no-slash", echo, false, "x", {}}), std::invalid_argument);
  EXPECT_THROW(router.add({"GET", "/a//b", echo, false, "x", {}}), std::invalid_argument);
  EXPECT_THROW(router.add({"GET", "/a/{}", echo, false, "x", {}}), std::invalid_argument);
  EXPECT_THROW(router.add({"GET", "/a/{rest*}/b", echo, false, "x", {}}), std::invalid_argument);
  EXPECT_THROW(router.add({"GET", "/a/x{y}", echo, false, "x", {}}), std::invalid_argument);
  EXPECT_THROW(router.add({"GET", "/a", nullptr, false, "x", {}}), std::invalid_argument);
  EXPECT_THROW(router.add({"", "/a", echo, false, "x", {}}), std::invalid_argument);
  router.add({"GET", "/a/{id}", echo, false, "x", {}});
  EXPECT_THROW(router.add({"GET", "/a/{id}", echo, false, "y", {}}), std::invalid_argument);
}

}  // namespace
}  // namespace precon::orch
