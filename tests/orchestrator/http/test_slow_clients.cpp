// Slow clients from several addresses against the HTTP server's connection table, over sockets on
// loopback (127.0.0.0/8 is all loopback on Linux, so each address is another client): headers sent
// a byte at a time fill the table from four addresses, which the per-address cap alone does not
// stop. The header deadline closes them, the slowest give their places to new connections, and
// connections over the caps are still read from a reserve so that /healthz and the workers'
// reports are answered.
#include <algorithm>
#include <cstdio>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "orchestrator/http/router.h"
#include "orchestrator/http/server.h"
#include "tests/orchestrator/support/client_from.h"
#include "tests/orchestrator/support/http_test_util.h"

namespace precon::orch::testing {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A server with the routes that matter here: /healthz and a report (a token of its own, as a
// worker's) are reserved routes, /echo is not.
struct ReservingServer {
  explicit ReservingServer(ServerOptions options) : router({"admin-token", [](const std::string&) {}}) {
    Route health{"GET", "/healthz", [](Request&) { return json_response({{"ok", true}}); }, false, "healthz", {}};
    health.reserved = true;
    router.add(std::move(health));
    Route report{"POST", "/report", echo, false, "report", [](const Request& r) { return !bearer_token(r).empty(); }};
    report.reserved = true;
    router.add(std::move(report));
    router.add({"GET", "/echo", echo, false, "echo", {}});
    options.log = [](const std::string&) {};
    server = std::make_unique<HttpServer>(router, std::move(options));
    server->start();
  }
  uint16_t port() const { return server->port(); }
  Router router;
  std::unique_ptr<HttpServer> server;
};

// Connections from each of `sources` that send a request header one byte every `every` and never
// finish it, from a thread of their own. The first connection sends its first byte `head_start`
// before the others, so that its header is the one begun longest ago.
class SlowHeaders {
 public:
  SlowHeaders(const std::vector<std::string>& sources, size_t per_source, uint16_t port,
              std::chrono::milliseconds every, std::chrono::milliseconds head_start = {}) {
    for (size_t i = 0; i < per_source; ++i)
      for (const std::string& source : sources) clients_.push_back(std::make_unique<ClientFrom>(source.c_str(), port));
    clients_.front()->send(kHeader.substr(0, 1));
    std::this_thread::sleep_for(head_start);
    thread_ = std::thread([this, every] {
      for (size_t sent = 1; !stop_; ++sent) {
        for (size_t i = 0; i < clients_.size(); ++i) clients_[i]->send(kHeader.substr(sent - (i == 0 ? 0 : 1), 1));
        std::this_thread::sleep_for(every);
      }
    });
  }
  ~SlowHeaders() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  ClientFrom& operator[](size_t i) { return *clients_[i]; }
  size_t size() const { return clients_.size(); }

 private:
  inline static const std::string kHeader = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(8000, 'a');
  std::vector<std::unique_ptr<ClientFrom>> clients_;  // made before the thread starts, fixed after
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

const std::vector<std::string> kFourAddresses = {"127.0.0.10", "127.0.0.11", "127.0.0.12", "127.0.0.13"};

// One request on a new connection from `source`: the whole answer ("" when none came).
std::string ask(const char* source, uint16_t port, const std::string& request) {
  ClientFrom client(source, port);
  if (!client.send(request)) return "";
  return client.read_all();
}

double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Polls until pred() or 10 s.
template <class Pred>
bool within_10s(Pred pred) {
  const auto end = SteadyClock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (SteadyClock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// The table full of slow headers none of which may give its place yet: a connection over the caps
// is still read, from the reserve; /healthz and a report are answered (and the connection closed),
// anything else 503. A reserve filled by silent connections gives the oldest one's place to a new
// connection.
TEST(HttpSlowClients, ConnectionsOverTheCapsStillGetHealthzAndReportsAnswered) {
  ServerOptions options;
  options.max_connections = 64;
  options.max_connections_per_address = 16;
  options.evictable_after = std::chrono::seconds(60);  // no connection gives its place here
  options.header_timeout = std::chrono::seconds(60);   // nor does the header deadline close them
  options.reserved_connections = 4;
  ReservingServer s(options);
  SlowHeaders slow(kFourAddresses, 16, s.port(), std::chrono::milliseconds(200));
  // Full: a request for /echo is refused.
  ASSERT_TRUE(within_10s(
      [&] { return status_of(ask("127.0.0.1", s.port(), "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")) == 503; }));
  const std::string refused = ask("127.0.0.2", s.port(), "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  expect_error(status_of(refused), body_of(refused), 503, "too_many_connections");
  EXPECT_NE(refused.find("Retry-After: 1\r\n"), std::string::npos) << refused;

  for (const char* source : {"127.0.0.1", "127.0.0.10"}) {  // a client elsewhere, and one of the slow addresses
    for (int i = 0; i < 10; ++i) {
      const auto start = SteadyClock::now();
      const std::string health = ask(source, s.port(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
      EXPECT_EQ(status_of(health), 200) << source << ": " << health;
      EXPECT_NE(health.find("Connection: close"), std::string::npos) << health;
      EXPECT_LT(seconds_since(start), 1.0) << source;  // answered, then closed by the server
    }
  }
  const std::string report = ask("127.0.0.1", s.port(),
                                 "POST /report HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(status_of(report), 200) << report;
  EXPECT_NE(body_of(report).find("\"route\":\"report\""), std::string::npos) << report;
  const std::string no_token = ask("127.0.0.1", s.port(), "POST /report HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(status_of(no_token), 401) << no_token;

  // Four silent connections fill the reserve (the answered ones have gone by then); the next
  // connection takes the oldest one's place.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<std::unique_ptr<ClientFrom>> silent;
  for (int i = 0; i < 4; ++i) {
    silent.push_back(std::make_unique<ClientFrom>("127.0.0.14", s.port()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string health = ask("127.0.0.1", s.port(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(health), 200) << health;
  bool closed = false;
  EXPECT_EQ(silent.front()->read_all(&closed), "");
  EXPECT_TRUE(closed);
}

// Once the slow headers may give their places, a new connection for any route takes the place of
// the header begun longest ago, which is closed unanswered; slow headers go before idle
// connections, and an idle client keeps its connection.
TEST(HttpSlowClients, TheSlowestHeaderGivesItsPlaceToANewConnection) {
  ServerOptions options;
  options.max_connections = 32;
  options.max_connections_per_address = 8;
  options.evictable_after = std::chrono::milliseconds(300);
  options.header_timeout = std::chrono::seconds(60);
  options.reserved_connections = 0;  // a connection the table cannot take is closed unanswered
  ReservingServer s(options);
  SlowHeaders slow(kFourAddresses, 8, s.port(), std::chrono::milliseconds(100), std::chrono::milliseconds(200));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ClientFrom idle("127.0.0.1", s.port());
  ASSERT_EQ(idle.get("/echo"), 200);
  bool closed = false;
  EXPECT_EQ(slow[0].read_all(&closed), "");  // the oldest header went, without an answer
  EXPECT_TRUE(closed);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the idle one may give its place now too
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(status_of(ask("127.0.0.2", s.port(), "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
              200) << i;
  }
  EXPECT_EQ(idle.get("/echo"), 200);  // slow headers went first
}

// A connection that never finishes its header is answered 408 and closed after header_timeout,
// though its bytes keep coming and the read timeout is far off; a body may take longer.
TEST(HttpSlowClients, AHeaderNotCompleteWithinTheHeaderTimeoutIs408) {
  ServerOptions options;
  options.header_timeout = std::chrono::milliseconds(500);
  options.read_timeout = std::chrono::seconds(30);
  ReservingServer s(options);
  const auto start = SteadyClock::now();
  SlowHeaders slow({"127.0.0.10"}, 1, s.port(), std::chrono::milliseconds(50));
  bool closed = false;
  const std::string answer = slow[0].read_all(&closed);
  const double waited = seconds_since(start);
  expect_error(status_of(answer), body_of(answer), 408, "request_timeout");
  EXPECT_NE(answer.find("the request header was not complete within 500 ms"), std::string::npos) << answer;
  EXPECT_TRUE(closed);
  EXPECT_GT(waited, 0.45);
  EXPECT_LT(waited, 4.0);  // closed by the server, not the client's 5-s receive timeout
  slow.stop();

  ClientFrom body("127.0.0.1", s.port());
  ASSERT_TRUE(body.send(
      "POST /report HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{"));
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  ASSERT_TRUE(body.send("}"));
  EXPECT_EQ(status_of(body.read_all()), 200);
}

// The case of the load test, smaller: 64 slow connections from each of four addresses fill the
// table (256 connections) with headers that never end, a byte every 200 ms, for 4 s, while
// /healthz is asked every 50 ms on a new connection from a fifth address: every probe is answered
// 200, quickly (before the reserve and the eviction, every one was answered 503).
TEST(HttpSlowClients, HealthzStaysFastWhileSlowHeadersFromFourAddressesFillTheTable) {
  ServerOptions options;
  options.max_connections = 256;
  options.max_connections_per_address = 64;
  ReservingServer s(options);
  SlowHeaders slow(kFourAddresses, 64, s.port(), std::chrono::milliseconds(200));
  ASSERT_TRUE(within_10s(
      [&] { return status_of(ask("127.0.0.1", s.port(), "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")) == 503; }));
  std::vector<double> latencies;
  const auto end = SteadyClock::now() + std::chrono::seconds(4);
  while (SteadyClock::now() < end) {
    const auto start = SteadyClock::now();
    const std::string health = ask("127.0.0.1", s.port(), "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    latencies.push_back(seconds_since(start));
    EXPECT_EQ(status_of(health), 200) << health;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::sort(latencies.begin(), latencies.end());
  const double p99 = latencies[latencies.size() * 99 / 100];
  std::printf("/healthz: %zu probes, p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", latencies.size(),
              latencies[latencies.size() / 2] * 1e3, p99 * 1e3, latencies.back() * 1e3);
  EXPECT_LT(p99, 0.25);  // loopback answers take a millisecond or two; ThreadSanitizer slows them
}

}  // namespace
}  // namespace precon::orch::testing
