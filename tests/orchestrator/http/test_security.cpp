// The HTTP server against hostile clients, over sockets on loopback: connection caps (in all and
// per client address), slow bodies that hold every connection they may, oversized headers,
// deeply nested JSON, and static paths that try to leave their directory (encoded, double
// encoded, with NUL bytes and backslashes).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "orchestrator/http/client.h"
#include "orchestrator/http/router.h"
#include "orchestrator/http/server.h"
#include "tests/orchestrator/support/client_from.h"
#include "tests/orchestrator/support/http_test_util.h"
#include "tests/orchestrator/support/raw_connection.h"

namespace precon::orch::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Server {
  explicit Server(ServerOptions options = {}) : router({"admin-token", [](const std::string&) {}}) {
    router.add({"GET", "/echo", echo, false, "echo", {}});
    router.add({"POST", "/json", [](Request& request) { return json_response(json_body(request)); }, false, "json", {}});
    router.add({"POST", "/admin", echo, true, "admin", {}});
    // As a worker's report: a token of its own, checked by the handler.
    router.add({"POST", "/report", echo, false, "report", [](const Request& r) { return !bearer_token(r).empty(); }});
    options.log = [](const std::string&) {};
    server = std::make_unique<HttpServer>(router, std::move(options));
    server->start();
  }
  uint16_t port() const { return server->port(); }
  Router router;
  std::unique_ptr<HttpServer> server;
};

// Polls until pred() or 10 s; the server notices a closed connection asynchronously.
template <class Pred>
bool eventually(Pred pred) {
  const auto end = Clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void expect_too_many(const std::string& response) {
  SCOPED_TRACE(response);
  expect_error(status_of(response), body_of(response), 503, "too_many_connections");
  EXPECT_NE(response.find("Retry-After: 1\r\n"), std::string::npos);
}

// Over a cap, a new connection takes the place of an idle one; when every connection under the
// cap is busy with a request (its header read, its body coming), it is answered 503 and closed.
TEST(HttpSecurity, ConnectionsOverTheCapsAreAnswered503WhenEveryOneIsBusy) {
  ServerOptions options;
  options.max_connections = 4;
  options.max_connections_per_address = 3;
  Server s(options);
  const std::string partial = "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n[";
  std::vector<std::unique_ptr<ClientFrom>> busy;
  for (int i = 0; i < 3; ++i) {
    busy.push_back(std::make_unique<ClientFrom>("127.0.0.1", s.port()));
    ASSERT_TRUE(busy.back()->send(partial));
  }
  // Its address's cap is reached and no connection of it is idle: refused.
  ASSERT_TRUE(eventually([&] {
    ClientFrom fourth("127.0.0.1", s.port());
    fourth.send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string answer = fourth.read_all();
    if (status_of(answer) != 503) return false;
    expect_too_many(answer);
    return true;
  }));
  // Another address gets the last slot, and holds it idle.
  ClientFrom other("127.0.0.2", s.port());
  ASSERT_EQ(other.get("/echo"), 200);
  // The server is full; a third address takes the idle connection's place once that has waited
  // evictable_after: it is closed.
  std::this_thread::sleep_for(options.evictable_after + std::chrono::milliseconds(100));
  ClientFrom third_address("127.0.0.3", s.port());
  ASSERT_TRUE(third_address.send(partial));
  EXPECT_TRUE(other.read_all().empty());  // closed without another answer
  // Now every connection is busy: every address is refused.
  ClientFrom fourth_address("127.0.0.4", s.port());
  ASSERT_TRUE(fourth_address.send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"));
  expect_too_many(fourth_address.read_all());
  busy.pop_back();
  // A slot that frees up (its client gone mid-request) is given again.
  EXPECT_TRUE(eventually([&] { return ClientFrom("127.0.0.4", s.port()).get("/echo") == 200; }));
}

// 256 idle connections from loopback (the cap per address), half of them silent since they
// connected, do not lock out the other loopback clients (the CLI, the workers): each new one takes
// the place of the connection idle the longest.
TEST(HttpSecurity, IdleConnectionsAtTheCapGiveWayToNewClientsOldestFirst) {
  ServerOptions options;
  options.first_request_timeout = std::chrono::seconds(60);  // this test's silent ones stay
  Server s(options);
  const size_t cap = options.max_connections_per_address;
  std::vector<std::unique_ptr<ClientFrom>> idle;
  for (size_t i = 0; i < cap; ++i) {
    idle.push_back(std::make_unique<ClientFrom>("127.0.0.1", s.port()));
    ASSERT_TRUE(idle.back()->connected());
    if (i < cap / 2) {
      ASSERT_EQ(idle.back()->get("/echo"), 200) << i;  // served, then idle
    }
  }
  std::this_thread::sleep_for(options.evictable_after + std::chrono::milliseconds(100));
  const std::string url = "http://127.0.0.1:" + std::to_string(s.port());
  ClientResponse r = http_request(url, "POST", "/report", "{}", {{"Authorization", "Bearer trial-token"}});
  EXPECT_EQ(r.status, 200) << r.body;
  r = http_request(url, "POST", "/admin", "{}", {{"Authorization", "Bearer admin-token"}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(http_request(url, "GET", "/echo").status, 200);
  // The oldest idle connection made room; the newest silent one is still served.
  EXPECT_TRUE(idle.front()->read_all().empty());
  EXPECT_EQ(idle.back()->get("/echo"), 200);
}

// A connection that sends nothing is closed after first_request_timeout; one that has been
// answered waits for its next request up to idle_timeout.
TEST(HttpSecurity, SilentConnectionsAreClosedSoonerThanIdleOnes) {
  ServerOptions options;
  options.first_request_timeout = std::chrono::milliseconds(300);
  options.idle_timeout = std::chrono::seconds(30);
  Server s(options);
  ClientFrom answered("127.0.0.1", s.port());
  ASSERT_EQ(answered.get("/echo"), 200);
  ClientFrom silent("127.0.0.1", s.port());
  ASSERT_TRUE(silent.connected());
  const auto start = Clock::now();
  EXPECT_TRUE(silent.read_all().empty());
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GT(waited, 0.2);
  EXPECT_LT(waited, 4.0);  // closed by the server, not by the 5-s receive timeout
  EXPECT_EQ(answered.get("/echo"), 200);
}

// One address opens every connection it may and sends its request bodies a byte at a time.
// Clients elsewhere are served meanwhile, and the read timeout frees the slots.
TEST(HttpSecurity, SlowBodiesHoldingEveryConnectionTheyMayCannotStarveOthers) {
  ServerOptions options;
  options.max_connections_per_address = 4;
  options.read_timeout = std::chrono::seconds(1);
  options.idle_timeout = std::chrono::seconds(1);
  Server s(options);
  std::vector<std::unique_ptr<ClientFrom>> slow;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(std::make_unique<ClientFrom>("127.0.0.1", s.port()));
    ASSERT_TRUE(slow.back()->connected());
    ASSERT_TRUE(slow.back()->send("POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n["));
  }
  ASSERT_TRUE(eventually([&] {
    ClientFrom probe("127.0.0.1", s.port());
    probe.send("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    return status_of(probe.read_all()) == 503;
  }));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ClientFrom("127.0.0.2", s.port()).get("/echo"), 200);
  for (auto& c : slow) {
    const std::string answer = c->read_all();  // the read timeout answers 408 and closes
    expect_error(status_of(answer), body_of(answer), 408, "request_timeout");
    EXPECT_NE(answer.find("the request was not complete within 1000 ms"), std::string::npos) << answer;
  }
  EXPECT_TRUE(eventually([&] { return ClientFrom("127.0.0.1", s.port()).get("/echo") == 200; }));
}

TEST(HttpSecurity, OversizedHeadersAre431AndTheConnectionCloses) {
  Server s;
  const std::vector<std::string> headers = {
      "X-Big: " + std::string(16 * 1024, 'a') + "\r\n",  // one huge field
      [] {                                                // many small ones
        std::string many;
        for (int i = 0; i < 2000; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
        return many;
      }(),
      "Cookie: " + std::string(9000, 'c') + "\r\n",
  };
  for (const std::string& fields : headers) {
    RawConnection raw(s.port());
    ASSERT_TRUE(raw.connected());
    raw.send("GET /echo HTTP/1.1\r\nHost: x\r\n" + fields + "\r\n");
    const std::string response = raw.read_response();
    expect_error(status_of(response), body_of(response), 431, "headers_too_large");
    EXPECT_TRUE(raw.closed_by_peer());
  }
  // A long request target counts against the same limit.
  RawConnection raw(s.port());
  raw.send("GET /echo?q=" + std::string(20000, 'q') + " HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(raw.read_response()), 431);
  EXPECT_EQ(http_request("http://127.0.0.1:" + std::to_string(s.port()), "GET", "/echo").status, 200);
}

TEST(HttpSecurity, JsonBodiesNestedTooDeeplyAreRefusedBeforeParsing) {
  EXPECT_EQ(json_depth("{}"), 1u);
  EXPECT_EQ(json_depth(R"({"a": [1, {"b": []}]})"), 4u);
  EXPECT_EQ(json_depth(R"(["[[[[", "\"[[[", {"k]": "}}"}])"), 2u);  // brackets in strings do not count
  EXPECT_EQ(json_depth("12"), 0u);

  Server s;
  const std::string url = "http://127.0.0.1:" + std::to_string(s.port());
  const auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  ClientResponse r = http_request(url, "POST", "/json", nested(kMaxJsonDepth));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, nested(kMaxJsonDepth));
  for (const size_t depth : {kMaxJsonDepth + 1, size_t{100000}, size_t{2000000}}) {
    r = http_request(url, "POST", "/json", nested(depth));
    expect_error(r.status, r.body, 400, "bad_json");
    EXPECT_NE(r.body.find("deeper than 64"), std::string::npos) << r.body.substr(0, 200);
  }
  // Unbalanced: a megabyte of '[' is refused the same way.
  r = http_request(url, "POST", "/json", std::string(1 << 20, '['));
  expect_error(r.status, r.body, 400, "bad_json");
  r = http_request(url, "POST", "/json", R"({"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})");
  EXPECT_EQ(r.status, 200) << r.body;
}

struct StaticTree {
  StaticTree() {
    std::random_device rd;
    root = fs::temp_directory_path() / ("precon_sec_static_" + std::to_string(rd()));
    fs::create_directories(root / "www" / "assets");
    std::ofstream(root / "secret.txt") << "TOP-SECRET";
    std::ofstream(root / "www" / "index.html") << "<h1>precon</h1>";
    std::ofstream(root / "www" / "assets" / "app.js") << "1";
    fs::create_symlink(root / "secret.txt", root / "www" / "assets" / "link.js");
    fs::create_directory_symlink(root, root / "www" / "up");
  }
  ~StaticTree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  fs::path root;
};

// Paths that try to leave the static directory never serve what is outside it, however encoded.
TEST(HttpSecurity, StaticPathsCannotLeaveTheirDirectory) {
  StaticTree tree;
  Router router({"t", [](const std::string&) {}});
  router.add_static("/", tree.root / "www");
  ServerOptions options;
  options.log = [](const std::string&) {};
  HttpServer server(router, options);
  server.start();
  const std::vector<std::string> hostile = {
      "/../secret.txt",
      "/assets/../../secret.txt",
      "/%2e%2e/secret.txt",
      "/%2E%2E%2Fsecret.txt",
      "/assets/%2e%2e%2f%2e%2e%2fsecret.txt",
      "/.%2e/secret.txt",
      "/%252e%252e/secret.txt",        // double-encoded: one decoding leaves a literal name
      "/%252e%252e%252fsecret.txt",
      "/assets/%25%32%65%25%32%65/secret.txt",
      "/..%5csecret.txt",              // a backslash is not a separator here
      "/..\\secret.txt",
      "/assets/link.js",               // a symlink out of the tree
      "/up/secret.txt",                // a directory symlink out of the tree
      "/%00/../secret.txt",
      "/index.html%00.js",
      "//etc/passwd",
      "/%2fetc%2fpasswd",
      "/assets/..;/..;/secret.txt",
  };
  for (const std::string& target : hostile) {
    SCOPED_TRACE(target);
    RawConnection raw(server.port());
    ASSERT_TRUE(raw.send("GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    const std::string response = raw.read_response();
    const int status = status_of(response);
    EXPECT_TRUE(status == 400 || status == 403 || status == 404) << response;
    EXPECT_EQ(response.find("TOP-SECRET"), std::string::npos) << response;
    EXPECT_EQ(response.find("root:"), std::string::npos) << response;
  }
  // What is inside still serves.
  RawConnection raw(server.port());
  ASSERT_TRUE(raw.send("GET /assets/%61pp.js HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_of(raw.read_response()), 200);
}

TEST(HttpSecurity, OnlyLoopbackAddressesCountAsThisMachineOnly) {
  for (const char* local : {"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"}) {
    EXPECT_FALSE(reachable_from_other_machines(local)) << local;
  }
  for (const char* reachable : {"0.0.0.0", "::", "10.0.0.5", "192.168.1.1", "::ffff:10.0.0.1", "fe80::1"}) {
    EXPECT_TRUE(reachable_from_other_machines(reachable)) << reachable;
  }
  EXPECT_FALSE(reachable_from_other_machines("localhost:80"));  // not an address: start() refuses it
}

}  // namespace
}  // namespace precon::orch::testing
