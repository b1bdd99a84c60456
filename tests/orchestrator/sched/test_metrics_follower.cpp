// Following a metrics.jsonl as a program writes it: whole lines only until the program ends,
// each line once, a file cut back or rewritten read again from its start, bad lines and values
// skipped and named with their line numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "orchestrator/sched/metrics_follower.h"

namespace precon::orch {
namespace {

namespace fs = std::filesystem;

class Follower : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("precon_follower_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = dir_ / "metrics.jsonl";
  }
  void TearDown() override { fs::remove_all(dir_); }
  void append(const std::string& text) const { std::ofstream(path_, std::ios::app) << text; }
  void replace(const std::string& text) const {
    std::ofstream(path_.string() + ".tmp") << text;
    fs::rename(path_.string() + ".tmp", path_);
  }
  // (name, step, value) of each point, as text: "loss@3=0.5".
  static std::vector<std::string> text(const MetricsFollower::Batch& b) {
    std::vector<std::string> out;
    for (const MetricPoint& p : b.points) {
      char value[32];
      std::snprintf(value, sizeof value, "%g", p.value);
      out.push_back(p.name + "@" + std::to_string(p.step) + "=" + value);
    }
    return out;
  }
  fs::path dir_, path_;
};

using Texts = std::vector<std::string>;

TEST_F(Follower, TakesWholeLinesOnceEachAndALastUnfinishedOneAtTheEnd) {
  MetricsFollower f(path_);
  EXPECT_TRUE(f.read(false, 0).points.empty());  // no file yet
  append("{\"step\": 1, \"loss\": 0.5, \"time\": 100.25}\n{\"step\": 2, \"loss\": 0.25}\n{\"step\": 3, \"lo");
  MetricsFollower::Batch b = f.read(false, 7.0);
  EXPECT_EQ(text(b), (Texts{"loss@1=0.5", "loss@2=0.25"}));
  EXPECT_EQ(b.points[0].time, 100.25);
  EXPECT_EQ(b.points[1].time, 7.0);  // no "time": when it was read
  EXPECT_TRUE(f.read(false, 0).points.empty());  // nothing new, the torn line not yet
  append("ss\": 0.125}\n{\"step\": 4, \"loss\": null, \"acc\": 1}");
  EXPECT_EQ(text(f.read(false, 0)), (Texts{"loss@3=0.125"}));
  b = f.read(true, 0);  // the program has ended: its last line had no newline
  ASSERT_EQ(b.points.size(), 2u);
  EXPECT_EQ(b.points[0].name, "acc");  // a line's metrics by name
  EXPECT_EQ(b.points[1].name, "loss");
  EXPECT_TRUE(std::isnan(b.points[1].value));  // null
  EXPECT_TRUE(f.read(true, 0).points.empty());
  EXPECT_EQ(f.records(), 4);
  EXPECT_EQ(f.problems(), 0);
}

TEST_F(Follower, AFileCutBackOrRewrittenIsReadAgain) {
  MetricsFollower f(path_);
  append("{\"step\": 1, \"loss\": 4}\n{\"step\": 2, \"loss\": 3}\n{\"step\": 3, \"loss\": 2}\n");
  EXPECT_EQ(f.read(false, 0).points.size(), 3u);
  // Resumed from step 1's checkpoint: the later records dropped, then new ones appended.
  replace("{\"step\": 1, \"loss\": 4}\n");
  EXPECT_EQ(text(f.read(false, 0)), (Texts{"loss@1=4"}));
  append("{\"step\": 2, \"loss\": 2.5}\n");
  EXPECT_EQ(text(f.read(false, 0)), (Texts{"loss@2=2.5"}));
  // Rewritten longer than before with other bytes where the last read ended.
  replace("{\"step\": 1, \"loss\": 9}\n{\"step\": 2, \"loss\": 8}\n{\"step\": 3, \"loss\": 7}\n");
  EXPECT_EQ(text(f.read(false, 0)), (Texts{"loss@1=9", "loss@2=8", "loss@3=7"}));
}

TEST_F(Follower, BadLinesAndValuesAreSkippedAndNamed) {
  MetricsFollower f(path_);
  append("{\"step\": 1, \"loss\": 1}\n"
         "step 2 loss 0.5\n"
         "\n"
         "{\"loss\": 0.4}\n"
         "{\"step\": -1, \"loss\": 0.4}\n"
         "{\"step\": 5, \"loss\": \"low\", \"acc\": 0.5}\n"
         "{\"step\": 6}\n"
         "[1, 2]\n");
  const MetricsFollower::Batch b = f.read(false, 0);
  EXPECT_EQ(text(b), (Texts{"loss@1=1", "acc@5=0.5"}));
  EXPECT_EQ(b.problems, (Texts{"metrics.jsonl line 2: not a JSON object (\"step 2 loss 0.5\"); skipped",
                               "metrics.jsonl line 4: needs \"step\": an integer from 0 up, got none; skipped",
                               "metrics.jsonl line 5: needs \"step\": an integer from 0 up, got -1; skipped",
                               "metrics.jsonl line 6: \"loss\" is \"low\", not a number or null; skipped",
                               "metrics.jsonl line 7: a record without metrics; skipped",
                               "metrics.jsonl line 8: not a JSON object (\"[1, 2]\"); skipped"}));
  EXPECT_EQ(f.problems(), 6);
  EXPECT_EQ(f.first_problem(), b.problems.front());
}

TEST_F(Follower, NoMoreThanTheNameLimit) {
  MetricsFollower f(path_);
  std::string line = "{\"step\": 1";
  for (size_t i = 0; i <= MetricsFollower::kMaxNames; ++i) line += ", \"m" + std::to_string(i) + "\": 1";
  append(line + "}\n");
  const MetricsFollower::Batch b = f.read(false, 0);
  EXPECT_EQ(b.points.size(), MetricsFollower::kMaxNames);
  ASSERT_EQ(b.problems.size(), 1u);
  EXPECT_NE(b.problems[0].find("more than 256"), std::string::npos) << b.problems[0];
}

}  // namespace
}  // namespace precon::orch
