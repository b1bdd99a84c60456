// A controller test fixture: a temporary directory with token shards, recipe text for a tiny
// GPT, and helpers to call the API over a real socket.
#pragma once

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "orchestrator/http/client.h"
#include "orchestrator/service/controller.h"
#include "worker/data/shard.h"

namespace precon::orch::testing {

namespace fs = std::filesystem;

// A loopback port that was free a moment ago, for a server another process binds.
inline uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// While it lives, every precon-train started from this process (Slurm jobs inherit the
// environment) sleeps `ms` after each step (PRECON_FAULT_STEP_PACE_MS), so a run outlasts a fault
// whatever the machine's load.
struct PacedSteps {
  explicit PacedSteps(int ms) { ::setenv("PRECON_FAULT_STEP_PACE_MS", std::to_string(ms).c_str(), 1); }
  ~PacedSteps() { ::unsetenv("PRECON_FAULT_STEP_PACE_MS"); }
  PacedSteps(const PacedSteps&) = delete;
  PacedSteps& operator=(const PacedSteps&) = delete;
};


class ControllerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("precon_ctl_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::mt19937 rng(3);
    std::vector<uint16_t> tokens(8000);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<uint16_t>(((i % 13) * 5 + (rng() % 5 == 0 ? rng() % 50 : 0)) % 61);
    worker::write_shard(dir_ / "train.bin", tokens);
    worker::write_shard(dir_ / "val.bin", std::vector<uint16_t>(tokens.begin(), tokens.begin() + 2000));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // What every controller test starts from: this test's database and run root, the real trainer,
  // the tests' admin token ("admin-secret"), a 50-ms poll, a 2-s stop grace and no log. A test
  // changes what it exercises.
  ControllerOptions controller_options(int cpu_slots = 2) const {
    ControllerOptions o;
    o.db = dir_ / "precon.db";
    o.run_root = dir_ / "runs";
#ifdef PRECON_TRAIN_BIN
    o.trainer = PRECON_TRAIN_BIN;
#endif
    o.cpu_slots = cpu_slots;
    o.admin_token = "admin-secret";
    o.poll_interval = std::chrono::milliseconds(50);
    o.stop_grace = std::chrono::milliseconds(2000);
    o.log = [](const std::string&) {};
    return o;
  }

  // A tiny GPT recipe; `extra` is appended (e.g. a [sweep] table).
  std::string recipe(int steps, const std::string& extra) const {
    return "[experiment]\nname = \"tiny\"\n[model]\nn_layer = 1\nn_head = 2\nd_model = 16\nseq_len = 16\nvocab_size = 61\n"
           "[data]\ntrain = \"" + (dir_ / "train.bin").string() + "\"\nval = \"" + (dir_ / "val.bin").string() +
           "\"\n[train]\nsteps = " + std::to_string(steps) +
           "\nbatch_size = 4\neval_every = 5\neval_batches = 2\ncheckpoint_every = 10\nthreads = 1\nlog_every = 1\n"
           "[optimizer]\nname = \"adamw\"\nlr = 0.003\nwarmup_steps = 0\n" + extra;
  }

  static nlohmann::json get(const std::string& url, const std::string& target, int expect = 200) {
    ClientResponse r = http_request(url, "GET", target);
    EXPECT_EQ(r.status, expect) << target << ": " << r.body;
    return nlohmann::json::parse(r.body, nullptr, false);
  }
  static ClientResponse post(const std::string& url, const std::string& target, const std::string& body,
                             const std::string& token) {
    std::map<std::string, std::string> h{{"Content-Type", "application/json"}};
    if (!token.empty()) h["Authorization"] = "Bearer " + token;
    return http_request(url, "POST", target, body, h);
  }

  // Submits a recipe with the tests' admin token ("admin-secret"); the new experiment's id, or 0.
  static int64_t submit(const std::string& url, const std::string& text, int expect = 201) {
    ClientResponse r = post(url, "/api/v1/experiments",
                            nlohmann::json{{"recipe", text}, {"source", "t.toml"}}.dump(), "admin-secret");
    EXPECT_EQ(r.status, expect) << r.body;
    nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("id") ? j["id"].get<int64_t>() : 0;
  }
  // Waits until the experiment is no longer running.
  static bool done(const std::string& url, int64_t id, std::chrono::seconds limit = std::chrono::seconds(120)) {
    return wait_for([&] { return get(url, "/api/v1/experiments/" + std::to_string(id))["state"] != "running"; }, limit);
  }

  // Polls until pred() or the deadline; returns pred().
  template <class Pred>
  static bool wait_for(Pred pred, std::chrono::seconds limit) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return pred();
  }

  // How often a trial ended and how often an attempt of it was adopted, from an events answer.
  struct EndingsAndAdoptions {
    int endings = 0, adoptions = 0;
  };
  static EndingsAndAdoptions endings_and_adoptions(const nlohmann::json& events, int64_t trial_id) {
    EndingsAndAdoptions n;
    for (const nlohmann::json& e : events["events"]) {
      if (e["trial_id"] != trial_id) continue;
      const std::string kind = e["kind"];
      n.endings += kind == "trial_completed" || kind == "trial_failed" || kind == "trial_cancelled" || kind == "trial_pruned";
      n.adoptions += kind == "attempt_adopted";
    }
    return n;
  }

  fs::path dir_;
};

}  // namespace precon::orch::testing
