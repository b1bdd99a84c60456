// `precon run` and `precon serve` stopped by each of SIGINT, SIGTERM and SIGHUP (a closed
// terminal or ssh session): each is a stop, never a silent death. `run` cancels its trials (none
// is left running without a controller) and exits 130; `serve` says it stops and exits 0,
// leaving its trials to be adopted on restart.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "orchestrator/store/store.h"
#include "tests/orchestrator/support/cli_fixture.h"

namespace precon::orch::testing {
namespace {

struct StopSignal {
  int number;
  const char* name;
};
const StopSignal kStops[] = {{SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"}};

class CliSignals : public CliFixture {
 protected:
  // `precon ARGS` in dir_ with stdout and stderr in `log`.
  pid_t start(const std::vector<std::string>& args, const fs::path& log) const {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      if (::chdir(dir_.c_str()) != 0) ::_exit(126);
      std::vector<char*> argv{const_cast<char*>(PRECON_BIN)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(PRECON_BIN, argv.data());
      ::_exit(127);
    }
    return pid;
  }
  // Its exit status, -1 for a death by signal, -2 when it is still running after `limit`.
  static int wait_exit(pid_t pid, std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      int raw = 0;
      if (::waitpid(pid, &raw, WNOHANG) == pid) return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return -2;
  }
  bool training(const fs::path& runs) const {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(runs, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->path().filename() == "metrics.jsonl" && fs::file_size(it->path(), ec) > 0) return true;
    return false;
  }
};

TEST_F(CliSignals, RunCancelsItsTrialsAndExits130OnEachStopSignal) {
  std::ofstream(dir_ / "long.toml") << recipe(1000000, "");
  for (const StopSignal& sig : kStops) {
    SCOPED_TRACE(sig.name);
    const std::string name = sig.name;
    const fs::path log = dir_ / (name + ".log"), runs = dir_ / ("runs-" + name);
    const pid_t pid = start({"run", "long.toml", "--quiet", "--cpus", "1", "--db", name + ".db", "--runs", runs.string()},
                            log);
    ASSERT_TRUE(wait_for([&] { return training(runs); }, std::chrono::seconds(60))) << read_file(log);
    ::kill(pid, sig.number);
    EXPECT_EQ(wait_exit(pid, std::chrono::seconds(60)), 130) << read_file(log);
    EXPECT_NE(read_file(log).find("interrupted: stopping the trials"), std::string::npos) << read_file(log);
    Store store(dir_ / (name + ".db"));
    const std::vector<TrialRow> trials = store.trials(1);
    ASSERT_EQ(trials.size(), 1u);
    EXPECT_EQ(trials[0].state, TrialState::cancelled) << "the trainer was left running without a controller";
  }
}

TEST_F(CliSignals, ServeSaysItStopsAndExits0OnEachStopSignal) {
  for (const StopSignal& sig : kStops) {
    SCOPED_TRACE(sig.name);
    Serve s = serve();
    ASSERT_FALSE(s.url.empty()) << read_file(s.log);
    ::kill(s.pid, sig.number);
    EXPECT_EQ(wait_exit(std::exchange(s.pid, -1), std::chrono::seconds(30)), 0) << read_file(s.log);
    EXPECT_NE(read_file(s.log).find("precon serve: stopping"), std::string::npos) << read_file(s.log);
  }
}

}  // namespace
}  // namespace precon::orch::testing
