// `precon recipe check` and `precon recipe keys` as a user runs them: the real binary, its exit
// status and what it prints.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/common/test_util.h"

namespace precon {
namespace {

namespace fs = std::filesystem;

using Result = test::CommandResult;

Result run_precon(const std::string& args) { return test::run_command(std::string(PRECON_BIN) + " " + args); }

class RecipeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("precon_cli_recipe_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

TEST_F(RecipeCli, CheckReportsEveryMistakeInLineOrderAndFails) {
  const std::string path = write("bad.toml",
                                 "[model]\n"
                                 "n_layer = 2\n"
                                 "[optimizer.muon]\n"
                                 "ns_steps = 0\n"          // line 4: below the range
                                 "[train]\n"
                                 "stesp = 10\n"            // line 6: a typo
                                 "[resources]\n"
                                 "partition = \"gpu;x\"\n");  // line 8: not a Slurm name
  Result r = run_precon("recipe check " + path);
  EXPECT_EQ(r.status, 2) << r.output;
  const size_t a = r.output.find(path + ":4: optimizer.muon.ns_steps: value 0 is out of range: expected between 1 and 100");
  const size_t b = r.output.find(path + ":6: train.stesp: unknown key (did you mean train.steps?)");
  const size_t c = r.output.find(path + ":8: resources.partition:");
  ASSERT_NE(a, std::string::npos) << r.output;
  ASSERT_NE(b, std::string::npos) << r.output;
  ASSERT_NE(c, std::string::npos) << r.output;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_EQ(r.output.find("trial(s)"), std::string::npos) << r.output;
}

TEST_F(RecipeCli, CheckAcceptsAGoodRecipe) {
  const std::string path = write("good.toml", "[train]\nsteps = 2\n[sweep.parameters]\n\"optimizer.lr\" = [0.1, 0.2]\n");
  Result r = run_precon("recipe check " + path + " --set train.seed=3");
  EXPECT_NE(r.output.find("2 trial(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("optimizer.lr=0.2"), std::string::npos) << r.output;
}

TEST_F(RecipeCli, CheckSaysWhereEarlyStoppingDecides) {
  const std::string base = "[train]\nsteps = 810\n[sweep.parameters]\n\"optimizer.lr\" = [0.1, 0.2]\n[sweep.early_stop]\n";
  Result r = run_precon("recipe check " + write("hb.toml", base + "method = \"hyperband\"\nmin_step = 30\n"));
  EXPECT_NE(r.output.find("early stopping: Hyperband on val_loss (min), 4 bracket(s) of ASHA over steps 30..810, rungs at "
                          "steps 30, 90, 270, 810"), std::string::npos) << r.output;
  r = run_precon("recipe check " + write("asha.toml", base + "method = \"asha\"\nmin_step = 100\nreduction_factor = 2\n"));
  EXPECT_NE(r.output.find("early stopping: ASHA on val_loss (min), rungs at steps 100, 200, 400, 800 (the best 1/2 of "
                          "each goes on; a stopped trial resumes once it ranks among them)"),
            std::string::npos) << r.output;
  r = run_precon("recipe check " + write("none.toml", "[train]\nsteps = 10\n"));
  EXPECT_EQ(r.output.find("early stopping"), std::string::npos) << r.output;
}

TEST_F(RecipeCli, CheckRefusesWhatIsNotARecipe) {
  Result r = run_precon("recipe check " + dir_.string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is a directory"), std::string::npos) << r.output;
  r = run_precon("recipe check " + (dir_ / "absent.toml").string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  r = run_precon("recipe check /dev/zero");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("larger than 1 MiB"), std::string::npos) << r.output;
  // An empty file is a valid recipe of defaults, but not silently.
  r = run_precon("recipe check " + write("empty.toml", ""));
  EXPECT_NE(r.output.find("sets no keys"), std::string::npos) << r.output;
}

TEST_F(RecipeCli, KeysListTrialAndSweepKeys) {
  Result r = run_precon("recipe keys");
  EXPECT_EQ(r.status, 0);
  for (const char* key : {"optimizer.muon.ns_steps", "resources.partition", "sweep.max_attempts",
                          "sweep.early_stop.reduction_factor", "sweep.parameters.<key>"})
    EXPECT_NE(r.output.find(key), std::string::npos) << key;
}

}  // namespace
}  // namespace precon
