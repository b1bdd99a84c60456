// `precon run` without a terminal, then `ls`, `show`, `best`, `compare` and `logs` on the
// database it left, as a user runs them: exit status and output for the happy path (checked
// against the store and the trials' log files) and for bad input (a missing recipe or database,
// an unknown experiment or trial, too few trials to compare).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include "orchestrator/store/store.h"
#include "tests/orchestrator/support/cli_fixture.h"

namespace precon::orch::testing {
namespace {

class CliInspect : public CliFixture {
 protected:
  // A finished two-trial sweep (lr 0.001 and 0.003, 10 steps) in dir_/precon.db.
  void run_sweep() {
    std::ofstream(dir_ / "r.toml") << recipe(10, "[sweep]\nmax_concurrent = 2\n[sweep.parameters]\n"
                                                 "\"optimizer.lr\" = [0.001, 0.003]\n");
    const test::CommandResult r = precon("run r.toml --quiet --cpus 2");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("experiment 1 (tiny): 2 trial(s); runs in "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("experiment 1 completed"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("At equal steps (step 10)"), std::string::npos) << r.output;
    // Once, not once more from the scheduler's log.
    const std::string submitted = "experiment 1 (tiny): 2 trial(s)";
    EXPECT_EQ(r.output.find(submitted, r.output.find(submitted) + 1), std::string::npos) << r.output;
    // The dashboard ended with the run: where the results stay and how to serve them again.
    EXPECT_NE(r.output.find("results: the database precon.db (`" + std::string(PRECON_BIN) + " show 1 --db precon.db`"),
              std::string::npos) << r.output;
    EXPECT_NE(r.output.find("dashboard again: " + std::string(PRECON_BIN) + " serve --db precon.db"), std::string::npos)
        << r.output;
    // The controller's address is the user's alone, as the database is.
    EXPECT_EQ(fs::status(dir_ / "precon.db.url").permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write);
  }
  // The last `n` lines of a file, as `tail -n` prints them.
  static std::string last_lines(const fs::path& p, size_t n) {
    const std::string text = read_file(p);
    size_t start = text.size(), found = 0;
    if (start > 0 && text.back() == '\n') --start;
    while (start > 0 && found < n) {
      if (text[start - 1] == '\n' && ++found == n) break;
      --start;
    }
    return text.substr(start);
  }
};

bool has_line(const std::string& out, const std::string& pattern) {
  return std::regex_search(out, std::regex(pattern, std::regex::multiline));
}

TEST_F(CliInspect, LsShowAndBestDescribeAFinishedSweep) {
  ASSERT_NO_FATAL_FAILURE(run_sweep());
  Store store(dir_ / "precon.db");
  const std::vector<TrialRow> trials = store.trials(1);
  ASSERT_EQ(trials.size(), 2u);

  test::CommandResult r = precon("ls");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has_line(r.output, "^ID +NAME +STATE +TRIALS +RUNNING +DONE +FAILED +CREATED$")) << r.output;
  EXPECT_TRUE(has_line(r.output, "^1 +tiny +completed +2 +0 +2 +0 +[0-9]{4}-")) << r.output;
  r = precon("ls --json");
  EXPECT_EQ(r.status, 0) << r.output;
  const nlohmann::json list = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_TRUE(list.is_object()) << r.output;
  ASSERT_EQ(list["experiments"].size(), 1u);
  EXPECT_EQ(list["experiments"][0]["name"], "tiny");
  EXPECT_EQ(list["experiments"][0]["state"], "completed");

  r = precon("show 1");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("experiment 1 tiny (completed)"), std::string::npos) << r.output;
  for (const TrialRow& t : trials) {
    const std::string lr = nlohmann::json::parse(t.params_json)["optimizer.lr"].dump();
    EXPECT_TRUE(has_line(r.output, "^" + std::to_string(t.id) + " +lr=" + lr + " +completed +10 ")) << r.output;
  }
  EXPECT_EQ(precon("show tiny").output, r.output) << "by name and by id: the same experiment";

  // The best trial at the last step is the one with the lowest final val_loss in the store.
  std::vector<std::pair<double, int64_t>> finals;
  for (const TrialRow& t : trials) finals.emplace_back(store.last_metric(t.id, "val_loss")->value, t.id);
  std::sort(finals.begin(), finals.end());
  r = precon("best 1 --json");
  EXPECT_EQ(r.status, 0) << r.output;
  const nlohmann::json best = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_TRUE(best.is_object()) << r.output;
  EXPECT_EQ(best["metric"], "val_loss");
  EXPECT_EQ(best["at_step"]["step"], 10);
  ASSERT_EQ(best["at_step"]["entries"].size(), 2u) << r.output;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(best["at_step"]["entries"][i]["trial"], finals[i].second) << r.output;
    EXPECT_DOUBLE_EQ(best["at_step"]["entries"][i]["value"].get<double>(), finals[i].first) << r.output;
  }
  r = precon("best tiny");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("objective: val_loss (lower is better)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Pareto front"), std::string::npos) << r.output;

  // Bad input: each names what is missing and where it looked.
  const std::string db = (dir_ / "precon.db").string();
  for (const std::string sub : {"show", "best"}) {
    r = precon(sub + " 99");
    EXPECT_EQ(r.status, 1) << sub << ": " << r.output;
    EXPECT_NE(r.output.find("no experiment \"99\" in precon.db (`precon ls` lists them)"), std::string::npos)
        << sub << ": " << r.output;
  }
  r = precon("ls --db absent.db");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("no database at absent.db"), std::string::npos) << r.output;
  r = precon("run absent.toml --db fresh.db --quiet");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("absent.toml: cannot open the file: it does not exist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "fresh.db")) << "run started a controller for a missing recipe";
}

// `precon run` in the background with its output in dir_/<name>.out; its pid.
pid_t start_run(const fs::path& dir, const std::string& recipe_file, const std::string& name) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string out = (dir / (name + ".out")).string();
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::execl(PRECON_BIN, PRECON_BIN, "run", recipe_file.c_str(), "--cpus", "1", "--db", (name + ".db").c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// A sweep that did not run to its end does not exit 0: Ctrl-C (SIGINT) cancels it and exits 130,
// a cancel from another terminal makes `precon run` exit 1.
TEST_F(CliInspect, RunThatWasStoppedOrCancelledIsNotASuccess) {
  std::ofstream(dir_ / "long.toml") << recipe(1000000, "");
  std::string seen;  // what the last look at the database found, for the failure message
  const auto running = [&](const std::string& db) {
    return wait_for([&] {
      const fs::path p = dir_ / db;
      if (!fs::exists(p)) return false;
      try {
        Store store(p);
        seen.clear();
        for (const TrialRow& t : store.trials(1)) {
          seen += "trial " + std::to_string(t.id) + " " + trial_state_name(t.state) + " step " +
                  std::to_string(t.last_step) + "; ";
          if (t.state == TrialState::running && t.last_step > 0) return true;
        }
      } catch (const std::exception& e) {
        seen = e.what();
      }
      return false;
    }, std::chrono::seconds(60));
  };
  const auto exit_of = [](pid_t pid) {
    int raw = 0;
    return ::waitpid(pid, &raw, 0) == pid && WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  };

  pid_t pid = start_run(dir_, "long.toml", "interrupted");
  ASSERT_TRUE(running("interrupted.db")) << seen << "\n" << read_file(dir_ / "interrupted.out");
  ::kill(pid, SIGINT);
  EXPECT_EQ(exit_of(pid), 130) << read_file(dir_ / "interrupted.out");
  std::string out = read_file(dir_ / "interrupted.out");
  EXPECT_NE(out.find("interrupted: stopping the trials"), std::string::npos) << out;
  EXPECT_NE(out.find("experiment 1 cancelled"), std::string::npos) << out;

  pid = start_run(dir_, "long.toml", "elsewhere");
  ASSERT_TRUE(running("elsewhere.db")) << seen << "\n" << read_file(dir_ / "elsewhere.out");
  const test::CommandResult c = precon("cancel 1 --db elsewhere.db");
  EXPECT_EQ(c.status, 0) << c.output;
  EXPECT_EQ(exit_of(pid), 1) << read_file(dir_ / "elsewhere.out");
  out = read_file(dir_ / "elsewhere.out");
  EXPECT_NE(out.find("experiment 1 cancelled"), std::string::npos) << out;
}

TEST_F(CliInspect, CompareAndLogsReadTrialsAndRefuseUnknownOnes) {
  ASSERT_NO_FATAL_FAILURE(run_sweep());
  Store store(dir_ / "precon.db");
  const std::vector<TrialRow> trials = store.trials(1);
  ASSERT_EQ(trials.size(), 2u);
  const std::string a = std::to_string(trials[0].id), b = std::to_string(trials[1].id);
  const std::string lr_a = nlohmann::json::parse(trials[0].params_json)["optimizer.lr"].dump();
  const std::string lr_b = nlohmann::json::parse(trials[1].params_json)["optimizer.lr"].dump();

  test::CommandResult r = precon("compare " + a + " " + b);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has_line(r.output, "^ +trial " + a + " +trial " + b + "$")) << r.output;
  EXPECT_TRUE(has_line(r.output, "^state +completed +completed$")) << r.output;
  EXPECT_TRUE(has_line(r.output, "^step +10 +10$")) << r.output;
  EXPECT_TRUE(has_line(r.output, "^optimizer\\.lr +" + lr_a + " +" + lr_b + "$")) << r.output;
  EXPECT_FALSE(has_line(r.output, "^model\\.")) << "keys that are equal are not listed: " << r.output;
  r = precon("compare " + a + " " + b + " --json");
  EXPECT_EQ(r.status, 0) << r.output;
  const nlohmann::json cmp = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_TRUE(cmp.is_object()) << r.output;
  EXPECT_EQ(cmp["differing_config"]["optimizer.lr"], (nlohmann::json{lr_a, lr_b})) << r.output;

  // The end of the trial's own log files, as tail prints them.
  const fs::path run_dir = fs::path(trials[0].run_dir).is_absolute() ? fs::path(trials[0].run_dir) : dir_ / trials[0].run_dir;
  const fs::path log = run_dir / "stderr.log";
  ASSERT_GT(fs::file_size(log), 0u);
  r = precon("logs " + a + " -n 3");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, last_lines(log, 3));
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 3) << r.output;
  r = precon("logs " + a + " --stream stdout");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, last_lines(run_dir / "stdout.log", 50));

  // No log (yet): said, and not an error.
  fs::remove(log);
  r = precon("logs " + a);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("trial " + a + " (completed) has no stderr log yet (" + trials[0].run_dir + "/stderr.log)"),
            std::string::npos) << r.output;

  r = precon("compare " + a + " 99");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("no trial 99 in precon.db"), std::string::npos) << r.output;
  r = precon("compare " + a);
  EXPECT_EQ(r.status, 2) << r.output;
  r = precon("logs 99");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("no trial 99 in precon.db"), std::string::npos) << r.output;
  r = precon("logs " + a + " --stream stdin");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--stream"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace precon::orch::testing
