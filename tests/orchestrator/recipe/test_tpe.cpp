// TPE (sweep.method = "tpe"): the Parzen estimators' log-densities, weights, gamma and ranking
// against Optuna's (Debian's python3-optuna, tests/orchestrator/recipe/tpe_reference.py); proposals
// deterministic in the seed; sub-grid tables; the [sweep.tpe] keys refused where they do not apply.
#include "orchestrator/recipe/tpe.h"
#include "orchestrator/recipe/tpe_sweep.h"
#include "tests/orchestrator/support/optuna_reference.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/test_util.h"

namespace precon::orch {
namespace {

using nlohmann::json;
constexpr double kTpeNaN = std::numeric_limits<double>::quiet_NaN();

bool tpe_has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

inline constexpr char kTpeReference[] = "tpe_reference.py";
class TpeOptuna : public OptunaReference<kTpeReference> {};

TpeParam tpe_param_of(const json& p) {
  TpeParam t;
  const std::string kind = p["kind"];
  t.kind = kind == "categorical" ? TpeParam::categorical : kind == "integer" ? TpeParam::integer : TpeParam::real;
  if (t.kind == TpeParam::categorical) {
    t.choices = p["choices"];
    return t;
  }
  t.lo = p["lo"];
  t.hi = p["hi"];
  t.log = p["log"];
  t.step = p["step"];
  return t;
}

TEST_F(TpeOptuna, ParzenLogDensitiesMatch) {
  double worst = 0;
  size_t compared = 0;
  for (const json& c : ref_["cases"]) {
    std::vector<TpeParam> space;
    for (const json& p : c["space"]) space.push_back(tpe_param_of(p));
    worker::TpeSettings s;
    s.multivariate = c["multivariate"];
    s.prior_weight = c["prior_weight"];
    s.consider_endpoints = c["consider_endpoints"];
    const ParzenEstimator pe(space, c["observations"].get<std::vector<std::vector<double>>>(), s);
    const auto points = c["points"].get<std::vector<std::vector<double>>>();
    for (size_t i = 0; i < points.size(); ++i) {
      const double want = c["log_pdf"][i];
      const double got = pe.log_pdf(points[i]);
      const double diff = std::abs(got - want) / std::max(1.0, std::abs(want));
      worst = std::max(worst, diff);
      ++compared;
      EXPECT_LE(diff, 1e-12) << "case " << c.dump().substr(0, 200) << " point " << i << ": " << got << " vs " << want;
    }
  }
  EXPECT_GT(compared, 500u);
  std::printf("ParzenEstimator log_pdf vs Optuna: %zu points, max relative difference %.3g\n", compared, worst);
}

TEST_F(TpeOptuna, WeightsGammaAndRankingMatch) {
  for (const auto& [n, w] : ref_["weights"].items()) {
    const std::vector<double> got = tpe_default_weights(std::stoul(n));
    const auto want = w.get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size()) << n;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << "n=" << n << " i=" << i;
  }
  for (const auto& [n, g] : ref_["gamma"].items()) EXPECT_EQ(tpe_gamma(std::stoll(n)), g.get<int64_t>()) << n;
  std::vector<TpeObservation> trials;
  for (const json& t : ref_["trials"]) {
    TpeObservation o;
    const std::string st = t["state"];
    o.state = st == "complete" ? TpeObservation::complete : st == "pruned" ? TpeObservation::pruned : TpeObservation::running;
    o.value = t["value"].is_string() ? kTpeNaN : t["value"].get<double>();
    o.step = t["step"];
    trials.push_back(o);
  }
  for (const char* mode : {"min", "max"}) {
    const std::vector<size_t> ranked = tpe_rank(trials, std::string(mode) == "max");
    for (const auto& [n, split] : ref_["split"][mode].items()) {
      const size_t k = std::stoul(n);
      std::vector<size_t> below(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(k));
      std::vector<size_t> above(ranked.begin() + static_cast<std::ptrdiff_t>(k), ranked.end());
      std::sort(below.begin(), below.end());
      std::sort(above.begin(), above.end());
      EXPECT_EQ(below, split["below"].get<std::vector<size_t>>()) << mode << " n_below=" << n;
      EXPECT_EQ(above, split["above"].get<std::vector<size_t>>()) << mode << " n_below=" << n;
    }
  }
}

// Draws from an estimator follow its density: the share of draws in a cell against the cell's
// mass (l of a one-kernel estimator at 0.3 with a prior on [0, 1]).
TEST(Tpe, SamplesFollowTheDensity) {
  const std::vector<TpeParam> space = {TpeParam{TpeParam::integer, false, 0, 9, 1, 0}};
  worker::TpeSettings s;
  const ParzenEstimator pe(space, {{3}, {3}, {4}}, s);
  Rng rng(5);
  std::vector<double> counts(10, 0);
  const size_t n = 20000;
  for (const auto& x : pe.sample(rng, n)) counts[static_cast<size_t>(x[0])] += 1;
  for (int v = 0; v <= 9; ++v) {
    const double p = std::exp(pe.log_pdf({static_cast<double>(v)}));
    EXPECT_NEAR(counts[static_cast<size_t>(v)] / n, p, 4 * std::sqrt(p * (1 - p) / n) + 1e-3) << v;
  }
}

Recipe tpe_test_recipe(const std::string& extra = "") {
  return parse_recipe_text("[trial]\ncommand = [\"true\"]\n[sweep]\nmethod = \"tpe\"\nsamples = 30\nseed = 3\n" + extra +
                               "[sweep.parameters]\nx = { uniform = [-5.0, 10.0] }\n"
                               "n = { int_uniform = [0, 20], step = 4 }\nlr = { log_uniform = [1e-5, 1e-1] }\n"
                               "act = [\"relu\", \"gelu\", \"tanh\"]\n",
                           "r.toml");
}

double tpe_objective(const json& p) {
  const double x = p["x"], lr = p["lr"];
  const double n = p["n"].get<double>();
  return (x - 2) * (x - 2) + std::pow(std::log10(lr) + 3, 2) + (n - 8) * (n - 8) / 16 + (p["act"] == "gelu" ? 0 : 1);
}

// Runs the sweep one trial at a time, as the scheduler does with max_concurrent = 1.
std::vector<json> tpe_run_sequential(const Recipe& r, int64_t n) {
  std::vector<TpeHistoryTrial> history;
  std::vector<json> params;
  for (int64_t i = 0; i < n; ++i) {
    const TrialSpec t = propose_tpe_trial(r, i, history);
    params.push_back(t.params);
    history.push_back({t.params, TpeObservation::complete, tpe_objective(t.params), -1});
  }
  return params;
}

TEST(Tpe, DeterministicInTheSeedAndOnTheGrid) {
  const Recipe r = tpe_test_recipe();
  const std::vector<json> a = tpe_run_sequential(r, 25), b = tpe_run_sequential(r, 25);
  EXPECT_EQ(a, b);
  Recipe other = r;
  other.sweep.seed = 4;
  EXPECT_NE(tpe_run_sequential(other, 25), a);
  for (const json& p : a) {
    const int64_t n = p["n"];
    EXPECT_EQ(n % 4, 0) << p.dump();
    EXPECT_GE(p["lr"].get<double>(), 1e-5);
    EXPECT_LE(p["lr"].get<double>(), 1e-1);
    EXPECT_GE(p["x"].get<double>(), -5.0);
  }
  // After the 10 random trials the proposals come from the estimator: better on average.
  double early = 0, late = 0;
  for (int i = 0; i < 10; ++i) early += tpe_objective(a[static_cast<size_t>(i)]);
  for (int i = 15; i < 25; ++i) late += tpe_objective(a[static_cast<size_t>(i)]);
  EXPECT_LT(late, early);
}

TEST(Tpe, ConstantLiarAvoidsRunningPoints) {
  const Recipe r = tpe_test_recipe("[sweep.tpe]\nn_startup_trials = 3\n");
  std::vector<TpeHistoryTrial> history;
  for (int64_t i = 0; i < 12; ++i) {
    const TrialSpec t = propose_tpe_trial(r, i, history);
    history.push_back({t.params, TpeObservation::complete, tpe_objective(t.params), -1});
  }
  // Four proposals in a row while the earlier ones still run: all different.
  std::vector<json> seen;
  for (int64_t i = 12; i < 16; ++i) {
    const TrialSpec t = propose_tpe_trial(r, i, history);
    for (const json& s : seen) EXPECT_NE(s, t.params);
    seen.push_back(t.params);
    history.push_back({t.params, TpeObservation::running, 0, -1});
  }
}

TEST(Tpe, SubGridKeysOnlyInTheirTable) {
  const Recipe r = parse_recipe_text(
      "[trial]\ncommand = [\"true\"]\n[sweep]\nmethod = \"tpe\"\nsamples = 40\n[sweep.tpe]\nn_startup_trials = 5\n"
      "[sweep.parameters]\nlr = { log_uniform = [1e-4, 1.0] }\n"
      "[[sweep.grid]]\nopt = [\"sgd\"]\nmomentum = { uniform = [0.0, 0.99] }\n"
      "[[sweep.grid]]\nopt = [\"adam\"]\nbeta2 = { uniform = [0.9, 0.999] }\n",
      "r.toml");
  std::vector<TpeHistoryTrial> history;
  int adam = 0;
  for (int64_t i = 0; i < 30; ++i) {
    const TrialSpec t = propose_tpe_trial(r, i, history);
    const bool is_adam = t.params["opt"] == "adam";
    adam += is_adam;
    EXPECT_EQ(t.params.contains("beta2"), is_adam) << t.params.dump();
    EXPECT_EQ(t.params.contains("momentum"), !is_adam) << t.params.dump();
    EXPECT_EQ(t.params.size(), 3u);
    const double lr = t.params["lr"];
    history.push_back({t.params, TpeObservation::complete, std::abs(std::log10(lr) + 2) + (is_adam ? 0 : 1), -1});
  }
  // The better table is proposed more once the estimator takes over.
  EXPECT_GT(adam, 15);
}

std::string tpe_failure(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    expand_sweep(parse_recipe_text(text, "r.toml", overrides));
  } catch (const worker::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Tpe, BadKeysRefusedWithFileLineAndKey) {
  const std::string params = "[sweep.parameters]\n\"optimizer.lr\" = { log_uniform = [1e-4, 1e-2] }\n";
  std::string f = tpe_failure("[sweep]\nmethod = \"random\"\n[sweep.tpe]\nn_startup_trials = 4\n" + params);
  EXPECT_TRUE(tpe_has(f, "r.toml:4: sweep.tpe.n_startup_trials: a [sweep.tpe] key needs sweep.method = \"tpe\""))
      << f;
  f = tpe_failure("[sweep]\nmethod = \"grid\"\n[sweep.tpe]\nmultivariate = false\n[sweep.parameters]\n\"train.seed\" = [1, 2]\n");
  EXPECT_TRUE(tpe_has(f, "r.toml:4: sweep.tpe.multivariate: a [sweep.tpe] key needs sweep.method = \"tpe\"")) << f;
  f = tpe_failure("[sweep]\nmethod = \"tpe\"\n[sweep.tpe]\nn_ei_candidate = 4\n" + params);
  EXPECT_TRUE(tpe_has(f, "r.toml:4: sweep.tpe.n_ei_candidate: unknown key (did you mean sweep.tpe.n_ei_candidates?)"))
      << f;
  f = tpe_failure("[sweep]\nmethod = \"tpe\"\n[sweep.tpe]\nn_ei_candidates = 0\n" + params);
  EXPECT_TRUE(tpe_has(f, "r.toml:4: sweep.tpe.n_ei_candidates")) << f;
  f = tpe_failure("[sweep]\nmethod = \"tpe\"\n[sweep.tpe]\nprior_weight = \"one\"\n" + params);
  EXPECT_TRUE(tpe_has(f, "r.toml:4: sweep.tpe.prior_weight")) << f;
  f = tpe_failure(params, {"sweep.tpe.constant_liar=false"});
  EXPECT_TRUE(tpe_has(f, "--set: sweep.tpe.constant_liar: a [sweep.tpe] key needs sweep.method = \"tpe\"")) << f;
  // step: tpe only, on uniform or int_uniform, dividing the range.
  const std::string random = "[sweep]\nmethod = \"random\"\n[sweep.parameters]\n";
  f = tpe_failure(random + "\"train.seed\" = { int_uniform = [0, 10], step = 2 }\n");
  EXPECT_TRUE(tpe_has(f, "r.toml:4: train.seed.step: step needs sweep.method = \"tpe\"")) << f;
  const std::string tpe = "[sweep]\nmethod = \"tpe\"\n[sweep.parameters]\n";
  f = tpe_failure(tpe + "\"train.seed\" = { int_uniform = [0, 10], step = 3 }\n");
  EXPECT_TRUE(tpe_has(f, "r.toml:4: train.seed.step: hi - lo (10) is not a multiple of step (3)")) << f;
  f = tpe_failure(tpe + "\"optimizer.lr\" = { log_uniform = [1e-4, 1e-2], step = 0.001 }\n");
  EXPECT_TRUE(tpe_has(f, "r.toml:4: optimizer.lr.step: log_uniform takes no step")) << f;
  f = tpe_failure(tpe + "\"train.seed\" = { int_uniform = [0, 10], step = 0.5 }\n");
  EXPECT_TRUE(tpe_has(f, "train.seed.step: int_uniform's step must be an integer")) << f;
  f = tpe_failure(tpe + "\"optimizer.lr\" = { uniform = [0.1, 0.2], sep = 0.01 }\n");
  EXPECT_TRUE(tpe_has(f, "a distribution table has one entry")) << f;
  // Distributions in [[sweep.grid]] tables: tpe only.
  f = tpe_failure("[[sweep.grid]]\n\"optimizer.lr\" = { uniform = [1e-4, 1e-2] }\n");
  EXPECT_TRUE(tpe_has(f, "r.toml:2: optimizer.lr: a [[sweep.grid]] table takes lists of values")) << f;
  EXPECT_EQ(tpe_failure("[sweep]\nmethod = \"tpe\"\n[[sweep.grid]]\n\"optimizer.lr\" = { uniform = [1e-4, 1e-2], step = 1e-4 }\n"
                    "[[sweep.grid]]\n\"optimizer.name\" = [\"adamw\"]\n"),
            "");
}

// A command's own key over int64's whole range: every proposal an integer in it (the span is no
// double's exact integer, nor int64's).
TEST(Tpe, WholeInt64RangeStaysInRange) {
  const Recipe r = parse_recipe_text(
      "[trial]\ncommand = [\"true\"]\n[sweep]\nmethod = \"tpe\"\nsamples = 8\n[sweep.tpe]\nn_startup_trials = 2\n"
      "[sweep.parameters]\nn = { int_uniform = [-9223372036854775808, 9223372036854775807] }\n",
      "r.toml");
  std::vector<TpeHistoryTrial> history;
  for (int64_t i = 0; i < 8; ++i) {
    const TrialSpec t = propose_tpe_trial(r, i, history);
    ASSERT_TRUE(t.params["n"].is_number_integer()) << t.params.dump();
    history.push_back({t.params, TpeObservation::complete, std::abs(t.params["n"].get<double>()), -1});
  }
}

TEST(Tpe, ExpandsToItsFirstTrialAndCountsSamples) {
  const Recipe r = tpe_test_recipe();
  const std::vector<TrialSpec> trials = expand_sweep(r);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].params, propose_tpe_trial(r, 0, {}).params);
  EXPECT_EQ(sweep_size(r), 30);
}

}  // namespace
}  // namespace precon::orch
