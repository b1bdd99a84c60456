// Shared pieces of the fault-injection suite: a trainer wrapper that
// arms a fault (worker/common/fault_hook.h) on the first attempt of chosen trials only, the
// uninterrupted reference run of a trial's config, and the suite's table.
//
// Sizes: PRECON_FAULT_POINTS (worker kills) and PRECON_FAULT_KILLS (controller kills) override the
// short CI defaults; tests/faults/run_faults.sh runs the full version (20 and 10). With
// PRECON_FAULT_TABLE set, each test appends its row (fault, trials, runs resumed, metrics lost,
// outcome) to that file, tab-separated.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "orchestrator/exec/slurm_command.h"
#include "tests/orchestrator/support/controller_fixture.h"
#include "tests/orchestrator/support/serve_process.h"

namespace precon::orch::testing {

using nlohmann::json;
using std::chrono::seconds;

inline int env_count(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

// One row of the suite's table (see above).
inline void table_row(const std::string& fault, int trials, int resumed, int lost, const std::string& outcome) {
  const char* path = std::getenv("PRECON_FAULT_TABLE");
  if (path == nullptr) return;
  std::ofstream(path, std::ios::app) << fault << "\t" << trials << "\t" << resumed << "\t" << lost << "\t" << outcome
                                     << "\n";
}

// metric name -> step -> value, from a run's metrics.jsonl (a step written twice, by a run and its
// resumption, keeps the last value).
using Series = std::map<std::string, std::map<int64_t, double>>;
inline Series read_metrics_jsonl(const fs::path& file) {
  Series out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step")) continue;
    for (const char* name : {"train_loss", "val_loss", "grad_norm"})
      if (j.contains(name) && j[name].is_number()) out[name][j["step"].get<int64_t>()] = j[name].get<double>();
  }
  return out;
}

// How many times precon-train started in a run directory: each start logs its routing line once
// (a second process for one attempt would log twice).
inline int trainer_starts(const fs::path& run_dir) {
  std::ifstream in(run_dir / "stderr.log");
  int starts = 0;
  for (std::string line; std::getline(in, line);) starts += line.find("] routing: ") != std::string::npos;
  return starts;
}

template <class Base>
class FaultFixtureOf : public Base {
 protected:
  // Starts `controller` armed with PRECON_FAULT_CONTROLLER_DIE=point, submits `recipe`, waits
  // until the fault has ended the controller, and starts it again unarmed on the same database.
  // The experiment's id, or 0 after a failure (reported here).
  int64_t submit_then_die_at(ServeProcess& controller, const std::string& point, const std::string& recipe) {
    controller.set_env("PRECON_FAULT_CONTROLLER_DIE", point);
    if (!controller.start()) {
      ADD_FAILURE() << "the controller did not start:\n" << controller.log();
      return 0;
    }
    const int64_t id = Base::submit(controller.url(), recipe);
    if (id <= 0) return 0;
    if (!controller.wait_exit(seconds(60))) {
      ADD_FAILURE() << "the fault did not end the controller:\n" << controller.log();
      return 0;
    }
    if (controller.log().find("fault injected: dying " + point) == std::string::npos) {
      ADD_FAILURE() << "the controller ended, but not at the fault:\n" << controller.log();
      return 0;
    }
    controller.clear_env();
    if (!controller.start()) {
      ADD_FAILURE() << "the controller did not start again:\n" << controller.log();
      return 0;
    }
    return id;
  }
  // The deterministic metrics of an uninterrupted run of `config`, in one process.
  Series reference_run(const fs::path& config, const std::string& name) {
    const fs::path run = this->dir_ / ("reference-" + name);
    CommandResult r = run_command({PRECON_TRAIN_BIN, "--config", config.string(), "--run-dir", run.string(), "--set",
                                   "resources.executor=local"},
                                  seconds(600));
    EXPECT_TRUE(r.ok()) << r.message();
    return read_metrics_jsonl(run / "metrics.jsonl");
  }
  // The stored series of a trial, from the API, every point.
  static Series stored(const std::string& url, int64_t tid) {
    Series out;
    for (const char* name : {"train_loss", "val_loss", "grad_norm"}) {
      const json m = Base::get(url, "/api/v1/trials/" + std::to_string(tid) + "/metrics?name=" + name + "&max_points=0")
          ["metrics"][name];
      if (!m.is_object()) continue;
      for (size_t i = 0; i < m["steps"].size(); ++i)
        if (m["values"][i].is_number()) out[name][m["steps"][i].get<int64_t>()] = m["values"][i].get<double>();
    }
    return out;
  }
  // Points of `want` that `got` lacks or holds with another value (bit for bit).
  static int lost_points(const Series& want, const Series& got) {
    int lost = 0;
    for (const auto& [name, steps] : want) {
      auto g = got.find(name);
      for (const auto& [step, value] : steps) {
        const bool same = g != got.end() && g->second.count(step) && g->second.at(step) == value;
        lost += !same;
        EXPECT_TRUE(same) << name << " at step " << step << ": want " << value << ", got "
                          << (g != got.end() && g->second.count(step) ? std::to_string(g->second.at(step)) : "nothing");
      }
    }
    return lost;
  }
  // A trainer that arms PRECON_FAULT_KILL_AT=<plan/TRIAL_ID> on the first attempt of a trial
  // with a plan file, and is precon-train otherwise.
  fs::path fault_trainer(const fs::path& plan) {
    fs::create_directories(plan);
    const fs::path wrapper = this->dir_ / "fault-trainer.sh";
    std::ofstream(wrapper) << "#!/bin/sh\n"
                           << "plan=" << plan.string() << "/\"$PRECON_TRIAL_ID\"\n"
                           << "if [ -f \"$plan\" ] && mkdir \"$plan.fired\" 2>/dev/null; then\n"
                           << "  PRECON_FAULT_KILL_AT=$(cat \"$plan\"); export PRECON_FAULT_KILL_AT\n"
                           << "fi\n"
                           << "exec " << PRECON_TRAIN_BIN << " \"$@\"\n";
    fs::permissions(wrapper, fs::perms::owner_all);
    return wrapper;
  }
  static json trials_of(const std::string& url, int64_t id) {
    return Base::get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  }
  static json trial_json(const std::string& url, int64_t tid) {
    return Base::get(url, "/api/v1/trials/" + std::to_string(tid));
  }
};

using FaultFixture = FaultFixtureOf<ControllerFixture>;

}  // namespace precon::orch::testing
