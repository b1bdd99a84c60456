// Disk full, on small tmpfs mounts made by the test (it runs as root, as the suite does in CI):
// while the trainer writes a checkpoint (a clear error, the previous checkpoint intact, and the
// run resumes on the uninterrupted curve once space returns), and under the controller's SQLite
// file (new work refused with a clear error, nothing lost, and all of it recovers when space
// returns).
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cstring>
#include <mutex>

#include "orchestrator/service/controller.h"
#include "tests/faults/fault_fixture.h"
#include "worker/ckpt/checkpoint.h"

namespace precon::orch::testing {
namespace {

class DiskFull : public FaultFixture {
 protected:
  void TearDown() override {
    for (const fs::path& m : mounts_) ::umount2(m.c_str(), MNT_DETACH);
    FaultFixture::TearDown();
  }
  // A tmpfs of `bytes` at dir_/name; empty (the test failed, or skips where it may) when it
  // cannot be mounted.
  fs::path small_disk(const std::string& name, size_t bytes) {
    const fs::path m = dir_ / name;
    fs::create_directories(m);
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0700";
    if (::mount("tmpfs", m.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
      mounts_.push_back(m);
      return m;
    }
    why_not_ = "cannot mount a tmpfs at " + m.string() + ": " + std::strerror(errno) + " (run as root)";
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") ADD_FAILURE() << why_not_;
    return {};
  }
  std::string why_not_;
  static size_t free_bytes(const fs::path& p) {
    struct statvfs v {};
    ::statvfs(p.c_str(), &v);
    return static_cast<size_t>(v.f_bavail) * v.f_frsize;
  }
  // Fills the disk of `p` with `p`/filler until `leave` bytes remain free (0: full).
  static void fill(const fs::path& p, size_t leave) {
    const fs::path f = p / "filler";
    std::ofstream out(f, std::ios::binary | std::ios::app);
    const std::string block(4096, 'x');
    while (free_bytes(p) > leave && out.write(block.data(), block.size()) && out.flush()) {
    }
  }
  static size_t tree_bytes(const fs::path& dir) {
    size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file()) n += (e.file_size() + 4095) / 4096 * 4096;
    return n;
  }
  static int64_t trial_last_step(const std::string& url, int64_t tid) {
    return get(url, "/api/v1/trials/" + std::to_string(tid))["last_step"].get<int64_t>();
  }
  std::vector<fs::path> mounts_;
};

TEST_F(DiskFull, CheckpointWriteFailsClearlyKeepsThePreviousOneAndResumesWhenSpaceReturns) {
  const int steps = 30;
  const fs::path config = dir_ / "config.toml";
  std::ofstream(config) << recipe(steps, "");
  // The uninterrupted run, on a normal disk: its curve, and the size of one checkpoint.
  const fs::path ref = dir_ / "reference";
  ASSERT_TRUE(run_command({PRECON_TRAIN_BIN, "--config", config.string(), "--run-dir", ref.string()}, seconds(300)).ok());
  const Series want = read_metrics_jsonl(ref / "metrics.jsonl");
  const size_t checkpoint = tree_bytes(ref / "checkpoints" / worker::checkpoint_dir_name(steps));
  ASSERT_GT(checkpoint, 16384u);

  const fs::path disk = small_disk("ckpt-disk", 4 << 20);
  if (disk.empty()) GTEST_SKIP() << why_not_;
  const fs::path run = disk / "run";
  fs::create_directories(run);
  // Room for the first checkpoint, the metrics and half of the second: the second write fails.
  fill(disk, checkpoint + checkpoint / 2 + 32768);
  CommandResult full = run_command({PRECON_TRAIN_BIN, "--config", config.string(), "--run-dir", run.string()},
                                   seconds(300));
  EXPECT_EQ(full.exit_code, 1) << full.err;
  for (const char* want_text : {"could not write checkpoint step_00000020", "No space left on device",
                                "free disk space", "earlier checkpoints are intact"})
    EXPECT_NE(full.err.find(want_text), std::string::npos) << want_text << " in:\n" << full.err;
  const fs::path previous = run / "checkpoints" / worker::checkpoint_dir_name(10);
  EXPECT_EQ(worker::verify_checkpoint(previous), std::nullopt);
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    EXPECT_EQ(e.path(), previous) << "left behind: " << e.path();

  fs::remove(disk / "filler");
  CommandResult again = run_command({PRECON_TRAIN_BIN, "--config", config.string(), "--run-dir", run.string()},
                                    seconds(300));
  ASSERT_TRUE(again.ok()) << again.err;
  EXPECT_NE(again.err.find("resumed from " + previous.string() + " at step 10"), std::string::npos) << again.err;
  const int lost = lost_points(want, read_metrics_jsonl(run / "metrics.jsonl"));
  table_row("disk full while checkpointing", 1, 1, lost,
            !HasFailure() ? "clear error, step 10 intact, resumed on the same curve" : "FAILED");
}

TEST_F(DiskFull, DatabaseDiskFullRefusesNewWorkClearlyAndRecovers) {
  const fs::path disk = small_disk("db-disk", 16 << 20);
  if (disk.empty()) GTEST_SKIP() << why_not_;
  std::mutex log_mu;
  std::vector<std::string> log;
  ControllerOptions o = controller_options();
  o.db = disk / "precon.db";
  o.poll_interval = std::chrono::milliseconds(100);
  o.slurm = "off";
  o.log = [&](const std::string& line) {
    std::lock_guard lock(log_mu);
    log.push_back(line);
  };
  const auto logged = [&](const std::string& text) {
    std::lock_guard lock(log_mu);
    for (const std::string& l : log)
      if (l.find(text) != std::string::npos) return true;
    return false;
  };
  Controller c(o);
  c.start();
  const std::string url = c.url();
  // One trial that outlasts the full disk, and one that ends while it is full.
  const int long_steps = 1200, short_steps = 150;
  const int64_t long_exp = submit(url, recipe(long_steps, ""));
  const int64_t short_exp = submit(url, recipe(short_steps, ""));
  const auto first_trial = [&](int64_t id) {
    return get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0]["id"].get<int64_t>();
  };
  const int64_t long_tid = first_trial(long_exp), short_tid = first_trial(short_exp);
  ASSERT_TRUE(wait_for([&] { return trial_last_step(url, long_tid) > 10 && trial_last_step(url, short_tid) > 10; },
                       seconds(60)));

  fill(disk, 0);
  // New work is refused with a reason that says what to do; the controller keeps answering.
  ClientResponse r = post(url, "/api/v1/experiments", json{{"recipe", recipe(20, "")}}.dump(), "admin-secret");
  EXPECT_EQ(r.status, 507) << r.body;
  EXPECT_NE(r.body.find("disk holding the database is full"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(o.db.string()), std::string::npos) << r.body;
  EXPECT_EQ(http_request(url, "GET", "/healthz").status, 200);
  // The short trial's worker ends while nothing can be stored: its end waits in the scheduler
  // (and its last reports in its metrics.jsonl) until space returns.
  const fs::path short_dir = get(url, "/api/v1/trials/" + std::to_string(short_tid))["run_dir"].get<std::string>();
  ASSERT_TRUE(wait_for([&] { return fs::exists(short_dir / "exit_status.1"); }, seconds(120)));
  EXPECT_TRUE(wait_for([&] { return logged("is not stored yet"); }, seconds(30)));
  EXPECT_EQ(get(url, "/api/v1/trials/" + std::to_string(short_tid))["state"], "running");

  fs::remove(disk / "filler");
  const int64_t later = submit(url, recipe(20, ""));
  ASSERT_GT(later, 0);
  ASSERT_TRUE(done(url, long_exp, seconds(600)));
  ASSERT_TRUE(done(url, short_exp, seconds(60)));
  ASSERT_TRUE(done(url, later, seconds(120)));
  int lost = 0;
  for (auto [tid, steps] : {std::pair<int64_t, int>{long_tid, long_steps}, {short_tid, short_steps}}) {
    const json t = get(url, "/api/v1/trials/" + std::to_string(tid));
    EXPECT_EQ(t["state"], "completed") << t.dump();
    EXPECT_EQ(t["attempts"].size(), 1u) << t.dump();
    const json m = get(url, "/api/v1/trials/" + std::to_string(tid) + "/metrics?name=train_loss&max_points=0")
        ["metrics"]["train_loss"];
    lost += steps - static_cast<int>(m["steps"].size());
    EXPECT_EQ(m["steps"].size(), static_cast<size_t>(steps)) << "trial " << tid;
  }
  EXPECT_EQ(get(url, "/api/v1/experiments/" + std::to_string(later))["state"], "completed");
  c.stop();
  table_row("disk full under precon.db", 3, 0, lost,
            !HasFailure() ? "submit refused (507, reason), ended trial settled later, all recovered" : "FAILED");
}

}  // namespace
}  // namespace precon::orch::testing
