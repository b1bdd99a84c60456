// metrics.jsonl: valid JSON lines, null for non-finite values, resume truncation, torn tails.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "worker/report/metrics.h"

namespace precon::worker {
namespace {

namespace fs = std::filesystem;

class ReportMetrics : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("precon_report_metrics_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = dir_ / "metrics.jsonl";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string contents() const {
    std::ifstream in(path_, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::vector<nlohmann::json> lines() const {
    std::vector<nlohmann::json> out;
    std::istringstream in(contents());
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  void write_steps(int64_t resume_step, int64_t first, int64_t last) const {
    MetricsWriter writer(path_, resume_step);
    for (int64_t s = first; s <= last; ++s) writer.write({s, 1.7e9 + s, {{"train_loss", 10.0 - s}}});
    writer.sync();
  }

  fs::path dir_;
  fs::path path_;
};

TEST_F(ReportMetrics, WritesFlatJsonLinesInOrder) {
  {
    MetricsWriter writer(path_, -1);
    writer.write({1, 1712345678.25, {{"train_loss", 3.5}, {"lr", 6e-4}, {"grad_norm", 0.125}}});
    writer.write({2, 1712345679.5, {{"val_loss", 3.25}, {"name \"quoted\"", -1.0}}});
    // Each line reaches the kernel as it is written: readable before sync or close.
    const auto got = lines();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0]["step"], 1);
    EXPECT_DOUBLE_EQ(got[0]["time"].get<double>(), 1712345678.25);
    EXPECT_DOUBLE_EQ(got[0]["train_loss"].get<double>(), 3.5);
    EXPECT_DOUBLE_EQ(got[0]["lr"].get<double>(), 6e-4);
    EXPECT_DOUBLE_EQ(got[0]["grad_norm"].get<double>(), 0.125);
    EXPECT_EQ(got[0].size(), 5u);  // flat: step, time and the three values
    EXPECT_EQ(got[1]["step"], 2);
    EXPECT_DOUBLE_EQ(got[1]["name \"quoted\""].get<double>(), -1.0);
    writer.sync();
  }
  // step and time come first, values in push order.
  EXPECT_EQ(contents().substr(0, 40).find("{\"step\": 1, \"time\": "), 0u);
  EXPECT_LT(contents().find("train_loss"), contents().find("\"lr\""));
}

TEST_F(ReportMetrics, NonFiniteValuesAreNull) {
  {
    MetricsWriter writer(path_, -1);
    writer.write({5, 1.0,
                  {{"nan", std::nan("")},
                   {"inf", std::numeric_limits<double>::infinity()},
                   {"ninf", -std::numeric_limits<double>::infinity()},
                   {"ok", 2.0}}});
  }
  const auto got = lines();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0]["nan"].is_null());
  EXPECT_TRUE(got[0]["inf"].is_null());
  EXPECT_TRUE(got[0]["ninf"].is_null());
  EXPECT_DOUBLE_EQ(got[0]["ok"].get<double>(), 2.0);
}

TEST_F(ReportMetrics, DoublesRoundTrip) {
  const double v = 0.1 + 0.2;
  const double t = 1712345678.123456;
  { MetricsWriter(path_, -1).write({1, t, {{"v", v}}}); }
  const auto got = lines();
  EXPECT_EQ(got[0]["v"].get<double>(), v);
  EXPECT_EQ(got[0]["time"].get<double>(), t);
}

TEST_F(ReportMetrics, ReservedNamesAreRejected) {
  MetricsWriter writer(path_, -1);
  EXPECT_THROW(writer.write({1, 1.0, {{"step", 1.0}}}), ReportError);
  EXPECT_THROW(writer.write({1, 1.0, {{"time", 1.0}}}), ReportError);
  EXPECT_THROW(writer.write({1, 1.0, {{"", 1.0}}}), ReportError);
  EXPECT_EQ(contents(), "");
}

TEST_F(ReportMetrics, ResumeCutsRecordsAfterTheResumeStep) {
  write_steps(-1, 1, 10);
  {
    MetricsWriter writer(path_, 6);
    EXPECT_EQ(writer.truncated_lines(), 4);
    // The resumed run recomputes steps 7.. and appends them: no duplicates.
    for (int64_t s = 7; s <= 8; ++s) writer.write({s, 2e9, {{"train_loss", 0.5}}});
  }
  const auto got = lines();
  ASSERT_EQ(got.size(), 8u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i]["step"], static_cast<int64_t>(i + 1));
  EXPECT_DOUBLE_EQ(got[5]["train_loss"].get<double>(), 4.0);  // the kept records are untouched
  EXPECT_DOUBLE_EQ(got[6]["train_loss"].get<double>(), 0.5);
}

TEST_F(ReportMetrics, ResumeKeepsEveryRecordAtTheResumeStep) {
  {
    MetricsWriter writer(path_, -1);
    writer.write({4, 1.0, {{"train_loss", 1.0}}});
    writer.write({4, 1.0, {{"val_loss", 2.0}}});  // eval at the checkpoint step: same step
    writer.write({5, 1.0, {{"train_loss", 1.0}}});
  }
  { MetricsWriter writer(path_, 4); }
  const auto got = lines();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[1].contains("val_loss"));
}

TEST_F(ReportMetrics, ResumeDropsATornLastLine) {
  write_steps(-1, 1, 3);
  {
    std::ofstream out(path_, std::ios::app | std::ios::binary);
    out << "{\"step\": 4, \"time\": 1.0, \"train_lo";  // a crash in the middle of a line
  }
  {
    MetricsWriter writer(path_, 100);
    EXPECT_EQ(writer.truncated_lines(), 1);
    writer.write({4, 1.0, {{"train_loss", 1.0}}});
  }
  const auto got = lines();  // every line parses
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3]["step"], 4);
}

TEST_F(ReportMetrics, ResumeDropsGarbageTail) {
  write_steps(-1, 1, 3);
  {
    std::ofstream out(path_, std::ios::app | std::ios::binary);
    out << std::string(16, '\0') << "\nnot json\n";  // what a crash can leave after the last write
  }
  { MetricsWriter writer(path_, 2); }
  const auto got = lines();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1]["step"], 2);
}

TEST_F(ReportMetrics, ResumeBeforeEveryRecordEmptiesTheFile) {
  write_steps(-1, 5, 9);
  { MetricsWriter writer(path_, 2); }
  EXPECT_EQ(contents(), "");
  write_steps(-1, 5, 9);
  { MetricsWriter writer(path_, -1); }  // a fresh run
  EXPECT_EQ(contents(), "");
}

TEST_F(ReportMetrics, OpeningCreatesAMissingFile) {
  { MetricsWriter writer(path_, 50); }
  EXPECT_TRUE(fs::exists(path_));
  EXPECT_EQ(contents(), "");
}

TEST_F(ReportMetrics, UnwritableDirectoryIsAnIoError) {
  EXPECT_THROW(MetricsWriter(dir_ / "missing" / "metrics.jsonl", -1), IoError);
}

}  // namespace
}  // namespace precon::worker
