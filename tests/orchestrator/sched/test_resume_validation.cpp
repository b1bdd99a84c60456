// A checkpoint whose checksums pass is not therefore usable: one written consistently (manifest
// and all) with NaN weights, a negative step or a truncated model file must be skipped, with a
// warning naming it and the reason, for the previous one; the real trainer resumes from it.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/test_util.h"
#include "tests/orchestrator/support/controller_fixture.h"
#include "worker/ckpt/checkpoint.h"
#include "worker/common/file_io.h"

namespace precon::orch::testing {
namespace {

class ResumeValidation : public ControllerFixture {
 protected:
  test::CommandResult train(const fs::path& run, int steps) const {
    std::ofstream(dir_ / "r.toml") << recipe(steps, "");
    return test::run_command("timeout -s KILL 120 " + std::string(PRECON_TRAIN_BIN) + " --config " +
                             (dir_ / "r.toml").string() + " --run-dir " + run.string());
  }
  // Rewrites step 20's checkpoint with `tamper` applied to one file, manifest consistent.
  static void rewrite_step_20(const fs::path& run, const std::string& name,
                              const std::function<void(std::vector<uint8_t>&)>& tamper) {
    const fs::path dir = worker::checkpoints_dir(run) / worker::checkpoint_dir_name(20);
    std::vector<worker::CheckpointFile> files;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string file = entry.path().filename().string();
      if (file == "manifest.json") continue;
      std::vector<uint8_t> bytes = worker::read_file(entry.path());
      if (file == name) tamper(bytes);
      files.push_back(worker::CheckpointFile::from_bytes(file, std::move(bytes)));
    }
    worker::write_checkpoint(run, 20, files);
    ASSERT_FALSE(worker::verify_checkpoint(dir)) << "the tampered checkpoint must pass its checksums";
  }
};

// The first F32 tensor's first value becomes NaN.
void nan_weight(std::vector<uint8_t>& bytes) {
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + header_size);
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__" || t.at("dtype") != "F32") continue;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(bytes.data() + 8 + header_size + t.at("data_offsets")[0].get<size_t>(), &nan, sizeof nan);
    return;
  }
  FAIL() << "no F32 tensor in model.safetensors";
}

TEST_F(ResumeValidation, AConsistentButBadNewestCheckpointFallsBackToThePreviousOne) {
  const fs::path run = dir_ / "run";
  const test::CommandResult first = train(run, 20);
  ASSERT_EQ(first.status, 0) << first.output;

  struct Case {
    const char* what;
    const char* file;
    std::function<void(std::vector<uint8_t>&)> tamper;
    const char* reason;
  };
  const Case cases[] = {
      {"NaN weights", "model.safetensors", nan_weight, "holds a NaN or infinity"},
      {"negative step", "trainer.json",
       [](std::vector<uint8_t>& b) {
         nlohmann::json j = nlohmann::json::parse(b.begin(), b.end());
         j["step"] = -5;
         const std::string text = j.dump();
         b.assign(text.begin(), text.end());
       },
       "step -5 is not within [0, train.steps = 30]"},
      {"truncated model", "model.safetensors", [](std::vector<uint8_t>& b) { b.resize(b.size() - 100); }, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path copy = dir_ / (std::string("run-") + std::to_string(&c - cases));
    fs::copy(run, copy, fs::copy_options::recursive);
    rewrite_step_20(copy, c.file, c.tamper);
    const test::CommandResult r = train(copy, 30);
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("warning: checkpoint step_00000020 cannot be resumed ("), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.reason), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("resumed from " + (worker::checkpoints_dir(copy) / "step_00000010").string() + " at step 10"),
              std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace precon::orch::testing
