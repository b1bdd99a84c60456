// `precon study fit POINTS.json` as a user runs it: --json on a synthetic points file (the
// documented keys, muon's multiplier of 2 found), the table, and the exit codes: 2 for a file
// that is not a points file (naming the file and the JSON path) or values that are not points,
// 1 for points that no curve fits.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/orchestrator/support/cli_fixture.h"

namespace precon::orch::testing {
namespace {

class CliStudy : public CliFixture {
 protected:
  // Sizes 0..3 at 1e18..1e20 FLOPs, three seeds with fixed ±0.5 % offsets; muon's loss at C is
  // adamw's at 2C (L = 1.8 + 4.27e5 * C^-0.3), so muon's multiplier is 2.
  nlohmann::json points(int sizes = 4) const {
    nlohmann::json out = {{"baseline", "adamw"}, {"points", nlohmann::json::array()}};
    const double offsets[3] = {-0.005, 0.0, 0.005};
    for (int size = 0; size < sizes; ++size) {
      const double compute = 1e18 * std::pow(10.0, 2.0 * size / 3);
      for (int seed = 0; seed < 3; ++seed)
        for (const auto& [arm, k] : {std::pair<std::string, double>{"adamw", 1.0}, {"muon", 2.0}}) {
          const double loss = (1.8 + 4.27e5 * std::pow(k * compute, -0.3)) * std::exp(offsets[(seed + size) % 3]);
          out["points"].push_back({{"arm", arm}, {"size", size}, {"seed", seed}, {"compute", compute}, {"loss", loss}});
        }
    }
    return out;
  }

  void write(const std::string& name, const std::string& text) const { std::ofstream(dir_ / name) << text; }

  // `precon ARGS` with its stdout in dir_/out.json: the result's output is its stderr alone.
  test::CommandResult precon_stdout_to_file(const std::string& args) const {
    return precon(args + " > out.json 2> err.log; status=$?; cat err.log; exit $status");
  }
};

TEST_F(CliStudy, FitPrintsTheMultipliersAsJson) {
  write("points.json", points().dump(2));
  const test::CommandResult r = precon_stdout_to_file("study fit points.json --json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, "") << "nothing on stderr for a good fit";
  const nlohmann::json j = nlohmann::json::parse(read_file(dir_ / "out.json"));
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"arms", "baseline", "ok", "reason", "warnings"}));
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["baseline"], "adamw");
  EXPECT_EQ(j["reason"], "");
  EXPECT_EQ(j["warnings"], nlohmann::json::array());
  ASSERT_EQ(j["arms"].size(), 2u);
  const nlohmann::json& base = j["arms"][0];
  EXPECT_EQ(base["arm"], "adamw");
  EXPECT_EQ(base["multiplier"], 1.0);
  EXPECT_EQ(base["interval"], nlohmann::json::array({1.0, 1.0}));
  const nlohmann::json& muon = j["arms"][1];
  EXPECT_EQ(muon["arm"], "muon");
  const double m = muon["multiplier"], lo = muon["interval"][0], hi = muon["interval"][1];
  std::printf("precon study fit: muon %.3f [%.3f, %.3f]\n", m, lo, hi);
  EXPECT_LT(lo, m);
  EXPECT_GT(hi, m);
  EXPECT_LE(lo, 2);
  EXPECT_GE(hi, 2);
  EXPECT_LT(hi - lo, 1);
  EXPECT_EQ(muon["E"], base["E"]) << "E is shared";
  EXPECT_NEAR(muon["E"].get<double>(), 1.8, 0.2);
  EXPECT_NEAR(muon["alpha"].get<double>(), 0.3, 0.05);
  EXPECT_GT(muon["A"].get<double>(), 0);
  EXPECT_LT(muon["rms_residual"].get<double>(), 0.01);
  ASSERT_EQ(muon["multiplier_by_size"].size(), 4u);
  for (const auto& by_size : muon["multiplier_by_size"]) EXPECT_NEAR(by_size.get<double>(), 2, 0.3);

  // The same fit as a table.
  const test::CommandResult table = precon("study fit points.json");
  ASSERT_EQ(table.status, 0) << table.output;
  for (const char* text : {"arm", "multiplier", "95% interval", "rms residual", "by size (0 1 2 3)", "mean residual"})
    EXPECT_NE(table.output.find(text), std::string::npos) << text << "\n" << table.output;
  char muon_row[64];
  std::snprintf(muon_row, sizeof muon_row, "\nmuon   %.3g ", m);
  EXPECT_NE(table.output.find(muon_row), std::string::npos) << muon_row << table.output;
}

TEST_F(CliStudy, AFileThatIsNotAPointsFileExitsTwoNamingTheJsonPath) {
  nlohmann::json bad = points();
  bad["points"][3]["loss"] = "3.2";
  write("points.json", bad.dump());
  test::CommandResult r = precon("study fit points.json --json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output, "precon: points.json: points[3].loss: expected a number, got string\n");

  bad = points();
  bad["points"][1].erase("compute");
  write("points.json", bad.dump());
  r = precon("study fit points.json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output, "precon: points.json: points[1].compute: missing\n");

  bad = points();
  bad["points"][0]["size"] = 1.5;
  bad["points"][0]["los"] = 3;
  write("points.json", bad.dump());
  r = precon("study fit points.json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("points.json: points[0].los: unknown key"), std::string::npos) << r.output;

  bad["points"][0].erase("los");
  write("points.json", bad.dump());
  r = precon("study fit points.json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output, "precon: points.json: points[0].size: expected an integer, got 1.5\n");

  write("points.json", "{\"baseline\": \"adamw\", \"points\": [");
  r = precon("study fit points.json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("precon: points.json: not JSON: "), std::string::npos) << r.output;

  write("points.json", "{\"baseline\": 1, \"points\": []}");
  r = precon("study fit points.json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output, "precon: points.json: baseline: expected a string, got an integer\n");

  r = precon("study fit nowhere.json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("nowhere.json: no such file"), std::string::npos) << r.output;

  // Well-formed, but a loss that is not one: bad input too, with the point's path.
  bad = points();
  bad["points"][5]["loss"] = -1;
  write("points.json", bad.dump());
  r = precon("study fit points.json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("points.json: no fit against adamw: points[5].loss is -1 (arm muon)"), std::string::npos)
      << r.output;
}

TEST_F(CliStudy, PointsThatNoCurveFitsExitOneWithTheReason) {
  write("points.json", points(2).dump());
  const test::CommandResult r = precon_stdout_to_file("study fit points.json --json");
  EXPECT_EQ(r.status, 1) << r.output;
  const std::string reason =
      "fewer than 3 model sizes (the curve has 2 parameters per arm besides the shared E): adamw (sizes 0, 1); muon "
      "(sizes 0, 1)";
  EXPECT_EQ(r.output, "precon: points.json: no fit against adamw: " + reason + "\n");
  const nlohmann::json j = nlohmann::json::parse(read_file(dir_ / "out.json"));
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["reason"], reason);
  EXPECT_EQ(j["arms"], nlohmann::json::array());

  const test::CommandResult table = precon("study fit points.json");
  EXPECT_EQ(table.status, 1) << table.output;
  EXPECT_EQ(table.output, "precon: points.json: no fit against adamw: " + reason + "\n") << "no numbers printed";

  // The group takes only known subcommands.
  EXPECT_EQ(precon("study").status, 2);
}

}  // namespace
}  // namespace precon::orch::testing
