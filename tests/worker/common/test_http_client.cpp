// The one HTTP client (URL parsing, exchanges, keep-alive, timeouts, abort) against a small
// Boost.Beast server on 127.0.0.1 in this process, and against sockets that refuse or stay silent.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/common/http_test_server.h"
#include "worker/common/http_client.h"

namespace precon::worker {
namespace {

namespace http = boost::beast::http;
using test::TestRequest;
using test::TestResponse;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Where a client reaches the test's server or listener.
template <class Listening>
HttpUrl url_of(const Listening& server) {
  return {"127.0.0.1", server.port(), "/"};
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST(HttpUrl, ParsesHostPortAndPath) {
  const auto a = parse_http_url("http://ctl.cluster:8123/api/v1/trials/7/report?x=1");
  EXPECT_EQ(a.host, "ctl.cluster");
  EXPECT_EQ(a.port, 8123);
  EXPECT_EQ(a.target, "/api/v1/trials/7/report?x=1");
  const auto b = parse_http_url("http://10.0.0.5");
  EXPECT_EQ(b.host, "10.0.0.5");
  EXPECT_EQ(b.port, 80);
  EXPECT_EQ(b.target, "/");
  const auto c = parse_http_url("http://[::1]:9000/r");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 9000);
  EXPECT_EQ(c.target, "/r");
  EXPECT_EQ(parse_http_url("http://h?q=1").target, "/?q=1");
}

TEST(HttpUrl, RejectsWhatItCannotUse) {
  for (const char* bad : {"https://ctl:443/r", "ftp://ctl/r", "ctl:8000/r", "http://", "http://:80/r", "http://ctl:/r",
                          "http://ctl:0/r", "http://ctl:65536/r", "http://ctl:80x/r", "http://user:pw@ctl/r",
                          "http://[::1/r", "http://ctl#frag"}) {
    try {
      parse_http_url(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const HttpClientError& e) {
      EXPECT_EQ(e.stage(), HttpStage::kUrl) << bad;
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  try {
    parse_http_url("https://ctl/r");
  } catch (const HttpClientError& e) {
    EXPECT_NE(std::string(e.what()).find("https is not supported"), std::string::npos) << e.what();
  }
}

TEST(HttpClient, SendsTheRequestAndReturnsAnyStatus) {
  test::TestHttpServer server([](const TestRequest& req, TestResponse& res) {
    res.result(req.target() == "/missing" ? 404 : 200);
    res.set("X-Seen", std::string(req[http::field::host]) + "|" + std::string(req[http::field::user_agent]) + "|" +
                          std::string(req[http::field::content_type]) + "|" + std::string(req["X-Token"]));
    res.insert("X-Twice", "a");
    res.insert("X-Twice", "b");
    res.body() = std::string(req.method_string()) + " " + std::string(req.target()) + " " + req.body();
  });
  const HttpUrl url = url_of(server);
  HttpResponse r = http_request(url, {"POST", "/r?x=1", "{\"a\":1}", {{"X-Token", "t"}}}, 5s, {"agent/1"});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "POST /r?x=1 {\"a\":1}");
  EXPECT_EQ(r.headers.at("x-seen"), "127.0.0.1:" + std::to_string(url.port) + "|agent/1|application/json|t");
  EXPECT_EQ(r.headers.at("x-twice"), "a, b");
  EXPECT_FALSE(r.keep_alive);  // http_request asks for one exchange per connection

  r = http_request(url, {"GET", "/missing", "", {}}, 5s);
  EXPECT_EQ(r.status, 404);  // an answer, not an error
  EXPECT_EQ(r.headers.at("x-seen"), "127.0.0.1:" + std::to_string(url.port) + "|precon||");
  EXPECT_EQ(http_request(url, {"PURGE", "/x", "", {}}, 5s).body, "PURGE /x ");
  EXPECT_EQ(server.accepted(), 3);
}

TEST(HttpClient, KeepsOneConnectionAliveAndReconnectsAfterClose) {
  test::TestHttpServer server([](const TestRequest&, TestResponse& res) { res.body() = "ok"; });
  HttpConnection connection(url_of(server));
  EXPECT_FALSE(connection.is_open());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(connection.exchange({"GET", "/", "", {}}, 5s).body, "ok");
  EXPECT_TRUE(connection.is_open());
  EXPECT_EQ(server.accepted(), 1);
  connection.close();
  EXPECT_EQ(connection.exchange({"GET", "/", "", {}}, 5s).status, 200);
  EXPECT_EQ(server.accepted(), 2);
}

TEST(HttpClient, AnswersOverTheBodyLimitFail) {
  test::TestHttpServer server([](const TestRequest&, TestResponse& res) { res.body() = std::string(4096, 'x'); });
  HttpConnectionOptions options;
  options.body_limit = 1024;
  try {
    http_request(url_of(server), {"GET", "/", "", {}}, 5s, options);
    FAIL() << "a body over the limit was accepted";
  } catch (const HttpClientError& e) {
    EXPECT_EQ(e.stage(), HttpStage::kRead);
    EXPECT_FALSE(e.timed_out());
  }
}

TEST(HttpClient, RefusedAndSilentServersSayWhich) {
  HttpUrl closed;
  {
    test::SilentListener gone;
    closed = url_of(gone);
  }
  try {
    http_request(closed, {"GET", "/", "", {}}, 5s);
    FAIL() << "connected to a closed port";
  } catch (const HttpClientError& e) {
    EXPECT_EQ(e.stage(), HttpStage::kConnect);
    EXPECT_TRUE(e.refused()) << e.what();
    EXPECT_FALSE(e.timed_out());
  }

  test::SilentListener silent;
  const auto start = Clock::now();
  try {
    http_request(url_of(silent), {"POST", "/r", "{}", {}}, 200ms);
    FAIL() << "a silent server answered";
  } catch (const HttpClientError& e) {
    EXPECT_EQ(e.stage(), HttpStage::kRead);
    EXPECT_TRUE(e.timed_out());
    EXPECT_FALSE(e.refused());
    EXPECT_NE(std::string(e.what()).find("no answer from 127.0.0.1:"), std::string::npos) << e.what();
    EXPECT_STREQ(http_stage_text(e.stage()), "reading the answer");
  }
  const double took = seconds_since(start);
  EXPECT_GE(took, 0.19);
  EXPECT_LT(took, 2.0);
}

TEST(HttpClient, AbortFlagEndsAWaitingExchange) {
  test::SilentListener silent;
  std::atomic<bool> abort{false};
  HttpConnectionOptions options;
  options.abort = &abort;
  HttpConnection connection(url_of(silent), options);
  std::thread aborter([&] {
    // Deliberately lets time pass, so that the flag is raised while the exchange waits (raised
    // before it, the exchange would end at once too, and the test would pass as well).
    std::this_thread::sleep_for(100ms);
    abort = true;
  });
  const auto start = Clock::now();
  try {
    connection.exchange({"GET", "/", "", {}}, 30s);
    ADD_FAILURE() << "a silent server answered";
  } catch (const HttpClientError& e) {
    EXPECT_FALSE(e.timed_out()) << e.what();
  }
  aborter.join();
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_FALSE(connection.is_open());
}

}  // namespace
}  // namespace precon::worker
