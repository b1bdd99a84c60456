#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "worker/ckpt/checkpoint.h"
#include "worker/common/error.h"
#include "tests/common/temp_dir.h"

namespace precon::worker {
namespace {

using test::TempDir;

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + salt);
  return v;
}

// The trainer's three files: two as byte buffers, one streamed through a callback.
std::vector<CheckpointFile> files_for(int64_t step, size_t model_bytes = 4096) {
  auto model = pattern(model_bytes, static_cast<uint8_t>(step));
  return {CheckpointFile::from_bytes("model.safetensors", model),
          {"optimizer.safetensors",
           [step](ByteSink& out) {
             for (int chunk = 0; chunk < 4; ++chunk) {
               auto part = pattern(1000, static_cast<uint8_t>(step + chunk));
               out.write(part.data(), part.size());
             }
           }},
          CheckpointFile::from_string("trainer.json", nlohmann::json{{"step", step}}.dump())};
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

bool has_temp_dirs(const fs::path& run) {
  for (const auto& e : fs::directory_iterator(checkpoints_dir(run)))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) return true;
  return false;
}

TEST(Checkpoint, WriteListVerifyAndManifest) {
  TempDir run;
  fs::path d10 = write_checkpoint(run.path, 10, files_for(10));
  write_checkpoint(run.path, 1200, files_for(1200));
  EXPECT_EQ(d10, run.path / "checkpoints" / "step_00000010");
  std::vector<CheckpointInfo> all = list_checkpoints(run.path);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].step, 1200);
  EXPECT_EQ(all[1].dir.filename(), "step_00001200");
  EXPECT_FALSE(has_temp_dirs(run.path));
  EXPECT_EQ(verify_checkpoint(d10), std::nullopt);

  nlohmann::json m = nlohmann::json::parse(slurp(d10 / "manifest.json"));
  EXPECT_EQ(m["step"], 10);
  ASSERT_EQ(m["files"].size(), 3u);
  std::string opt = slurp(d10 / "optimizer.safetensors");
  EXPECT_EQ(opt.size(), 4000u);
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08lx",
                ::crc32(0, reinterpret_cast<const Bytef*>(opt.data()), static_cast<uInt>(opt.size())));
  EXPECT_EQ(m["files"][1]["name"], "optimizer.safetensors");
  EXPECT_EQ(m["files"][1]["size"], 4000);
  EXPECT_EQ(m["files"][1]["crc32"], crc);
  EXPECT_EQ(nlohmann::json::parse(slurp(d10 / "trainer.json"))["step"], 10);

  CheckpointChoice c = latest_good_checkpoint(run.path);
  ASSERT_TRUE(c.checkpoint);
  EXPECT_EQ(c.checkpoint->step, 1200);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Checkpoint, TruncatedFileFallsBackToPrevious) {
  TempDir run;
  write_checkpoint(run.path, 20, files_for(20));
  fs::path d40 = write_checkpoint(run.path, 40, files_for(40));
  fs::resize_file(d40 / "model.safetensors", 1000);
  EXPECT_EQ(verify_checkpoint(d40), "model.safetensors: size 1000 bytes, manifest says 4096 (truncated)");
  CheckpointChoice c = latest_good_checkpoint(run.path);
  ASSERT_TRUE(c.checkpoint);
  EXPECT_EQ(c.checkpoint->step, 20);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0],
            "checkpoint step_00000040 is damaged (model.safetensors: size 1000 bytes, manifest says 4096 "
            "(truncated)); using step_00000020");
}

TEST(Checkpoint, SingleBitFlipIsDetected) {
  TempDir run;
  write_checkpoint(run.path, 20, files_for(20));
  fs::path d40 = write_checkpoint(run.path, 40, files_for(40));
  {
    std::fstream f(d40 / "optimizer.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(2345);
    char b = 0;
    f.read(&b, 1);
    b ^= 0x10;
    f.seekp(2345);
    f.write(&b, 1);
  }
  EXPECT_EQ(verify_checkpoint(d40), "optimizer.safetensors: CRC mismatch");
  CheckpointChoice c = latest_good_checkpoint(run.path);
  ASSERT_TRUE(c.checkpoint);
  EXPECT_EQ(c.checkpoint->step, 20);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0],
            "checkpoint step_00000040 is damaged (optimizer.safetensors: CRC mismatch); using step_00000020");
}

TEST(Checkpoint, MissingPiecesAndNoGoodCheckpoint) {
  TempDir run;
  EXPECT_FALSE(latest_good_checkpoint(run.path).checkpoint);  // no checkpoints/ at all
  fs::path d = write_checkpoint(run.path, 5, files_for(5));
  fs::remove(d / "trainer.json");
  EXPECT_EQ(verify_checkpoint(d), "trainer.json: missing");
  fs::remove(d / "manifest.json");
  EXPECT_NE(verify_checkpoint(d)->find("manifest.json missing"), std::string::npos);
  std::ofstream(d / "manifest.json") << "{\"step\": 5, \"files\": [{\"name\": 3}]}";
  EXPECT_NE(verify_checkpoint(d)->find("manifest.json is malformed"), std::string::npos);
  EXPECT_EQ(verify_checkpoint(d), "manifest.json is malformed (type must be string, but is number)");
  // Not JSON: the reason (logged, served by the controller) says where, not what the file holds
  // (the string runs to the end of the file's 37 bytes).
  std::ofstream(d / "manifest.json") << "{\"step\": 5, \"files\": [\"hunter2-secret";
  EXPECT_EQ(verify_checkpoint(d), "manifest.json is malformed (a syntax error at byte 38)");
  // Numbers that are not the integers they stand for (found by fuzz_checkpoint: reading 5e112 as a
  // size was undefined behaviour).
  std::ofstream(d / "manifest.json") << "{\"step\": 5.5, \"files\": []}";
  EXPECT_EQ(verify_checkpoint(d), "manifest.json: step 5.5 is not an integer");
  std::ofstream(d / "manifest.json") << "{\"step\": 5, \"files\": [{\"name\": \"model.safetensors\", \"size\": 5e112, "
                                        "\"crc32\": \"0\"}]}";
  EXPECT_EQ(verify_checkpoint(d), "model.safetensors: the manifest's size 5e+112 is not a byte count");
  std::ofstream(d / "manifest.json") << "{\"step\": 5, \"files\": [{\"name\": \"model.safetensors\", \"size\": -1, "
                                        "\"crc32\": \"0\"}]}";
  EXPECT_EQ(verify_checkpoint(d), "model.safetensors: the manifest's size -1 is not a byte count");
  CheckpointChoice c = latest_good_checkpoint(run.path);
  EXPECT_FALSE(c.checkpoint);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("no older checkpoint verifies"), std::string::npos) << c.warnings[0];
}

// The child writes a checkpoint with the fault hook and is SIGKILLed mid-write; whatever it
// left must never be taken for a checkpoint.
TEST(Checkpoint, KilledWriterNeverLeavesALoadableCheckpoint) {
  for (int kill_after : {1, 3}) {
    TempDir run;
    write_checkpoint(run.path, 20, files_for(20));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setenv("PRECON_FAULT_CKPT_KILL_AFTER_FILES", std::to_string(kill_after).c_str(), 1);
      try {
        write_checkpoint(run.path, 40, files_for(40));
      } catch (...) {
      }
      _exit(0);  // reached only if the hook did not fire
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited normally: the fault hook did not fire";
    EXPECT_EQ(WTERMSIG(status), SIGKILL);

    fs::path tmp = checkpoints_dir(run.path) / ("step_00000040.tmp-" + std::to_string(pid));
    ASSERT_TRUE(fs::exists(tmp));
    EXPECT_FALSE(fs::exists(tmp / "manifest.json"));
    EXPECT_EQ(fs::exists(tmp / "trainer.json"), kill_after == 3);
    EXPECT_EQ(list_checkpoints(run.path).size(), 1u);

    CheckpointChoice c = latest_good_checkpoint(run.path);
    ASSERT_TRUE(c.checkpoint);
    EXPECT_EQ(c.checkpoint->step, 20);
    EXPECT_EQ(slurp(c.checkpoint->dir / "trainer.json"), (nlohmann::json{{"step", 20}}.dump()));
    ASSERT_EQ(c.warnings.size(), 1u);
    EXPECT_NE(c.warnings[0].find("removed unfinished checkpoint step_00000040.tmp-"), std::string::npos);
    EXPECT_FALSE(fs::exists(tmp));
  }
}

// RLIMIT_FSIZE makes write() fail with EFBIG exactly like a full disk fails with ENOSPC,
// without needing a small filesystem. Runs in a child so the limit does not leak.
TEST(Checkpoint, WriteFailureIsClearAndLeavesPreviousIntact) {
  TempDir run;
  write_checkpoint(run.path, 20, files_for(20));
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {100000, 100000};
    setrlimit(RLIMIT_FSIZE, &lim);
    std::string report = "no error";
    try {
      write_checkpoint(run.path, 40, files_for(40, 300000));
    } catch (const CheckpointError& e) {
      report = std::to_string(e.sys_errno()) + "|" + e.what();
    } catch (const std::exception& e) {
      report = std::string("wrong type: ") + e.what();
    }
    (void)!write(fds[1], report.data(), report.size());
    _exit(0);
  }
  close(fds[1]);
  std::string report;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) report.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(report.substr(0, report.find('|')), std::to_string(EFBIG)) << report;
  EXPECT_NE(report.find("could not write checkpoint step_00000040"), std::string::npos) << report;
  EXPECT_NE(report.find("model.safetensors"), std::string::npos) << report;
  EXPECT_NE(report.find(std::strerror(EFBIG)), std::string::npos) << report;
  EXPECT_NE(report.find("earlier checkpoints are intact"), std::string::npos) << report;

  EXPECT_FALSE(has_temp_dirs(run.path));
  std::vector<CheckpointInfo> all = list_checkpoints(run.path);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(verify_checkpoint(all[0].dir), std::nullopt);
}

TEST(Checkpoint, CallbackErrorCleansUpAndBadNamesAreRejected) {
  TempDir run;
  std::vector<CheckpointFile> files = files_for(7);
  files.push_back({"broken.bin", [](ByteSink&) { throw std::runtime_error("serialiser failed"); }});
  EXPECT_THROW(write_checkpoint(run.path, 7, files), std::runtime_error);
  EXPECT_FALSE(has_temp_dirs(run.path));
  EXPECT_TRUE(list_checkpoints(run.path).empty());

  for (std::string bad : {"a/b", "manifest.json", "", ".."}) {
    EXPECT_THROW(write_checkpoint(run.path, 8, {CheckpointFile::from_string(bad, "x")}), CheckpointError) << bad;
  }
  EXPECT_THROW(write_checkpoint(run.path, 8, {CheckpointFile::from_string("a", "x"), CheckpointFile::from_string("a", "y")}),
               CheckpointError);
}

TEST(Checkpoint, RewritingAStepReplacesIt) {
  TempDir run;
  write_checkpoint(run.path, 10, {CheckpointFile::from_string("trainer.json", "old"),
                                  CheckpointFile::from_string("stale.bin", "x")});
  fs::path d = write_checkpoint(run.path, 10, {CheckpointFile::from_string("trainer.json", "new")});
  EXPECT_EQ(slurp(d / "trainer.json"), "new");
  EXPECT_FALSE(fs::exists(d / "stale.bin"));
  EXPECT_EQ(verify_checkpoint(d), std::nullopt);
  EXPECT_FALSE(has_temp_dirs(run.path));
}

TEST(Checkpoint, RetentionKeepsNewestGood) {
  TempDir run;
  for (int64_t s : {10, 20, 30, 40, 50}) write_checkpoint(run.path, s, files_for(s, 64));
  fs::path root = checkpoints_dir(run.path);
  fs::resize_file(root / "step_00000050" / "model.safetensors", 1);  // newest is damaged

  EXPECT_TRUE(apply_retention(run.path, 0).empty());
  EXPECT_TRUE(apply_retention(run.path, 5).empty());  // only 4 verify: delete nothing
  std::vector<fs::path> deleted = apply_retention(run.path, 2);
  ASSERT_EQ(deleted.size(), 2u);
  EXPECT_EQ(deleted[0].filename(), "step_00000010");
  EXPECT_EQ(deleted[1].filename(), "step_00000020");
  std::vector<CheckpointInfo> left = list_checkpoints(run.path);
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(left[0].step, 30);
  EXPECT_EQ(left[2].step, 50);

  deleted = apply_retention(run.path, 1);
  ASSERT_EQ(deleted.size(), 1u);
  EXPECT_EQ(deleted[0].filename(), "step_00000030");
  EXPECT_EQ(latest_good_checkpoint(run.path).checkpoint->step, 40);
}

TEST(Checkpoint, RetentionKeepsBestByObjective) {
  TempDir run;
  for (int64_t s : {10, 20, 30, 40, 50, 60}) write_checkpoint(run.path, s, files_for(s, 64));
  fs::path root = checkpoints_dir(run.path);
  fs::resize_file(root / "step_00000020" / "model.safetensors", 1);  // damaged: never ranked
  // Objective per step: 20 would be best but is damaged; 30 is the best good one; 40 ties 10's
  // value and loses to the earlier step; 50 has no value.
  std::map<int64_t, double> value{{10, 2.0}, {20, 0.5}, {30, 1.0}, {40, 2.0}, {60, 3.0}};
  RetentionPolicy policy;
  policy.keep_last = 1;
  policy.keep_best = 2;
  policy.objective = [&](const CheckpointInfo& c) -> std::optional<double> {
    auto it = value.find(c.step);
    return it == value.end() ? std::nullopt : std::optional<double>(it->second);
  };
  std::vector<fs::path> deleted = apply_retention(run.path, policy);
  std::vector<int64_t> left;
  for (const CheckpointInfo& c : list_checkpoints(run.path)) left.push_back(c.step);
  EXPECT_EQ(left, (std::vector<int64_t>{10, 30, 60}));  // best two (30, then 10 over 40) + newest
  ASSERT_EQ(deleted.size(), 3u);
  EXPECT_EQ(deleted[0].filename(), "step_00000020");

  // Maximising keeps the largest values instead; keep_last <= 0 still deletes nothing.
  policy.minimize = false;
  policy.keep_best = 1;
  EXPECT_TRUE(apply_retention(run.path, RetentionPolicy{0, 1, false, policy.objective}).empty());
  deleted = apply_retention(run.path, policy);  // best is 60 (3.0), which is also the newest
  left.clear();
  for (const CheckpointInfo& c : list_checkpoints(run.path)) left.push_back(c.step);
  EXPECT_EQ(left, (std::vector<int64_t>{60}));
}

TEST(Checkpoint, DirectoryNames) {
  EXPECT_EQ(checkpoint_dir_name(1200), "step_00001200");
  EXPECT_EQ(parse_checkpoint_dir_name("step_00001200"), 1200);
  EXPECT_EQ(parse_checkpoint_dir_name("step_123456789"), 123456789);
  EXPECT_EQ(parse_checkpoint_dir_name("step_00001200.tmp-42"), std::nullopt);
  EXPECT_EQ(parse_checkpoint_dir_name("step_0001"), std::nullopt);
}

}  // namespace
}  // namespace precon::worker
