// `precon study report EXP` as a user runs it, over a database seeded with a finished study
// (study_store_seed.h): the JSON on stdout and in its file, the table, and the exit codes (1 for
// no such experiment or no fit yet, 2 for an experiment that is not a study).
#include <gtest/gtest.h>

#include <cmath>

#include "tests/orchestrator/support/cli_fixture.h"
#include "tests/orchestrator/support/store_fixture.h"
#include "tests/orchestrator/support/study_store_seed.h"

namespace precon::orch::testing {
namespace {

// Muon's loss at compute C is AdamW's at 1.5 C; every cell's best lr is the grid's centre.
SeededMetrics cli_study_curve(const SeedCell& c) {
  const double k = c.arm == "muon" ? 1.5 : 1.0;
  const double penalty = 1 + 0.05 * std::pow(std::log2(c.lr_factor), 2);
  const double offset = c.seed == 0 ? -0.003 : 0.003;
  return {(2.0 + 1500 * std::pow(k * c.model_flops, -0.28)) * penalty * std::exp(offset), c.model_flops, 0};
}

class CliStudyReport : public CliFixture {
 protected:
  // The study in dir_/precon.db, where `precon` run in dir_ looks by default.
  int64_t seed_cli_study(size_t unfinished = 0) {
    Store store(dir_ / "precon.db");
    return seed_study(store, kSeededStudyRecipe, cli_study_curve, unfinished).experiment;
  }
};

TEST_F(CliStudyReport, PrintsTheJsonAndWritesItsFile) {
  const int64_t id = seed_cli_study();
  const test::CommandResult r = precon("study report tiny-study --json > out.json 2> err.log; s=$?; cat err.log; exit $s");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, "");
  const nlohmann::json j = nlohmann::json::parse(read_file(dir_ / "out.json"));
  EXPECT_EQ(j, nlohmann::json::parse(read_file(dir_ / ("study-" + std::to_string(id) + ".json"))))
      << "the default file holds the same report";
  EXPECT_EQ(j["experiment"], id);
  EXPECT_EQ(j["baseline"], "adamw");
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["complete"], true);
  EXPECT_EQ(j["points"].size(), 36u);
  ASSERT_EQ(j["arms"].size(), 2u);
  const double m = j["arms"][1]["multiplier"];
  EXPECT_NEAR(m, 1.5, 0.05);
  std::printf("precon study report: muon %.3f [%.3f, %.3f]\n", m, j["arms"][1]["interval"][0].get<double>(),
              j["arms"][1]["interval"][1].get<double>());
  int winners = 0;
  for (const nlohmann::json& p : j["points"]) {
    if (!p["winner"].get<bool>()) continue;
    ++winners;
    EXPECT_EQ(p["lr_factor"], 1.0);
  }
  EXPECT_EQ(winners, 12);
  ASSERT_EQ(j["sizes"].size(), 3u);
  EXPECT_EQ(j["sizes"][0]["winner"], "muon");
}

TEST_F(CliStudyReport, PrintsTheTable) {
  const int64_t id = seed_cli_study();
  const test::CommandResult r = precon("study report " + std::to_string(id) + " --out rep.json");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* part : {"baseline adamw, 36 of 36 trials finished", "the winning lr of each (arm, size)",
                           "multiplier", "95% interval", "the compute-optimal arm per size", "JSON: rep.json"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "rep.json"));
  EXPECT_FALSE(fs::exists(dir_ / ("study-" + std::to_string(id) + ".json")));
}

TEST_F(CliStudyReport, ExitCodes) {
  EXPECT_EQ(precon("study report 1").status, 1) << "no database";
  seed_cli_study(36);
  test::CommandResult r = precon("study report tiny-study");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("no fit against adamw: no trial of the study has completed yet"), std::string::npos) << r.output;
  r = precon("study report nowhere");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("no experiment \"nowhere\""), std::string::npos) << r.output;
  {
    Store store(dir_ / "precon.db");
    one_trial(store);
  }
  r = precon("study report e");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is not a study"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace precon::orch::testing
