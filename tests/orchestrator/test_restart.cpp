// Restart safety: `precon serve` is killed with SIGKILL in the middle of a sweep and started
// again on the same database. Every trial must end exactly once, no worker may be launched twice
// for the same attempt, and no acknowledged metric may be lost.
#include <signal.h>
#include <sys/wait.h>

#include "tests/orchestrator/controller_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

class Restart : public ControllerFixture {
 protected:
  pid_t serve(uint16_t port) {
    pid_t pid = fork();
    if (pid == 0) {
      const std::string db = (dir_ / "precon.db").string(), runs = (dir_ / "runs").string(), p = std::to_string(port);
      ::setenv("PRECON_TOKEN", "admin-secret", 1);
      std::freopen((dir_ / ("serve-" + p + ".log")).c_str(), "a", stderr);
      execl(PRECON_BIN, PRECON_BIN, "serve", "--db", db.c_str(), "--runs", runs.c_str(), "--port", p.c_str(), "--cpus",
            "2", (char*)nullptr);
      _exit(127);
    }
    const std::string url = "http://127.0.0.1:" + std::to_string(port);
    wait_for([&] {
      try {
        return http_request(url, "GET", "/healthz").status == 200;
      } catch (const std::exception&) {
        return false;
      }
    }, std::chrono::seconds(60));  // returns as soon as it answers; sanitizer builds start slowly under load
    return pid;
  }
};

TEST_F(Restart, KillNineMidSweepThenRestartEndsEveryTrialExactlyOnce) {
  const uint16_t port = free_port();  // not a fixed formula: parallel tests may hold any port
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  pid_t controller = serve(port);
  const int steps = 4000;
  ClientResponse r = post(url, "/api/v1/experiments",
                          json{{"recipe", recipe(steps, "[sweep]\nmax_concurrent = 2\n[sweep.parameters]\n"
                                                        "\"optimizer.lr\" = [0.001, 0.002, 0.003]\n")}}.dump(),
                          "admin-secret");
  ASSERT_EQ(r.status, 201) << r.body;
  const int64_t id = json::parse(r.body)["id"];
  const std::string trials_url = "/api/v1/experiments/" + std::to_string(id) + "/trials";
  // Kill the controller while two trials are running and reporting.
  ASSERT_TRUE(wait_for([&] {
    int running = 0;
    const json t = get(url, trials_url)["trials"];
    for (const json& x : t) running += x["state"] == "running" && x["last_step"].get<int64_t>() > 50;
    return running == 2;
  }, std::chrono::seconds(60)));
  const json before = get(url, trials_url)["trials"];
  ::kill(controller, SIGKILL);
  ::waitpid(controller, nullptr, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // workers keep training meanwhile

  controller = serve(port);
  ASSERT_TRUE(wait_for([&] { return get(url, "/api/v1/experiments/" + std::to_string(id))["state"] != "running"; },
                       std::chrono::seconds(300)));
  const json trials = get(url, trials_url)["trials"];
  ASSERT_EQ(trials.size(), 3u);
  const json events = get(url, "/api/v1/events?limit=10000&experiment=" + std::to_string(id));
  for (const json& t : trials) {
    const int64_t tid = t["id"];
    SCOPED_TRACE("trial " + std::to_string(tid));
    EXPECT_EQ(t["state"], "completed");
    const auto [endings, adoptions] = endings_and_adoptions(events, tid);
    EXPECT_EQ(endings, 1);
    // The two trials running at the kill were adopted, not launched again.
    json detail = get(url, "/api/v1/trials/" + std::to_string(tid));
    bool was_running = false;
    for (const json& b : before) was_running |= b["id"] == tid && b["state"] == "running";
    if (was_running) {
      EXPECT_EQ(adoptions, 1);
      EXPECT_EQ(detail["attempts"].size(), 1u) << detail["attempts"].dump();
    }
    // Every step's train_loss arrived exactly once (idempotent resends across the restart).
    json m = get(url, "/api/v1/trials/" + std::to_string(tid) + "/metrics?name=train_loss&max_points=0")["metrics"];
    ASSERT_EQ(m["train_loss"]["steps"].size(), static_cast<size_t>(steps));
    for (int s = 0; s < steps; ++s) ASSERT_EQ(m["train_loss"]["steps"][s], s + 1);
  }
  ::kill(controller, SIGTERM);
  ::waitpid(controller, nullptr, 0);
}

}  // namespace
}  // namespace precon::orch::testing
