// DNS rebinding: a page on another site points its own name at the controller's address and
// reads the API as same-origin. The browser still sends that name as Host, so the controller
// answers only its own names (421 otherwise), while the CLI, the dashboard and the workers, which
// use the address they were given, keep working. Over real sockets to a real Controller.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/orchestrator/support/controller_fixture.h"
#include "tests/orchestrator/support/raw_connection.h"

namespace precon::orch::testing {
namespace {

class HostHeader : public ControllerFixture {
 protected:
  std::unique_ptr<Controller> start(const std::string& bind, std::vector<std::string> allowed = {}) {
    ControllerOptions o = controller_options();
    o.bind = bind;
    o.allowed_hosts = std::move(allowed);
    auto c = std::make_unique<Controller>(o);
    c->start();
    return c;
  }
  // The status of GET target with this Host line ("" for none) over a fresh connection.
  static std::string ask(uint16_t port, const std::string& host_line, const std::string& target = "/healthz",
                         const std::string& version = "HTTP/1.1") {
    RawConnection c(port);
    if (!c.connected() || !c.send("GET " + target + " " + version + "\r\n" + host_line + "Connection: close\r\n\r\n"))
      return "";
    return c.read_response();
  }
  static int status(uint16_t port, const std::string& host) {
    return status_of(ask(port, host.empty() ? "" : "Host: " + host + "\r\n"));
  }
};

TEST_F(HostHeader, OnlyTheControllersOwnNamesAreAnswered) {
  auto c = start("127.0.0.1", {"precon.example.org"});
  const uint16_t port = c->port();
  const std::string p = ":" + std::to_string(port);
  for (const std::string& host : std::vector<std::string>{"127.0.0.1" + p, "localhost" + p, "LocalHost" + p, "[::1]" + p,
                                  "precon.example.org" + p, "PRECON.example.org" + p})
    EXPECT_EQ(status(port, host), 200) << host;
  for (const std::string& host : std::vector<std::string>{"evil.example" + p, "attacker.127.0.0.1.nip.io" + p, "127.0.0.1:1", "localhost",
                                  "precon.example.org", "127.0.0.1" + p + "x", "[::1" + p, std::string("")})
    EXPECT_EQ(status(port, host), 421) << host;
  // HTTP/1.0 had no Host header.
  EXPECT_EQ(status_of(ask(port, "", "/healthz", "HTTP/1.0")), 200);

  // The API's error shape, the name echoed, and nothing reaches the routes: no experiment made.
  const std::string answer = ask(port, "Host: evil.example" + p + "\r\n", "/api/v1/experiments");
  ASSERT_EQ(status_of(answer), 421) << answer;
  const nlohmann::json error = nlohmann::json::parse(body_of(answer))["error"];
  EXPECT_EQ(error["code"], "misdirected_request");
  EXPECT_NE(error["message"].get<std::string>().find("Host \"evil.example" + p + "\""), std::string::npos) << error;
  RawConnection post(port);
  const std::string body = nlohmann::json{{"recipe", recipe(2, "")}, {"source", "t.toml"}}.dump();
  ASSERT_TRUE(post.send("POST /api/v1/experiments HTTP/1.1\r\nHost: evil.example" + p +
                        "\r\nAuthorization: Bearer admin-secret\r\nContent-Type: application/json\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body));
  EXPECT_EQ(status_of(post.read_response()), 421);
  EXPECT_TRUE(get(c->url(), "/api/v1/experiments")["experiments"].empty());
}

// The trainers report with the Host of the URL they were handed: a sweep still completes.
TEST_F(HostHeader, WorkersReportThroughTheCheck) {
  auto c = start("127.0.0.1");
  const int64_t id = submit(c->url(), recipe(3, ""));
  ASSERT_TRUE(done(c->url(), id));
  EXPECT_EQ(get(c->url(), "/api/v1/experiments/" + std::to_string(id))["state"], "completed");
  const nlohmann::json trial = get(c->url(), "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0];
  EXPECT_EQ(trial["last_step"], 3) << trial;
}

// Bound to every interface: workers are handed this host's name, and any address of the machine
// typed in a browser is no rebinding; other names are still refused.
TEST_F(HostHeader, AWildcardBindAnswersThisHostsNameAndItsAddresses) {
  auto c = start("0.0.0.0");
  const uint16_t port = c->port();
  const std::string p = ":" + std::to_string(port);
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(status(port, std::string(name) + p), 200) << name;
  EXPECT_EQ(status(port, "10.1.2.3" + p), 200);
  EXPECT_EQ(status(port, "[fe80::1]" + p), 200);
  EXPECT_EQ(status(port, "evil.example" + p), 421);
  EXPECT_EQ(status(port, "10.1.2.3:1"), 421);
}

// An advertised URL (Slurm workers through a forwarded port) is answered at its own port.
TEST_F(HostHeader, AnAdvertisedUrlIsAnsweredAsGiven) {
  ControllerOptions o = controller_options();
  o.advertise_url = "http://login01.cluster:18080/";
  Controller c(o);
  c.start();
  EXPECT_EQ(status(c.port(), "login01.cluster:18080"), 200);
  EXPECT_EQ(status(c.port(), "login01.cluster:" + std::to_string(c.port())), 421);
}

}  // namespace
}  // namespace precon::orch::testing
