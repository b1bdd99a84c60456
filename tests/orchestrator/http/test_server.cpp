// The HTTP server and client over sockets on 127.0.0.1: limits, framing errors, timeouts,
// keep-alive, concurrency, stop, static files (the router alone: test_http_router.cpp).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <regex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "orchestrator/http/client.h"
#include "orchestrator/http/router.h"
#include "orchestrator/http/server.h"
#include "tests/common/http_test_server.h"
#include "tests/orchestrator/support/http_test_util.h"
#include "tests/orchestrator/support/raw_connection.h"

namespace precon::orch {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

using testing::echo;
using testing::error_of;
using testing::expect_error;

// ---------------------------------------------------------------------------------------------
// Over sockets.

using testing::body_of;
using testing::RawConnection;
using testing::status_of;

struct TestServer {
  explicit TestServer(ServerOptions options = {})
      : router({"admin-token", [this](const std::string& m) {
                  std::lock_guard lock(mutex);
                  logged.push_back(m);
                }}) {
    router.add({"GET", "/echo", echo, false, "echo", {}});
    router.add({"POST", "/echo", echo, false, "echo_post", {}});
    router.add({"GET", "/echo/{id}", echo, false, "echo_id", {}});
    router.add({"POST", "/state", echo, true, "state", {}});
    router.add({"GET", "/boom", [](Request&) -> Response { throw std::runtime_error("boom"); }, false, "boom", {}});
    router.add({"GET", "/slow",
                [this](Request&) {
                  ++slow_started;
                  std::this_thread::sleep_for(std::chrono::milliseconds(300));
                  return json_response({{"slow", true}});
                },
                false, "slow", {}});
    if (!options.log) options.log = [this](const std::string& m) {
      std::lock_guard lock(mutex);
      logged.push_back(m);
    };
    server = std::make_unique<HttpServer>(router, std::move(options));
  }
  std::string url() const { return server->url(); }

  // Before the router and server: both log here until the server is destroyed.
  std::mutex mutex;
  std::vector<std::string> logged;
  std::atomic<int> slow_started{0};
  Router router;
  std::unique_ptr<HttpServer> server;
};

TEST(HttpServer, RoutesStatusesAndHookOverASocket) {
  std::mutex mutex;
  std::vector<std::pair<std::string, int>> seen;
  ServerOptions options;
  options.on_request = [&](const Request& request, const Response& response, double seconds) {
    EXPECT_GE(seconds, 0);
    std::lock_guard lock(mutex);
    seen.emplace_back(request.route, response.status);
  };
  TestServer t(options);
  t.server->start();
  const std::string url = t.url();

  ClientResponse r = http_request(url, "GET", "/echo/17?x=a%26b&y=2");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.at("content-type"), "application/json");
  json body = json::parse(r.body);
  EXPECT_EQ(body["params"]["id"], "17");
  EXPECT_EQ(body["query"]["x"], "a&b");
  EXPECT_EQ(body["route"], "echo_id");
  EXPECT_EQ(body["remote"].get<std::string>().rfind("127.0.0.1:", 0), 0u);

  r = http_request(url, "POST", "/echo", "{\"k\": [1, 2]}");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["body"], "{\"k\": [1, 2]}");

  r = http_request(url, "GET", "/nope");
  expect_error(r.status, r.body, 404, "not_found");
  r = http_request(url, "PUT", "/echo");
  expect_error(r.status, r.body, 405, "method_not_allowed");
  EXPECT_EQ(r.headers.at("allow"), "GET, HEAD, POST");
  r = http_request(url, "POST", "/state", "{}");
  expect_error(r.status, r.body, 401, "unauthorized");
  r = http_request(url, "POST", "/state", "{}", {{"Authorization", "Bearer admin-token"}});
  EXPECT_EQ(r.status, 200);

  // A throwing handler answers 500 in the one shape, is logged, and the server keeps serving.
  r = http_request(url, "GET", "/boom");
  expect_error(r.status, r.body, 500, "internal");
  EXPECT_EQ(http_request(url, "GET", "/echo").status, 200);

  t.server->stop();
  {
    std::lock_guard lock(t.mutex);
    ASSERT_EQ(t.logged.size(), 1u);
    EXPECT_NE(t.logged[0].find("GET /boom (route boom): boom"), std::string::npos) << t.logged[0];
  }
  std::lock_guard lock(mutex);
  const std::vector<std::pair<std::string, int>> want = {{"echo_id", 200}, {"echo_post", 200}, {"", 404}, {"", 405},
                                                         {"state", 401},   {"state", 200},     {"boom", 500},
                                                         {"echo", 200}};
  EXPECT_EQ(seen, want);
}

// Offloaded routes run on the worker pool: while its thread is busy and its queue full, one more
// is answered 503 busy at once, and routes on the io threads (/echo here, /healthz in the
// controller) answer meanwhile; what was queued is answered once the pool is free.
TEST(HttpServer, OffloadedRoutesRunOnABoundedPoolAndAFullQueueAnswers503) {
  std::mutex mutex;
  std::condition_variable changed;
  int entered = 0;
  bool release = false;
  ServerOptions options;
  options.workers = 1;
  options.worker_queue = 1;
  TestServer t(options);
  Route heavy{"GET", "/heavy", [&](Request&) {
                std::unique_lock lock(mutex);
                ++entered;
                changed.notify_all();
                changed.wait(lock, [&] { return release; });
                return json_response({{"heavy", true}});
              },
              false, "heavy", {}};
  heavy.offload = true;
  t.router.add(heavy);
  t.server->start();
  const std::string url = t.url();
  ClientResponse first;
  std::thread a([&] { first = http_request(url, "GET", "/heavy"); });
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return entered == 1; }));
  }
  // Two more: whichever reaches the pool first waits in its queue of one, the other is refused.
  std::atomic<int> refused{0};
  ClientResponse second, third;
  const auto ask = [&](ClientResponse& r) {
    r = http_request(url, "GET", "/heavy");
    if (r.status == 503) ++refused;
  };
  std::thread b([&] { ask(second); });
  std::thread c([&] { ask(third); });
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (refused == 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(refused, 1);
  const auto start = Clock::now();
  EXPECT_EQ(http_request(url, "GET", "/echo").status, 200);
  EXPECT_LT(seconds_since(start), 1.0);
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(entered, 1);
    release = true;
  }
  changed.notify_all();
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(first.status, 200) << first.body;
  const ClientResponse& busy = second.status == 503 ? second : third;
  const ClientResponse& queued = second.status == 503 ? third : second;
  expect_error(busy.status, busy.body, 503, "busy");
  EXPECT_EQ(busy.headers.at("retry-after"), "1");
  EXPECT_EQ(queued.status, 200) << queued.body;
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(entered, 2);
  }
  RawConnection head(t.server->port());
  ASSERT_TRUE(head.send("HEAD /heavy HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string answer = head.read_head();
  EXPECT_EQ(status_of(answer), 200) << answer;
  EXPECT_NE(answer.find("Content-Length: 14"), std::string::npos) << answer;  // {"heavy":true}
}

TEST(HttpServer, BindsLoopbackByDefaultAndReportsBindErrors) {
  EXPECT_EQ(ServerOptions{}.bind, "127.0.0.1");
  TestServer t;
  t.server->start();
  EXPECT_NE(t.server->port(), 0);
  EXPECT_EQ(t.url(), "http://127.0.0.1:" + std::to_string(t.server->port()));

  ServerOptions taken;
  taken.port = t.server->port();
  TestServer second(taken);
  try {
    second.server->start();
    FAIL() << "a second server on the same port started";
  } catch (const ServerError& e) {
    EXPECT_NE(std::string(e.what()).find("already in use"), std::string::npos) << e.what();
  }
  ServerOptions bad;
  bad.bind = "localhost:80";
  TestServer third(bad);
  EXPECT_THROW(third.server->start(), ServerError);
}

TEST(HttpServer, BodyLimitAnswers413AndKeepsServing) {
  ServerOptions options;
  options.body_limit = 1024;
  TestServer t(options);
  t.server->start();
  ClientResponse r = http_request(t.url(), "POST", "/echo", std::string(4096, 'x'));
  expect_error(r.status, r.body, 413, "payload_too_large");
  r = http_request(t.url(), "POST", "/echo", std::string(1024, 'y'));
  EXPECT_EQ(r.status, 200);

  // A chunked body is counted as it arrives.
  RawConnection raw(t.server->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" +
                       std::string(0x800, 'z') + "\r\n0\r\n\r\n"));
  const std::string response = raw.read_response();
  expect_error(status_of(response), body_of(response), 413, "payload_too_large");
  EXPECT_TRUE(raw.closed_by_peer());
  EXPECT_EQ(http_request(t.url(), "GET", "/echo").status, 200);
}

TEST(HttpServer, MalformedRequestsGet400) {
  TestServer t;
  t.server->start();
  for (const std::string bad : {"BLAH\r\n\r\n", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n",
                                "GET / HTTP/9.9\r\n\r\n", "GET / HTTP/1.1\r\nBad Header\r\n\r\n"}) {
    RawConnection raw(t.server->port());
    ASSERT_TRUE(raw.connected());
    ASSERT_TRUE(raw.send(bad));
    const std::string response = raw.read_response();
    expect_error(status_of(response), body_of(response), 400, "bad_request");
    EXPECT_TRUE(raw.closed_by_peer());
  }
  EXPECT_EQ(http_request(t.url(), "GET", "/echo").status, 200);
}

// A body the server does not know how to frame must not be read as the next request (request
// smuggling): the answer closes the connection, and what followed is never answered.
TEST(HttpServer, UnsupportedTransferEncodingIsRefusedAndTheConnectionClosed) {
  TestServer t;
  t.server->start();
  const std::string smuggled = "GET /echo/smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::vector<std::pair<std::string, int>> cases = {
      {"Transfer-Encoding: gzip\r\n", 501},
      {"Transfer-Encoding: chunked, gzip\r\n", 501},
      {"Transfer-Encoding: gzip, chunked\r\n", 501},
      {"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", 501},
      {"Transfer-Encoding: gzip\r\nContent-Length: " + std::to_string(smuggled.size()) + "\r\n", 400},
  };
  for (const auto& [fields, status] : cases) {
    SCOPED_TRACE(fields);
    RawConnection raw(t.server->port());
    ASSERT_TRUE(raw.connected());
    ASSERT_TRUE(raw.send("POST /echo HTTP/1.1\r\nHost: x\r\n" + fields + "\r\n" + smuggled));
    const std::string response = raw.read_response();
    expect_error(status_of(response), body_of(response), status,
                 status == 501 ? "unsupported_transfer_encoding" : "bad_framing");
    bool closed = false;
    const std::string rest = raw.read_until_closed(&closed);
    EXPECT_TRUE(closed);
    EXPECT_EQ(rest, "") << "the body was answered as a request";
  }
  // Plain chunked still works.
  RawConnection raw(t.server->port());
  ASSERT_TRUE(raw.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"));
  const std::string response = raw.read_response();
  ASSERT_EQ(status_of(response), 200) << response;
  EXPECT_EQ(json::parse(body_of(response))["body"], "ok");
}

// A state-changing request without the token is answered on its header: no "100 Continue", no
// reading (or waiting for) a body of any size.
TEST(HttpServer, UnauthenticatedBodiesAreRefusedBeforeTheyAreRead) {
  ServerOptions options;
  options.read_timeout = std::chrono::seconds(20);
  TestServer t(options);
  t.server->start();
  for (const std::string expect : {"Expect: 100-continue\r\n", ""}) {
    SCOPED_TRACE(expect);
    RawConnection raw(t.server->port());
    const auto start = Clock::now();
    ASSERT_TRUE(raw.send("POST /state HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n" + expect + "\r\n"));
    const std::string response = raw.read_response();
    expect_error(status_of(response), body_of(response), 401, "unauthorized");
    EXPECT_LT(seconds_since(start), 3.0);
    EXPECT_TRUE(raw.closed_by_peer());
  }
  // A wrong token, and a route that does not exist, are refused the same way.
  RawConnection wrong(t.server->port());
  ASSERT_TRUE(wrong.send("POST /state HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Length: 10\r\n\r\n"));
  EXPECT_EQ(status_of(wrong.read_response()), 401);
  RawConnection nowhere(t.server->port());
  ASSERT_TRUE(nowhere.send("POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(status_of(nowhere.read_response()), 404);
  // With the token, "100 Continue" invites the body, which is read and answered.
  RawConnection right(t.server->port());
  ASSERT_TRUE(right.send("POST /state HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-token\r\n"
                         "Content-Length: 2\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(right.read_head(), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(right.send("{}"));
  const std::string response = right.read_response();
  ASSERT_EQ(status_of(response), 200) << response;
  EXPECT_EQ(json::parse(body_of(response))["body"], "{}");
}

TEST(HttpServer, StalledRequestIsAnswered408AndClosed) {
  ServerOptions options;
  options.read_timeout = std::chrono::milliseconds(400);
  TestServer t(options);
  t.server->start();
  for (const std::string partial : {"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf a bo",
                                    "GET /echo HTTP/1.1\r\nHost: x\r\nX-Half: a hea"}) {
    RawConnection raw(t.server->port());
    const auto start = Clock::now();
    ASSERT_TRUE(raw.send(partial));
    const std::string response = raw.read_response();
    expect_error(status_of(response), body_of(response), 408, "request_timeout");
    EXPECT_GT(seconds_since(start), 0.3);
    EXPECT_LT(seconds_since(start), 3.0);
    EXPECT_TRUE(raw.closed_by_peer());
  }
  EXPECT_EQ(http_request(t.url(), "GET", "/echo").status, 200);
}

TEST(HttpServer, HeadIsAnsweredLikeGetWithoutTheBody) {
  TestServer t;
  t.server->start();
  const ClientResponse get = http_request(t.url(), "GET", "/echo/7");
  ASSERT_EQ(get.status, 200);
  RawConnection raw(t.server->port());
  ASSERT_TRUE(raw.send("HEAD /echo/7 HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string head = raw.read_head();
  ASSERT_EQ(status_of(head), 200) << head;
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EXPECT_NE(head.find("content-length: " + std::to_string(get.body.size()) + "\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("content-type: application/json"), std::string::npos) << head;
  // No body followed: the next answer on the connection starts right after the header.
  ASSERT_TRUE(raw.send("GET /echo/8 HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string next = raw.read_response();
  ASSERT_EQ(next.rfind("HTTP/1.1 200", 0), 0u) << next;
  EXPECT_EQ(json::parse(body_of(next))["params"]["id"], "8");
  // HEAD on a POST-only route is not allowed; GET routes list HEAD in Allow.
  ASSERT_TRUE(raw.send("HEAD /state HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_of(raw.read_head()), 405);
}

TEST(HttpServer, StalledClientIsDroppedWhileOthersAreServed) {
  ServerOptions options;
  options.read_timeout = std::chrono::milliseconds(400);
  options.idle_timeout = std::chrono::milliseconds(400);
  TestServer t(options);
  t.server->start();

  RawConnection stalled(t.server->port());
  RawConnection silent(t.server->port());
  ASSERT_TRUE(stalled.connected() && silent.connected());
  const auto start = Clock::now();
  ASSERT_TRUE(stalled.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf a bo"));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(http_request(t.url(), "GET", "/echo").status, 200);
  EXPECT_TRUE(stalled.closed_by_peer());
  EXPECT_TRUE(silent.closed_by_peer());  // never sent a byte: the idle timeout
  const double waited = seconds_since(start);
  EXPECT_GT(waited, 0.3);
  EXPECT_LT(waited, 3.0);
  EXPECT_EQ(http_request(t.url(), "GET", "/echo").status, 200);
}

TEST(HttpServer, KeepAliveReusesOneConnection) {
  TestServer t;
  t.server->start();
  RawConnection raw(t.server->port());
  ASSERT_TRUE(raw.connected());
  std::string remote;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(raw.send("GET /echo/" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    const std::string response = raw.read_response();
    ASSERT_EQ(status_of(response), 200) << response;
    const json body = json::parse(body_of(response));
    EXPECT_EQ(body["params"]["id"], std::to_string(i));
    if (i == 0) remote = body["remote"];
    EXPECT_EQ(body["remote"], remote);  // the same client port: the same connection
  }
  // Pipelined: two requests in one write, two answers in order.
  ASSERT_TRUE(raw.send("GET /echo/a HTTP/1.1\r\nHost: x\r\n\r\nGET /echo/b HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(json::parse(body_of(raw.read_response()))["params"]["id"], "a");
  EXPECT_EQ(json::parse(body_of(raw.read_response()))["params"]["id"], "b");
  // "Connection: close" is honoured.
  ASSERT_TRUE(raw.send("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(status_of(raw.read_response()), 200);
  EXPECT_TRUE(raw.closed_by_peer());
}

TEST(HttpServer, ManyConcurrentClientsAreAllAnswered) {
  TestServer t;
  t.server->start();
  constexpr int kClients = 64, kRequests = 50;
  std::atomic<int> ok{0}, wrong{0};
  std::vector<std::thread> clients;
  const auto start = Clock::now();
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < kRequests; ++i) {
        try {
          const ClientResponse r =
              http_request(t.url(), "GET", "/echo/" + std::to_string(c) + "?i=" + std::to_string(i));
          const json body = json::parse(r.body);
          const bool right = r.status == 200 && body["params"]["id"] == std::to_string(c) &&
                             body["query"]["i"] == std::to_string(i);
          ++(right ? ok : wrong);
        } catch (const std::exception&) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(ok, kClients * kRequests);
  EXPECT_EQ(wrong, 0);
  std::printf("[ info ] %d requests from %d clients in %.2f s\n", kClients * kRequests, kClients, seconds_since(start));
}

TEST(HttpServer, StopLetsRequestsInProgressFinish) {
  ServerOptions options;
  options.threads = 4;
  TestServer t(options);
  t.server->start();
  const std::string url = t.url();
  RawConnection idle(t.server->port());  // a kept-alive connection doing nothing
  ASSERT_TRUE(idle.connected());
  ASSERT_TRUE(idle.send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_EQ(status_of(idle.read_response()), 200);

  std::vector<ClientResponse> answers(4);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] { answers[i] = http_request(url, "GET", "/slow"); });
  }
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (t.slow_started < 4 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(t.slow_started, 4);
  const auto start = Clock::now();
  t.server->stop();
  const double took = seconds_since(start);
  for (std::thread& client : clients) client.join();
  for (const ClientResponse& answer : answers) {
    EXPECT_EQ(answer.status, 200);
    EXPECT_EQ(answer.body, "{\"slow\":true}");
  }
  EXPECT_LT(took, 2.0);
  EXPECT_TRUE(idle.closed_by_peer());
  try {
    http_request(url, "GET", "/echo");
    FAIL() << "the stopped server answered";
  } catch (const ClientError& e) {
    EXPECT_NE(std::string(e.what()).find("connection refused"), std::string::npos) << e.what();
  }
  t.server->stop();  // idempotent
}

// A connection that is still sending its request when the stop timeout passes is cut, and the
// log names it and what it was doing.
TEST(HttpServer, StopSaysWhichConnectionsItCut) {
  ServerOptions options;
  options.stop_timeout = std::chrono::milliseconds(300);
  TestServer t(options);
  t.server->start();
  RawConnection slow(t.server->port());
  ASSERT_TRUE(slow.connected());
  ASSERT_TRUE(slow.send("GET /echo HTTP/1.1\r\nHost: x\r\n"));  // the header never ends
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the server has read it: reading a request
  t.server->stop();
  EXPECT_TRUE(slow.closed_by_peer());
  std::lock_guard lock(t.mutex);
  ASSERT_EQ(t.logged.size(), 1u);
  EXPECT_TRUE(std::regex_search(
      t.logged[0], std::regex("^stopping: 1 connection\\(s\\) still busy after the stop timeout are cut: "
                              "127\\.0\\.0\\.1:[0-9]+ \\(reading a request\\)$")))
      << t.logged[0];
}

struct StaticDir {
  StaticDir() {
    std::random_device rd;
    root = fs::temp_directory_path() / ("precon_http_test_" + std::to_string(rd()));
    fs::create_directories(root / "www" / "assets");
    const auto write = [](const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; };
    write(root / "secret.txt", "secret");
    write(root / "www" / "index.html", "<h1>precon</h1>");
    write(root / "www" / "assets" / "app.js", "console.log(1)");
    write(root / "www" / "assets" / "app.js.map", "{}");
    write(root / "www" / "assets" / "style.css", "body{}");
    write(root / "www" / "assets" / "logo.svg", "<svg/>");
    write(root / "www" / "assets" / "logo.png", std::string("\x89PNG\r\n\x1a\n\0", 9));
    fs::create_symlink(root / "secret.txt", root / "www" / "link.txt");
  }
  ~StaticDir() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  fs::path root;
};

TEST(HttpServer, StaticFilesWithTypesAndNoTraversal) {
  StaticDir dir;
  TestServer t;
  t.router.add_static("/", dir.root / "www");
  t.server->start();
  const std::string url = t.url();

  const auto get = [&](const std::string& target) { return http_request(url, "GET", target); };
  ClientResponse r = get("/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "<h1>precon</h1>");
  EXPECT_EQ(r.headers.at("content-type"), "text/html; charset=utf-8");
  const std::vector<std::pair<std::string, std::string>> types = {
      {"/assets/app.js", "text/javascript; charset=utf-8"}, {"/assets/app.js.map", "application/json"},
      {"/assets/style.css", "text/css; charset=utf-8"},     {"/assets/logo.svg", "image/svg+xml"},
      {"/assets/logo.png", "image/png"},                    {"/index.html", "text/html; charset=utf-8"}};
  for (const auto& [target, type] : types) {
    r = get(target);
    EXPECT_EQ(r.status, 200) << target;
    EXPECT_EQ(r.headers.at("content-type"), type) << target;
  }
  EXPECT_EQ(get("/assets/logo.png").body.size(), 9u);
  EXPECT_EQ(get("/echo").status, 200);  // routes win over the catch-all

  for (const std::string target : {"/..%2fsecret.txt", "/%2e%2e/secret.txt", "/assets/..%2F..%2Fsecret.txt",
                                   "/../secret.txt", "/link.txt"}) {
    r = get(target);
    expect_error(r.status, r.body, 403, "forbidden");
    EXPECT_EQ(r.body.find("secret\""), std::string::npos);
  }
  r = get("/assets/missing.js");
  expect_error(r.status, r.body, 404, "not_found");
  r = http_request(url, "POST", "/unknown", "{}");  // the GET catch-all does not make this a 405
  expect_error(r.status, r.body, 404, "not_found");

  expect_error(static_file(dir.root / "www", "/etc/passwd").status, static_file(dir.root / "www", "/etc/passwd").body,
               403, "forbidden");
  EXPECT_EQ(static_file(dir.root / "www", "assets/../index.html").status, 403);
}

TEST(HttpClient, ClearErrorsWhenTheControllerIsAwayOrSilent) {
  uint16_t port = 0;
  {
    TestServer t;
    t.server->start();
    port = t.server->port();
  }
  try {
    http_request("http://127.0.0.1:" + std::to_string(port), "GET", "/echo");
    FAIL() << "connected to a stopped server";
  } catch (const ClientError& e) {
    EXPECT_NE(std::string(e.what()).find("is `precon serve` running?"), std::string::npos) << e.what();
  }
  EXPECT_THROW(http_request("ftp://127.0.0.1:1", "GET", "/"), ClientError);

  // A listening socket that never answers: the connection succeeds, the answer times out.
  test::SilentListener silent;
  const auto start = Clock::now();
  try {
    http_request(silent.base_url(), "GET", "/x", "", {}, std::chrono::milliseconds(300));
    FAIL() << "a silent server answered";
  } catch (const ClientError& e) {
    EXPECT_NE(std::string(e.what()).find("did not answer"), std::string::npos) << e.what();
  }
  EXPECT_LT(seconds_since(start), 2.0);
}

}  // namespace
}  // namespace precon::orch
