// The fixture of the tests against the Slurm test cluster (deploy/slurm/cluster.sh, started by a
// ctest fixture): tests/orchestrator/exec/test_slurm_cluster.cpp and tests/faults/test_slurm_faults.cpp.
// Without a reachable cluster the tests skip, except under CI=true, where they fail.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>

#include "orchestrator/exec/slurm_command.h"
#include "orchestrator/exec/slurm_executor.h"
#include "orchestrator/service/controller.h"
#include "tests/orchestrator/support/controller_fixture.h"

namespace precon::orch::testing {

using nlohmann::json;
using std::chrono::seconds;

inline CommandResult slurm(const std::vector<std::string>& argv) { return run_command(argv, seconds(30)); }

// The job's Slurm state, "" once Slurm no longer lists it as active.
inline std::string active_state(const std::string& job) {
  CommandResult r = slurm({"squeue", "-h", "-r", "-j", job, "-o", "%T"});
  return r.ok() ? r.out.substr(0, r.out.find('\n')) : "";
}

// MPI ranks started under the sanitizer build skip leak checking (OpenMPI's unloaded plugins
// leave allocations LeakSanitizer cannot attribute; tests/worker/parallel/test_data_tensor.cpp). They get it
// from this process's environment through the controller, sbatch and srun.
class RanksSkipLeakChecks {
 public:
  RanksSkipLeakChecks() {
    if (const char* v = std::getenv("ASAN_OPTIONS")) saved_ = v;
    had_ = std::getenv("ASAN_OPTIONS") != nullptr;
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  }
  ~RanksSkipLeakChecks() {
    if (had_) ::setenv("ASAN_OPTIONS", saved_.c_str(), 1);
    else ::unsetenv("ASAN_OPTIONS");
  }

 private:
  std::string saved_;
  bool had_ = false;
};

class SlurmCluster : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    if (std::getenv("SLURM_CONF") == nullptr && fs::exists("/tmp/precon-slurm/slurm.conf"))
      ::setenv("SLURM_CONF", "/tmp/precon-slurm/slurm.conf", 1);
    CommandResult r = slurm({"sinfo", "-h", "-o", "%t"});
    if (!r.ok()) {
      const std::string why = "no Slurm cluster answers (" + r.message() +
                              "); start one with `deploy/slurm/cluster.sh up` and export SLURM_CONF";
      const char* ci = std::getenv("CI");
      if (ci != nullptr && std::string(ci) == "true") GTEST_FAIL() << why;
      GTEST_SKIP() << why;
    }
  }
  // Jobs a test leaves behind (they outlive executors and controllers by design) would hold the
  // cluster's nodes and delay the next test's jobs: they are cancelled, and gone before it starts.
  void TearDown() override {
    if (slurm({"squeue", "-h", "-o", "%i"}).out.find_first_not_of(" \n") != std::string::npos) {
      slurm({"scancel", "--me"});
      wait_for([] { return slurm({"squeue", "-h", "-o", "%i"}).out.find_first_not_of(" \n") == std::string::npos; },
               seconds(30));
    }
    ControllerFixture::TearDown();
  }
  // What Slurm says about a job, for a failure message: its state, reason and times.
  static std::string job_text(const std::string& job) {
    return slurm({"scontrol", "show", "job", job}).out + slurm({"squeue", "-h", "-o", "%all"}).out;
  }

  std::unique_ptr<orch::Controller> start(int signal_lead_s = 120, const fs::path& trainer = PRECON_TRAIN_BIN) {
    ControllerOptions o;
    o.db = dir_ / "precon.db";
    o.run_root = dir_ / "runs";
    o.trainer = trainer;
    o.admin_token = "admin-secret";
    o.poll_interval = std::chrono::milliseconds(100);
    o.stop_grace = std::chrono::milliseconds(3000);
    o.slurm = "on";
    o.slurm_poll_interval = std::chrono::milliseconds(300);
    o.slurm_signal_lead_s = signal_lead_s;
    o.log = [](const std::string&) {};
    auto c = std::make_unique<orch::Controller>(o);
    c->start();
    return c;
  }
  // A tiny trial on Slurm; `resources` goes into [resources], `rest` after it.
  std::string slurm_recipe(int steps, const std::string& resources, const std::string& rest) const {
    return recipe(steps, "[resources]\nexecutor = \"slurm\"\n" + resources + rest);
  }
  json trials(const std::string& url, int64_t id) {
    return get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  }
  json trial(const std::string& url, int64_t tid) { return get(url, "/api/v1/trials/" + std::to_string(tid)); }
  json losses(const std::string& url, int64_t tid) {
    return get(url, "/api/v1/trials/" + std::to_string(tid) + "/metrics?name=train_loss&max_points=0")["metrics"]
        ["train_loss"];
  }
  // train_loss per step of an uninterrupted local run of the trial's own config, in one process.
  std::map<int64_t, double> reference_losses(const fs::path& config) {
    const fs::path run = config.parent_path().parent_path() / ("reference-" + config.parent_path().filename().string());
    CommandResult r = run_command({PRECON_TRAIN_BIN, "--config", config.string(), "--run-dir", run.string(), "--set",
                                   "parallel.data=1", "--set", "resources.executor=local"},
                                  seconds(300));
    EXPECT_TRUE(r.ok()) << r.message();
    std::map<int64_t, double> out;
    std::ifstream in(run / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("train_loss") && j["train_loss"].is_number())
        out[j["step"].get<int64_t>()] = j["train_loss"].get<double>();
    }
    return out;
  }
  // An uninterrupted local run of the trial's stored config, started at once (it runs while the
  // Slurm job does).
  std::future<std::map<int64_t, double>> start_reference(const std::string& url, int64_t tid) {
    const fs::path config = fs::path(trial(url, tid)["run_dir"].get<std::string>()) / "config.toml";
    EXPECT_TRUE(wait_for([&] { return fs::exists(config); }, seconds(30)));
    return std::async(std::launch::async, [this, config] { return reference_losses(config); });
  }
  // Two attempts, both runs of the same Slurm job (requeued inside Slurm): the first asked to be
  // requeued, the second finished; the curve is the uninterrupted one.
  void expect_requeued_once(const std::string& url, int64_t tid, int steps,
                            std::future<std::map<int64_t, double>> reference, double rel_tol = 0) {
    const json t = trial(url, tid);
    EXPECT_EQ(t["state"], "completed") << t.dump();
    ASSERT_EQ(t["attempts"].size(), 2u) << t.dump();
    EXPECT_EQ(t["attempts"][0]["state"], "requeue");
    EXPECT_EQ(t["attempts"][0]["exit_code"], 75);
    EXPECT_EQ(t["attempts"][1]["state"], "succeeded");
    EXPECT_EQ(t["attempts"][1]["external_id"], t["attempts"][0]["external_id"]);
    expect_same_curve(url, tid, steps, std::move(reference), rel_tol);
  }
  // The stored curve is one continuous run identical to the uninterrupted one: bit for bit, or
  // within rel_tol relative where the ranks' sums reassociate.
  void expect_same_curve(const std::string& url, int64_t tid, int steps, std::future<std::map<int64_t, double>> ref,
                         double rel_tol = 0) {
    const std::map<int64_t, double> want = ref.get();
    ASSERT_EQ(want.size(), static_cast<size_t>(steps));
    const json m = losses(url, tid);
    ASSERT_EQ(m["steps"].size(), static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i) {
      ASSERT_EQ(m["steps"][i], i + 1);
      const double got = m["values"][i].get<double>(), expected = want.at(i + 1);
      if (rel_tol == 0)
        ASSERT_EQ(got, expected) << "step " << i + 1;
      else
        ASSERT_LT(std::fabs(got - expected) / expected, rel_tol) << "step " << i + 1 << ": " << got << " vs " << expected;
    }
  }
};

}  // namespace precon::orch::testing
