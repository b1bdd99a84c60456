// Run directories that someone else prepared: a link planted where a trial's run directory or
// one of its files goes must not be followed (the file it points at stays untouched), and a FIFO
// planted as metrics.jsonl must not hang the trainer in open(). Real controller, real trainer.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>

#include "orchestrator/store/store.h"
#include "tests/common/test_util.h"
#include "tests/orchestrator/support/controller_fixture.h"

namespace precon::orch::testing {
namespace {

class RunDirLinks : public ControllerFixture {
 protected:
  // precon-train on recipe(2) in `run_dir`, killed after 60 s: its status and output.
  test::CommandResult train(const fs::path& run_dir) const {
    std::ofstream(dir_ / "r.toml") << recipe(2, "");
    return test::run_command("timeout -s KILL 60 " + std::string(PRECON_TRAIN_BIN) + " --config " +
                             (dir_ / "r.toml").string() + " --run-dir " + run_dir.string());
  }
};

// An experiment's run root is <runs>/<name>-<milliseconds>: someone who can write --runs plants a
// link at every name of the next seconds.
TEST_F(RunDirLinks, ALinkPlantedAtAnExperimentsRunDirectoryIsNotFollowed) {
  const fs::path victim = dir_ / "victim";
  fs::create_directories(victim / "trial-1");
  std::ofstream(victim / "trial-1" / "config.toml") << "precious\n";
  fs::create_directories(dir_ / "runs");
  Controller c(controller_options());
  c.start();
  const auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // A second of names starting 4 s ahead (a link costs up to 2 ms on a slow file system), then
  // the submission inside it.
  const int64_t start = now_ms() + 4000;
  for (int64_t ms = start; ms < start + 1000; ++ms)
    fs::create_directory_symlink(victim, dir_ / "runs" / ("tiny-" + std::to_string(ms)));
  while (now_ms() < start + 100) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_LT(now_ms(), start + 800) << "planting the links took too long for the test to mean anything";
  const int64_t id = submit(c.url(), recipe(2, ""));
  ASSERT_TRUE(done(c.url(), id));
  EXPECT_EQ(get(c.url(), "/api/v1/experiments/" + std::to_string(id))["state"], "completed");
  c.stop();

  EXPECT_EQ(test::slurp(victim / "trial-1" / "config.toml"), "precious\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(victim / "trial-1"), fs::directory_iterator()), 1);
  Store store(dir_ / "precon.db");
  const TrialRow t = store.trials(id).at(0);
  const fs::path root = fs::path(t.run_dir).parent_path();
  EXPECT_EQ(root.filename().string().rfind("tiny-", 0), 0u) << root;
  EXPECT_EQ(root.filename().string().substr(root.filename().string().rfind('-')), "-1") << root;
  for (const fs::path& p : {root, fs::path(t.run_dir)}) {
    struct stat st{};
    ASSERT_EQ(::lstat(p.c_str(), &st), 0) << p;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << p;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << p;
  }
  EXPECT_TRUE(fs::exists(fs::path(t.run_dir) / "metrics.jsonl"));
}

TEST_F(RunDirLinks, TheTrainerFollowsNoLinkAtItsFiles) {
  const fs::path victim = dir_ / "victim.txt";
  for (const char* name : {"metrics.jsonl", "config.toml"}) {
    SCOPED_TRACE(name);
    const fs::path run = dir_ / (std::string("run-") + name);
    fs::create_directories(run);
    std::ofstream(victim) << "precious\n";
    fs::create_symlink(victim, run / name);
    const test::CommandResult r = train(run);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find((run / name).string()), std::string::npos) << r.output;
    EXPECT_EQ(test::slurp(victim), "precious\n");
  }
}

TEST_F(RunDirLinks, AFifoAsMetricsDoesNotHangTheTrainer) {
  const fs::path run = dir_ / "run";
  fs::create_directories(run);
  ASSERT_EQ(::mkfifo((run / "metrics.jsonl").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  const test::CommandResult r = train(run);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "the trainer hung on the FIFO";
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("not a regular file"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace precon::orch::testing
