// Parameter importance (fANOVA): on functions whose important keys are known, against Optuna's
// FanovaImportanceEvaluator (Debian's python3-optuna with python3-sklearn) on the same trials,
// and from a stored experiment through `precon importance`.
#include "orchestrator/study/importance.h"
#include "orchestrator/study/importance_report.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/skip.h"
#include "tests/common/temp_dir.h"
#include "tests/common/test_util.h"
#include "tests/orchestrator/support/importance_store_seed.h"

namespace precon::study {
namespace {

using nlohmann::json;

std::vector<std::string> names(const std::vector<ParamImportance>& v) {
  std::vector<std::string> out;
  for (const ParamImportance& i : v) out.push_back(i.name);
  return out;
}

double share(const std::vector<ParamImportance>& v, const std::string& name) {
  for (const ParamImportance& i : v)
    if (i.name == name) return i.importance;
  return -1;
}

// Uniform draws of every parameter (categorical: a choice index), the objective f of them.
std::vector<ImportanceTrial> draw(const std::vector<ImportanceParam>& params, int n, uint64_t seed,
                                  const std::function<double(const std::vector<double>&)>& f) {
  std::mt19937_64 rng(seed);
  std::vector<ImportanceTrial> out;
  for (int i = 0; i < n; ++i) {
    ImportanceTrial t;
    for (const ImportanceParam& p : params) {
      if (p.categorical) t.values.push_back(static_cast<double>(std::uniform_int_distribution<int64_t>(0, p.choices - 1)(rng)));
      else t.values.push_back(std::uniform_real_distribution<double>(p.lo, p.hi)(rng));
    }
    t.objective = f(t.values);
    out.push_back(std::move(t));
  }
  return out;
}

TEST(Importance, RanksTheKeysAFunctionDependsOn) {
  const std::vector<ImportanceParam> params = {{"a", false, 0, 1, 0}, {"b", false, 0, 1, 0}, {"c", false, 0, 1, 0}};
  // Variance of 5a is 25/12; of 0.5·b², 0.25·4/45: a explains nearly all of it, c nothing.
  const auto trials = draw(params, 200, 1, [](const std::vector<double>& x) { return 5 * x[0] + 0.5 * x[1] * x[1]; });
  const auto imp = fanova_importance(params, trials);
  EXPECT_EQ(names(imp), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_GT(share(imp, "a"), 0.9);
  EXPECT_LT(share(imp, "c"), 0.02);
  double sum = 0;
  for (const ParamImportance& i : imp) sum += i.importance;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  // The same trials and seed: the same answer.
  const auto again = fanova_importance(params, trials);
  for (size_t i = 0; i < imp.size(); ++i) EXPECT_EQ(imp[i].importance, again[i].importance);
}

TEST(Importance, ACategoricalKeyIsItsColumnsTogether) {
  const std::vector<ImportanceParam> params = {{"lr", false, 1e-4, 1e-1, 0}, {"opt", true, 0, 0, 3}, {"noise", false, 0, 1, 0}};
  const auto trials = draw(params, 150, 2, [](const std::vector<double>& x) {
    const double by_opt[] = {2.0, 1.0, 1.2};
    return by_opt[static_cast<int>(x[1])] + 3.0 * x[0];
  });
  const auto imp = fanova_importance(params, trials);
  EXPECT_EQ(imp.front().name, "opt");
  EXPECT_LT(share(imp, "noise"), 0.02);
  // One choice only, or an empty range: nothing to explain, importance 0, listed last.
  const std::vector<ImportanceParam> single = {{"x", false, 0, 1, 0}, {"k", true, 0, 0, 1}, {"z", false, 2, 2, 0}};
  auto flat = draw(single, 40, 3, [](const std::vector<double>& x) { return x[0]; });
  for (auto& t : flat) t.values[2] = 2;
  const auto one = fanova_importance(single, flat);
  EXPECT_EQ(one.front().name, "x");
  EXPECT_DOUBLE_EQ(one.front().importance, 1.0);
  EXPECT_EQ(share(one, "k"), 0.0);
  EXPECT_EQ(share(one, "z"), 0.0);
}

TEST(Importance, RefusesWhatItCannotRank) {
  const std::vector<ImportanceParam> params = {{"a", false, 0, 1, 0}};
  auto expect_error = [&](const std::vector<ImportanceTrial>& trials, const std::string& part) {
    try {
      fanova_importance(params, trials);
      ADD_FAILURE() << "no error, expected one about " << part;
    } catch (const ImportanceError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error({{{0.5}, 1.0}}, "2 or more");
  expect_error({{{0.5}, 1.0}, {{0.7}, 1.0}}, "does not vary");
  expect_error({{{0.5}, 1.0}, {{1.5}, 2.0}}, "outside its range");
  expect_error({{{0.5}, 1.0}, {{0.6}, std::nan("")}}, "not finite");
}

// ---- against Optuna ----

class ImportanceOptuna : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string py = PRECON_PYTHON;
    if (std::system((py + " -c 'import optuna, sklearn' >/dev/null 2>&1").c_str()) != 0)
      PRECON_SKIP_UNLESS_CI("optuna or sklearn cannot be imported by " + py +
                            " (install python3-optuna python3-sklearn: deploy/install-deps.sh)");
  }

  // Optuna's importances of the same trials.
  static json optuna_importance(const std::vector<ImportanceParam>& params, const std::vector<ImportanceTrial>& trials) {
    json spec = {{"params", json::array()}, {"trials", json::array()}, {"seed", 0}};
    for (const ImportanceParam& p : params) {
      if (p.categorical) spec["params"].push_back({{"name", p.name}, {"kind", "categorical"}, {"choices", p.choices}});
      else spec["params"].push_back({{"name", p.name}, {"kind", "numeric"}, {"range", {p.lo, p.hi}}});
    }
    for (const ImportanceTrial& t : trials) spec["trials"].push_back({{"values", t.values}, {"objective", t.objective}});
    const std::string file = ::testing::TempDir() + "fanova-" + std::to_string(::getpid()) + ".json";
    std::ofstream(file) << spec.dump();
    const test::CommandResult r = test::run_command(std::string(PRECON_PYTHON) + " " + PRECON_SOURCE_DIR +
                                                    "/tests/orchestrator/study/fanova_reference.py " + file + " 2>/dev/null");
    std::remove(file.c_str());
    EXPECT_EQ(r.status, 0) << r.output;
    return json::parse(r.output);
  }

  // The same ranking and each share within `tol` (two different forests of 64 trees: scikit-learn's
  // draws its bootstrap samples and breaks ties its own way).
  static void compare(const std::vector<ImportanceParam>& params, const std::vector<ImportanceTrial>& trials, double tol) {
    const auto ours = fanova_importance(params, trials);
    const json theirs = optuna_importance(params, trials);
    std::vector<std::pair<double, std::string>> order;
    for (const auto& [name, v] : theirs.items()) order.emplace_back(-v.get<double>(), name);
    std::sort(order.begin(), order.end());
    std::string text;
    for (const ParamImportance& i : ours)
      text += i.name + " " + std::to_string(i.importance) + " vs " + std::to_string(theirs[i.name].get<double>()) + "; ";
    std::printf("fANOVA, ours vs Optuna's: %s\n", text.c_str());
    // The order of the keys that explain 1 % or more (below that two forests may swap near-zero
    // keys), and every share within tol.
    for (size_t k = 0; k < ours.size(); ++k) {
      if (-order[k].first >= 0.01) {
        EXPECT_EQ(ours[k].name, order[k].second) << text;
      }
      EXPECT_NEAR(ours[k].importance, theirs[ours[k].name].get<double>(), tol) << text;
    }
  }
};

TEST_F(ImportanceOptuna, SameRankingOnAnAdditiveFunction) {
  const std::vector<ImportanceParam> params = {{"w", false, -1, 1, 0}, {"x", false, 0, 2, 0}, {"y", false, 0, 1, 0}, {"z", false, 0, 1, 0}};
  compare(params, draw(params, 120, 4, [](const std::vector<double>& v) { return 4 * v[0] + std::sin(3 * v[1]) + 0.3 * v[2]; }), 0.08);
}

TEST_F(ImportanceOptuna, SameRankingWithAnInteractionAndACategoricalKey) {
  const std::vector<ImportanceParam> params = {{"lr", false, 0, 1, 0}, {"opt", true, 0, 0, 3}, {"wd", false, 0, 0.2, 0}};
  compare(params, draw(params, 150, 5, [](const std::vector<double>& v) {
            const double shift[] = {0.0, 0.8, 0.3};
            const double d = v[0] - 0.3 - 0.2 * v[1];
            return 8 * d * d + shift[static_cast<int>(v[1])] + v[2];
          }), 0.08);
}

// ---- from the store ----

TEST(ImportanceReportTest, ReadsAStoredSweepAndItsCommandLine) {
  test::TempDir dir;
  const std::string db = (dir.path / "precon.db").string();
  int64_t experiment = 0;
  {
    orch::Store store(db);
    experiment = orch::testing::seed_importance_sweep(store, dir.path.string());
  }
  orch::Store store(db);
  const ImportanceReport r = importance_report(store, experiment);
  EXPECT_EQ(r.trials, 58);
  ASSERT_EQ(r.params.size(), 3u);
  EXPECT_FALSE(r.params[0].categorical);
  EXPECT_EQ(r.params[0].lo, 1e-3);
  EXPECT_TRUE(r.params[1].categorical);
  EXPECT_EQ(r.params[1].choices, 3);
  EXPECT_EQ(r.importance.front().name, "lr");
  EXPECT_EQ(r.importance.back().name, "unused");
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("1 completed trial(s) without a finite val_loss"), std::string::npos) << r.notes[0];
  const json j = importance_to_json(r);
  EXPECT_EQ(j["method"], "fanova");
  EXPECT_EQ(j["importance"][0]["name"], "lr");

  // The command line prints the same ranking, and says why it cannot rank an unknown experiment.
  const std::string precon = std::string(PRECON_BIN) + " importance --db " + db + " ";
  const test::CommandResult table = test::run_command(precon + "imp");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.output.find("fANOVA over 58 completed trials"), std::string::npos) << table.output;
  EXPECT_LT(table.output.find("\nlr "), table.output.find("\nunused ")) << table.output;
  const test::CommandResult as_json = test::run_command(precon + std::to_string(experiment) + " --json");
  ASSERT_EQ(as_json.status, 0) << as_json.output;
  EXPECT_EQ(json::parse(as_json.output)["importance"], j["importance"]);
  const test::CommandResult unknown = test::run_command(precon + "nope 2>&1");
  EXPECT_NE(unknown.status, 0);
  EXPECT_NE(unknown.output.find("nope"), std::string::npos) << unknown.output;
}

}  // namespace
}  // namespace precon::study
