// Restart safety: `precon serve` is killed with SIGKILL in the middle of a sweep and started
// again on the same database. Every trial must end exactly once, no worker may be launched twice
// for the same attempt, and no acknowledged metric may be lost.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>

#include "tests/orchestrator/support/controller_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

class Restart : public ControllerFixture {
 protected:
  // Starts `precon serve` on port (0: one the kernel picks free) and waits until it answers; its
  // URL, or "" when it exited first (the port was taken). The URL file it writes names the port.
  std::string serve(uint16_t port, pid_t* out) {
    const fs::path url_file = dir_ / "precon.db.url";
    fs::remove(url_file);
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string db = (dir_ / "precon.db").string(), runs = (dir_ / "runs").string(), p = std::to_string(port);
      ::setenv("PRECON_TOKEN", "admin-secret", 1);
      std::freopen((dir_ / "serve.log").c_str(), "a", stderr);
      execl(PRECON_BIN, PRECON_BIN, "serve", "--db", db.c_str(), "--runs", runs.c_str(), "--port", p.c_str(), "--cpus",
            "2", (char*)nullptr);
      _exit(127);
    }
    *out = pid;
    std::string url;
    bool exited = false;
    wait_for([&] {
      exited = ::waitpid(pid, nullptr, WNOHANG) == pid;
      if (exited) return true;
      std::ifstream(url_file) >> url;
      if (url.empty()) return false;
      try {
        return http_request(url, "GET", "/healthz").status == 200;
      } catch (const std::exception&) {
        return false;
      }
    }, std::chrono::seconds(60));  // returns as soon as it answers; sanitizer builds start slowly under load
    return exited ? "" : url;
  }

  // The highest step in a run directory's metrics.jsonl (the worker writes it with or without a
  // controller).
  static int64_t last_logged_step(const fs::path& run_dir) {
    std::ifstream in(run_dir / "metrics.jsonl");
    int64_t last = 0;
    for (std::string line; std::getline(in, line);) {
      const json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) last = std::max(last, j["step"].get<int64_t>());
    }
    return last;
  }
};

TEST_F(Restart, KillNineMidSweepThenRestartEndsEveryTrialExactlyOnce) {
  // At least 15 ms a step (set before the controller starts: its trainers inherit it): each trial
  // lasts 9 s or more, so the two are still running through the kill and the restart whatever the
  // machine's speed, and a sanitizer build need not train thousands of steps.
  const PacedSteps paced(15);
  pid_t controller = 0;
  const std::string url = serve(0, &controller);
  ASSERT_FALSE(url.empty()) << "precon serve exited at start; see " << (dir_ / "serve.log");
  const uint16_t port = static_cast<uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
  const int steps = 600;
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
  // The workers train on without a controller, their reports failing and kept for later.
  for (const json& b : before) {
    if (b["state"] != "running") continue;
    const fs::path run_dir = b["run_dir"].get<std::string>();
    const int64_t at_kill = b["last_step"];
    ASSERT_TRUE(wait_for([&] { return last_logged_step(run_dir) > at_kill + 20; }, std::chrono::seconds(60)))
        << run_dir << " did not advance";
  }

  // The same port: the workers' reports go to it. It was ours a moment ago (SO_REUSEADDR lets the
  // new server bind it at once), so a failure here is a real one.
  ASSERT_EQ(serve(port, &controller), url) << "the restarted precon serve did not answer; see " << (dir_ / "serve.log");
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
