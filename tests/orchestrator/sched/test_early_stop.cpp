// EarlyStopper against Optuna's pruners (Debian's python3-optuna) on fixed synthetic curves,
// plus hand-made cases for the rules' edges.
#include "orchestrator/sched/early_stop.h"
#include "tests/common/skip.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/test_util.h"

namespace precon::orch {
namespace {

using nlohmann::json;
using test::kNaN;
constexpr double kInf = std::numeric_limits<double>::infinity();

double decode(const json& v) {
  if (v.is_number()) return v.get<double>();
  const auto s = v.get<std::string>();
  if (s == "nan") return kNaN;
  if (s == "inf") return kInf;
  if (s == "-inf") return -kInf;
  throw std::runtime_error("bad value in reference file: " + s);
}

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// ---- Optuna reference ----

class EarlyStopOptuna : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string py = PRECON_PYTHON;
    if (std::system((py + " -c 'import optuna' >/dev/null 2>&1").c_str()) != 0) {
      skip_ = "optuna cannot be imported by " + py + " (install python3-optuna: deploy/install-deps.sh)";
      return;
    }
    const std::string out = ::testing::TempDir() + "early_stop_reference-" + std::to_string(::getpid()) + ".json";
    const std::string cmd = py + " " + PRECON_SOURCE_DIR +
                            "/tests/orchestrator/sched/early_stop_reference.py --out " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(out);
    ref_ = json::parse(f);
    std::remove(out.c_str());
  }

  void SetUp() override {
    if (!skip_.empty()) PRECON_SKIP_UNLESS_CI(skip_);
    // (ctest would count a failed SetUpTestSuite as skipped: each test fails on its own.)
    if (ref_.is_null()) FAIL() << "the Optuna reference file was not produced (see SetUpTestSuite's error)";
  }

  static EarlyStopSettings settings_of(const json& c) {
    EarlyStopSettings s;
    const auto& js = c["settings"];
    s.method = c["method"].get<std::string>();
    s.mode = js["mode"].get<std::string>();
    if (s.method == "asha") {
      s.min_step = js["min_step"];
      s.reduction_factor = js["reduction_factor"];
      s.min_early_stopping_rate = js["min_early_stopping_rate"];
    } else if (s.method == "hyperband") {
      s.min_step = js["min_step"];
      s.max_step = js["max_step"];
      s.reduction_factor = js["reduction_factor"];
      s.study_name = js["study_name"];
    } else {
      s.n_startup_trials = js["n_startup_trials"];
      s.n_warmup_steps = js["n_warmup_steps"];
      s.interval = js["interval"];
    }
    return s;
  }

  // Replays every case of (method, order): each report goes through EarlyStopper with the
  // history, completed set and stopped rungs as the scheduler would hold them, and must get
  // Optuna's answer; for asha the rung values recorded per trial must match Optuna's too.
  static void replay(const std::string& method, const std::string& order) {
    int cases = 0;
    for (const auto& c : ref_["cases"]) {
      if (c["method"] != method || c["order"] != order) continue;
      ++cases;
      SCOPED_TRACE(c["settings"].dump());
      const EarlyStopper stopper(settings_of(c));
      const bool rungs = method == "asha" || method == "hyperband";
      if (method == "hyperband") {
        // Every trial in Optuna's bracket (the trial's number is its id here).
        for (const auto& [t, b] : c["brackets"].items())
          ASSERT_EQ(stopper.bracket_of(std::stoll(t)), b.get<int64_t>()) << "trial " << t;
      }
      ObjectiveHistory history;
      std::set<int64_t> completed;
      std::map<int64_t, int64_t> stopped;
      std::map<int64_t, std::map<int64_t, double>> rung_values;
      int reports = 0, stops = 0, promotions = 0;
      for (const auto& e : c["events"]) {
        const int64_t trial = e["trial"];
        if (e["type"] == "end") {
          if (e["state"] == "COMPLETE") completed.insert(trial);
          continue;
        }
        const int64_t step = e["step"];
        const double value = decode(e["value"]);
        history[trial].emplace(step, value);
        const auto d = stopper.report(trial, step, value, history, completed, stopped);
        ++reports;
        ASSERT_EQ(d.stop, e["pruned"].get<bool>())
            << "trial " << trial << " step " << step << " value " << value << ": optuna "
            << (e["pruned"].get<bool>() ? "pruned" : "continued") << ", ours "
            << (d.stop ? "stopped (" + d.reason + ")" : "continued") << " data " << d.data.dump();
        if (d.stop) {
          ++stops;
          EXPECT_EQ(d.rule, method);
          EXPECT_FALSE(d.reason.empty());
          if (rungs) stopped[trial] = d.data["rung"];
        }
        if (rungs && d.data.contains("rungs")) {
          for (const auto& r : d.data["rungs"]) {
            rung_values[trial][r["rung"].get<int64_t>()] = value;
            promotions += r["promoted"].get<bool>() ? 1 : 0;
          }
        }
      }
      EXPECT_GT(stops, 0) << "a case that stops nothing proves little";
      if (!rungs) continue;
      EXPECT_GT(promotions, 0);
      std::map<int64_t, std::map<int64_t, double>> optuna_rungs;
      for (const auto& [t, rs] : c["rungs"].items())
        for (const auto& [k, v] : rs.items()) optuna_rungs[std::stoll(t)][std::stoll(k)] = decode(v);
      std::erase_if(rung_values, [](const auto& kv) { return kv.second.empty(); });
      std::erase_if(optuna_rungs, [](const auto& kv) { return kv.second.empty(); });
      ASSERT_EQ(rung_values.size(), optuna_rungs.size()) << "trials that recorded a rung differ";
      for (const auto& [t, rs] : optuna_rungs) {
        ASSERT_TRUE(rung_values.contains(t)) << "trial " << t;
        ASSERT_EQ(rung_values[t].size(), rs.size()) << "trial " << t << ": rungs reached differ";
        for (const auto& [k, v] : rs)
          EXPECT_TRUE(same_value(rung_values[t][k], v)) << "trial " << t << " rung " << k;
      }
    }
    EXPECT_GE(cases, 4);
  }

  static inline json ref_;
  static inline std::string skip_;
};

TEST_F(EarlyStopOptuna, AshaSequential) { replay("asha", "sequential"); }
TEST_F(EarlyStopOptuna, AshaInterleaved) { replay("asha", "interleaved"); }
TEST_F(EarlyStopOptuna, HyperbandSequential) { replay("hyperband", "sequential"); }
TEST_F(EarlyStopOptuna, HyperbandInterleaved) { replay("hyperband", "interleaved"); }
TEST_F(EarlyStopOptuna, MedianSequential) { replay("median", "sequential"); }
TEST_F(EarlyStopOptuna, MedianInterleaved) { replay("median", "interleaved"); }

// ---- hand-made cases ----

EarlyStopSettings asha(int64_t min_step, int64_t rf, int64_t rate = 0, std::string mode = "min") {
  EarlyStopSettings s;
  s.method = "asha";
  s.min_step = min_step;
  s.reduction_factor = rf;
  s.min_early_stopping_rate = rate;
  s.mode = std::move(mode);
  return s;
}

TEST(EarlyStop, RungSteps) {
  EXPECT_EQ(EarlyStopper(asha(100, 3)).rungs(1000), (std::vector<int64_t>{100, 300, 900}));
  EXPECT_EQ(EarlyStopper(asha(100, 3, 1)).rungs(2700), (std::vector<int64_t>{300, 900, 2700}));
  EXPECT_EQ(EarlyStopper(asha(1, 2)).rungs(std::numeric_limits<int64_t>::max()).size(), 63u);
  EarlyStopSettings m;
  m.method = "median";
  EXPECT_TRUE(EarlyStopper(m).rungs(1000).empty());
}

TEST(EarlyStop, RejectsBadSettings) {
  auto throws_naming = [](EarlyStopSettings s, const std::string& key) {
    try {
      EarlyStopper x(std::move(s));
      ADD_FAILURE() << "no error for " << key;
    } catch (const EarlyStopError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  throws_naming(asha(100, 1), "reduction_factor");
  throws_naming(asha(0, 3), "min_step");
  throws_naming(asha(100, 3, -1), "min_early_stopping_rate");
  throws_naming(asha(100, 3, 0, "lowest"), "mode");
  EarlyStopSettings s;
  s.method = "pbt";
  throws_naming(s, "method");
  s.method = "median";
  s.interval = 0;
  throws_naming(s, "interval");
  EarlyStopSettings h;  // Hyperband's first rung past its longest run
  h.method = "hyperband";
  h.min_step = 500;
  h.max_step = 200;
  throws_naming(h, "min_step");
}

TEST(EarlyStop, NoneNeverStops) {
  EarlyStopSettings s;
  s.method = "none";
  const EarlyStopper stopper(s);
  ObjectiveHistory h{{0, {{100, 1.0}}}, {1, {{100, 9.0}}}};
  const auto d = stopper.report(1, 100, 9.0, h, {0});
  EXPECT_FALSE(d.stop);
  EXPECT_TRUE(d.rule.empty());
}

TEST(EarlyStop, AshaStopsOutsideTopFractionWithReason) {
  const EarlyStopper stopper(asha(100, 3));
  ObjectiveHistory h;
  const double values[] = {1.0, 1.1, 1.2, 1.3, 1.4, 1.5};
  for (int64_t t = 0; t < 6; ++t) h[t] = {{100, values[t]}};
  // 7 competitors at rung 0 -> the best 7/3 = 2 go on: cutoff is 1.1.
  h[6] = {{50, 4.0}, {100, 1.1}};
  auto d = stopper.report(6, 100, 1.1, h, {});
  EXPECT_FALSE(d.stop) << "a tie with the cutoff is promoted";
  h[6][100] = 1.15;
  d = stopper.report(6, 100, 1.15, h, {});
  ASSERT_TRUE(d.stop);
  EXPECT_EQ(d.rule, "asha");
  EXPECT_EQ(d.reason,
            "ASHA rung 0 (step 100): val_loss 1.15 is not in the top 2 of 7 trials (1/3, cutoff 1.1)");
  EXPECT_EQ(d.data["rung"], 0);
  EXPECT_EQ(d.data["rung_step"], 100);
  EXPECT_EQ(d.data["competitors"], 7);
  EXPECT_DOUBLE_EQ(d.data["cutoff"].get<double>(), 1.1);
}

TEST(EarlyStop, AshaModeMaxAndNaN) {
  const EarlyStopper stopper(asha(10, 2, 0, "max"));
  ObjectiveHistory h{{0, {{10, 0.5}}}, {1, {{10, 0.7}}}, {2, {{10, 0.6}}}};
  EXPECT_FALSE(stopper.report(1, 10, 0.7, h, {}).stop);
  EXPECT_TRUE(stopper.report(2, 10, 0.6, h, {}).stop);  // 3 competitors: only the best goes on
  h[3] = {{5, kNaN}};
  EXPECT_FALSE(stopper.report(3, 5, kNaN, h, {}).stop) << "NaN before the first rung is ignored";
  h[3][10] = kNaN;
  const auto d = stopper.report(3, 10, kNaN, h, {});
  EXPECT_TRUE(d.stop);
  EXPECT_NE(d.reason.find("NaN"), std::string::npos);
}

// One report passing two rungs: trial 1 reported 250 with rungs at 100 and 200; whether it
// counts at rung 1 depends on whether it was stopped at rung 0, which only the scheduler knows.
TEST(EarlyStop, AshaSparseReportUsesStoppedRung) {
  const EarlyStopper stopper(asha(100, 2));
  ObjectiveHistory h{{0, {{100, 1.0}, {200, 0.9}}},
                     {1, {{250, 5.0}}},
                     {2, {{100, 0.5}, {200, 1.0}}},
                     {3, {{100, 1.1}, {200, 1.2}}}};
  // Trial 1 at rung 1: {0.9, 1.0, 1.2, 5.0}, the best 4/2 = 2 go on, cutoff 1.0.
  auto d = stopper.report(2, 200, 1.0, h, {});
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.data["competitors"], 4);
  // Trial 1 stopped at rung 0: {0.9, 1.0, 1.2}, the best 1 goes on.
  d = stopper.report(2, 200, 1.0, h, {}, {{1, 0}});
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.data["rung"], 1);
  EXPECT_EQ(d.data["competitors"], 3);
}

TEST(EarlyStop, MedianRule) {
  EarlyStopSettings s;
  s.method = "median";
  s.n_startup_trials = 2;
  s.n_warmup_steps = 100;
  s.interval = 100;
  const EarlyStopper stopper(s);
  ObjectiveHistory h{{0, {{100, 1.0}, {200, 0.8}}}, {1, {{100, 2.0}, {200, 1.0}}}};
  h[2] = {{100, 3.0}};
  EXPECT_FALSE(stopper.report(2, 100, 3.0, h, {0}).stop) << "1 completed < n_startup_trials";
  const auto d = stopper.report(2, 100, 3.0, h, {0, 1});
  ASSERT_TRUE(d.stop);
  EXPECT_EQ(d.rule, "median");
  EXPECT_DOUBLE_EQ(d.data["median"].get<double>(), 1.5);
  h[3] = {{50, 9.0}};
  EXPECT_FALSE(stopper.report(3, 50, 9.0, h, {0, 1}).stop) << "warm-up";
  h[4] = {{100, 1.2}, {150, 9.0}};
  EXPECT_FALSE(stopper.report(4, 150, 9.0, h, {0, 1}).stop) << "not the first report after 100";
  h[4][200] = 9.0;
  EXPECT_TRUE(stopper.report(4, 200, 9.0, h, {0, 1}).stop)
      << "the best so far (1.2, at step 100) is worse than the median at 200 (0.9)";
}

TEST(EarlyStop, NumpyMedian) {
  EXPECT_TRUE(std::isnan(numpy_nanmedian({})));
  EXPECT_TRUE(std::isnan(numpy_nanmedian({kNaN})));
  EXPECT_EQ(numpy_nanmedian({0.1, 0.7}), 0.39999999999999997);
  EXPECT_EQ(numpy_nanmedian({3.0, kNaN, 1.0, 2.0}), 2.0);
  EXPECT_EQ(numpy_nanmedian({1.0, 2.0, 3.0, kInf}), 2.5);
  EXPECT_EQ(numpy_nanmedian({-kInf, 1.0}), -kInf);
  EXPECT_EQ(numpy_nanmedian({-kInf, 1.0, 2.0}), 1.0);
  EXPECT_TRUE(std::isnan(numpy_nanmedian({1.0, 2.0, kInf})));
  EXPECT_TRUE(std::isnan(numpy_nanmedian({kInf})));
  EXPECT_TRUE(std::isnan(numpy_nanmedian({1.0, kInf})));
}


EarlyStopSettings hyperband(int64_t min_step, int64_t max_step, int64_t rf, std::string name) {
  EarlyStopSettings s;
  s.method = "hyperband";
  s.min_step = min_step;
  s.max_step = max_step;
  s.reduction_factor = rf;
  s.study_name = std::move(name);
  return s;
}

TEST(EarlyStop, HyperbandBracketsAndTheirRungs) {
  // floor(log(2000 / 100) / log 3) + 1 = 3 brackets; budgets ceil(3·3^s / (s + 1)) = 9, 5, 3.
  const EarlyStopper h(hyperband(100, 2000, 3, "b"));
  EXPECT_EQ(h.brackets(), 3);
  EXPECT_EQ(h.rungs(2000), (std::vector<int64_t>{100, 300, 900}));
  std::map<int64_t, int> per_bracket;
  for (int64_t n = 0; n < 17000; ++n) ++per_bracket[h.bracket_of(n)];
  ASSERT_EQ(per_bracket.size(), 3u);
  // crc32 spreads the numbers in proportion to the budgets (9:5:3 of 17) within a few percent.
  EXPECT_NEAR(per_bracket[0] / 17000.0, 9.0 / 17, 0.02);
  EXPECT_NEAR(per_bracket[1] / 17000.0, 5.0 / 17, 0.02);
  EXPECT_NEAR(per_bracket[2] / 17000.0, 3.0 / 17, 0.02);
  // A range shorter than one reduction is one bracket, plain ASHA at rate 0.
  EXPECT_EQ(EarlyStopper(hyperband(100, 250, 3, "b")).brackets(), 1);
  EXPECT_EQ(EarlyStopper(hyperband(100, 300, 3, "b")).brackets(), 2);
}

TEST(EarlyStop, HyperbandComparesATrialWithItsBracketOnly) {
  const EarlyStopper h(hyperband(100, 900, 3, "b"));
  ASSERT_EQ(h.brackets(), 3);
  // Three trials of bracket 0 and one of another bracket with a far better value at step 100.
  std::vector<int64_t> zero;
  int64_t other = -1;
  for (int64_t n = 0; zero.size() < 3 || other < 0; ++n) {
    if (h.bracket_of(n) == 0) {
      if (zero.size() < 3) zero.push_back(n);
    } else if (other < 0 && h.bracket_of(n) == 1) {
      other = n;
    }
  }
  ObjectiveHistory hist;
  hist[other] = {{100, 0.1}, {300, 0.1}};
  hist[zero[0]] = {{100, 2.0}};
  EXPECT_FALSE(h.report(zero[0], 100, 2.0, hist, {}).stop) << "alone in its bracket at rung 0";
  hist[zero[1]] = {{100, 1.0}};
  const StopDecision d = h.report(zero[1], 100, 1.0, hist, {});
  EXPECT_FALSE(d.stop) << "the best of its bracket (the other bracket's 0.1 does not count): " << d.reason;
  hist[zero[2]] = {{100, 3.0}};
  const StopDecision e = h.report(zero[2], 100, 3.0, hist, {});
  ASSERT_TRUE(e.stop) << e.data.dump();
  EXPECT_EQ(e.rule, "hyperband");
  EXPECT_EQ(e.data["bracket"], 0);
  EXPECT_EQ(e.data["competitors"], 3) << "the other bracket's trial does not compete";
  EXPECT_NE(e.reason.find("Hyperband bracket 0 of 3"), std::string::npos) << e.reason;
  // The trial numbers can differ from the ids (the scheduler's store ids).
  const TrialNumbers numbers{{1000, zero[2]}, {1001, zero[0]}, {1002, other}};
  ObjectiveHistory by_id{{1001, {{100, 1.0}}}, {1002, {{100, 0.1}}}, {1000, {{100, 3.0}}}};
  EXPECT_TRUE(h.report(1000, 100, 3.0, by_id, {}, {}, numbers).stop) << "1.0 and 3.0 in bracket 0: 3.0 loses";
}

TEST(EarlyStop, SettingsReadBackFromTheStoredJson) {
  const auto s = early_stop_settings_from_json(
      json{{"method", "median"}, {"min_step", 250}, {"interval", 0}, {"n_startup_trials", 2}}, "val_loss", "min", "e");
  EXPECT_EQ(s.n_warmup_steps, 250) << "median: no stop before min_step, as its key says";
  EXPECT_EQ(s.interval, 1);
  const auto h = early_stop_settings_from_json(
      json{{"method", "hyperband"}, {"min_step", 10}, {"max_step", 400}, {"reduction_factor", 2}}, "loss", "max", "exp");
  EXPECT_EQ(h.n_warmup_steps, 0);
  EXPECT_EQ(h.max_step, 400);
  EXPECT_EQ(h.study_name, "exp");
  EXPECT_EQ(h.mode, "max");
  EXPECT_EQ(EarlyStopper(h).brackets(), 6);  // floor(log2 40) + 1
}

}  // namespace
}  // namespace precon::orch
