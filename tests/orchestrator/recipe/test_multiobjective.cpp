// Several objectives: MOTPE's split and weights, the hypervolume, l(x) and g(x) at candidates, and
// NSGA-II's fronts, crowding sort and elite population, each against Optuna's (Debian's
// python3-optuna, tests/orchestrator/recipe/multiobjective_reference.py); the samplers
// deterministic in the seed, parallel proposals all different, NSGA-II ahead of random search on
// a two-objective function whose front is known.
#include "orchestrator/recipe/nsga2.h"
#include "orchestrator/recipe/pareto.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/recipe/tpe.h"
#include "orchestrator/recipe/tpe_sweep.h"
#include "tests/orchestrator/support/optuna_reference.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace precon::orch {
namespace {

using nlohmann::json;

inline constexpr char kMultiObjectiveReference[] = "multiobjective_reference.py";
class MultiObjectiveOptuna : public OptunaReference<kMultiObjectiveReference> {};

double mo_relative(double got, double want) { return std::abs(got - want) / std::max(1.0, std::abs(want)); }

TEST_F(MultiObjectiveOptuna, MotpeSplitWeightsAndHypervolumeMatch) {
  for (const json& c : ref_["motpe"]) {
    const auto losses = c["losses"].get<std::vector<Loss>>();
    const std::vector<int> ranks = nondomination_ranks(losses);
    EXPECT_EQ(ranks, c["ranks"].get<std::vector<int>>());
    const std::vector<size_t> below = motpe_below(losses, c["n_below"].get<size_t>());
    ASSERT_EQ(below, c["below"].get<std::vector<size_t>>()) << c.dump().substr(0, 300);
    std::vector<Loss> below_losses;
    for (size_t i : below) below_losses.push_back(losses[i]);
    const std::vector<double> w = motpe_below_weights(below_losses);
    const auto want = c["weights"].get<std::vector<double>>();
    ASSERT_EQ(w.size(), want.size());
    for (size_t i = 0; i < w.size(); ++i) EXPECT_LE(mo_relative(w[i], want[i]), 1e-9) << i << ": " << w[i] << " vs " << want[i];
    const Loss reference = c["reference"].get<Loss>();
    EXPECT_EQ(hypervolume_reference(losses), reference);
    EXPECT_LE(mo_relative(hypervolume(losses, reference), c["hypervolume"].get<double>()), 1e-12);
  }
}

// l(x) weighted by MOTPE's weights over its below trials and g(x) over the rest, at the same
// candidates: the same log-densities, so the same candidate proposed.
TEST_F(MultiObjectiveOptuna, MotpeEstimatorsMatchAtCandidates) {
  for (const json& c : ref_["estimators"]) {
    std::vector<TpeParam> space;
    for (const json& p : c["space"]) {
      TpeParam t;
      const std::string kind = p["kind"];
      t.kind = kind == "categorical" ? TpeParam::categorical : kind == "integer" ? TpeParam::integer : TpeParam::real;
      if (t.kind == TpeParam::categorical) {
        t.choices = p["choices"];
      } else {
        t.lo = p["lo"];
        t.hi = p["hi"];
        t.log = p["log"];
        t.step = p["step"];
      }
      space.push_back(t);
    }
    const auto xs = c["x"].get<std::vector<std::vector<double>>>();
    const auto losses = c["losses"].get<std::vector<Loss>>();
    const std::vector<size_t> below = motpe_below(losses, static_cast<size_t>(tpe_gamma(static_cast<int64_t>(xs.size()))));
    std::vector<std::vector<double>> below_x, above_x;
    std::vector<Loss> below_losses;
    for (size_t i : below) {
      below_x.push_back(xs[i]);
      below_losses.push_back(losses[i]);
    }
    for (size_t i = 0; i < xs.size(); ++i)
      if (std::find(below.begin(), below.end(), i) == below.end()) above_x.push_back(xs[i]);
    worker::TpeSettings s;
    s.multivariate = c["multivariate"];
    const std::vector<double> w = motpe_below_weights(below_losses);
    const ParzenEstimator l(space, below_x, s, &w), g(space, above_x, s);
    const auto points = c["points"].get<std::vector<std::vector<double>>>();
    size_t best_got = 0, best_want = 0;
    for (size_t i = 0; i < points.size(); ++i) {
      const double ll = l.log_pdf(points[i]), lg = g.log_pdf(points[i]);
      EXPECT_LE(mo_relative(ll, c["log_l"][i].get<double>()), 1e-9) << i;
      EXPECT_LE(mo_relative(lg, c["log_g"][i].get<double>()), 1e-9) << i;
      if (ll - lg > l.log_pdf(points[best_got]) - g.log_pdf(points[best_got])) best_got = i;
      if (c["log_l"][i].get<double>() - c["log_g"][i].get<double>() >
          c["log_l"][best_want].get<double>() - c["log_g"][best_want].get<double>())
        best_want = i;
    }
    EXPECT_EQ(best_got, best_want);
  }
}

TEST_F(MultiObjectiveOptuna, NsgaFrontsCrowdingAndEliteMatch) {
  for (const json& c : ref_["nsga2"]) {
    const auto values = c["values"].get<std::vector<Loss>>();
    const auto maximize = c["maximize"].get<std::vector<bool>>();
    std::vector<Loss> losses = values;
    for (Loss& l : losses)
      for (size_t d = 0; d < l.size(); ++d)
        if (maximize[d]) l[d] = -l[d];
    EXPECT_EQ(nondominated_fronts(losses), c["fronts"].get<std::vector<std::vector<size_t>>>());
    std::vector<size_t> all(values.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::vector<size_t> crowd = all;
    crowding_sort(values, crowd);
    EXPECT_EQ(crowd, c["crowding"].get<std::vector<size_t>>());
    EXPECT_EQ(nsga2_elite(losses, values, all, c["size"].get<size_t>()), c["elite"].get<std::vector<size_t>>());
  }
}

// Two objectives over (x, y) in [0, 1]²: ZDT1, front f2 = 1 - sqrt(f1) at y = 0.
json mo_zdt1(const json& p) {
  const double x = p["x"], y = p["y"];
  const double g = 1 + 9 * y;
  return json::array({x, g * (1 - std::sqrt(x / g))});
}

Recipe mo_recipe(const std::string& method, int64_t seed, const std::string& extra = "") {
  return parse_recipe_text("[trial]\ncommand = [\"true\"]\n[objective]\nmetrics = [\"f1\", \"f2\"]\nmodes = [\"min\", \"min\"]\n"
                           "[sweep]\nmethod = \"" + method + "\"\nsamples = 200\nseed = " + std::to_string(seed) + "\n" + extra +
                               "[sweep.parameters]\nx = { uniform = [0.0, 1.0] }\ny = { uniform = [0.0, 1.0] }\n",
                           "r.toml");
}

// One trial at a time (max_concurrent = 1), each told its two objectives when it completes.
std::vector<json> mo_run(const Recipe& r, int64_t n) {
  std::vector<TpeHistoryTrial> history;
  std::vector<json> params;
  if (r.sweep.method == "random") {
    for (const TrialSpec& t : expand_sweep(r))
      if (static_cast<int64_t>(params.size()) < n) params.push_back(t.params);
    return params;
  }
  for (int64_t i = 0; i < n; ++i) {
    const TrialSpec t = propose_sweep_trial(r, i, history);
    params.push_back(t.params);
    const json f = mo_zdt1(t.params);
    TpeHistoryTrial h{t.params, TpeObservation::complete, f[0].get<double>(), -1};
    h.values = {f[0].get<double>(), f[1].get<double>()};
    history.push_back(h);
  }
  return params;
}

double mo_front_volume(const std::vector<json>& params) {
  std::vector<Loss> pts;
  for (const json& p : params) pts.push_back(mo_zdt1(p).get<Loss>());
  return hypervolume(pts, {1.1, 11.0});
}

TEST(MultiObjective, DeterministicInTheSeed) {
  for (const char* method : {"tpe", "nsga2"}) {
    const std::string extra = std::string(method) == "tpe" ? "[sweep.tpe]\nn_startup_trials = 5\n"
                                                           : "[sweep.nsga2]\npopulation_size = 6\n";
    const std::vector<json> a = mo_run(mo_recipe(method, 3, extra), 24);
    EXPECT_EQ(a, mo_run(mo_recipe(method, 3, extra), 24)) << method;
    EXPECT_NE(a, mo_run(mo_recipe(method, 4, extra), 24)) << method;
  }
}

// max_concurrent > 1: the slots' proposals, made from the same history (the others still
// running), all differ.
TEST(MultiObjective, ParallelProposalsDiffer) {
  for (const char* method : {"tpe", "nsga2"}) {
    const std::string extra = std::string(method) == "tpe" ? "[sweep.tpe]\nn_startup_trials = 4\n"
                                                           : "[sweep.nsga2]\npopulation_size = 4\n";
    const Recipe r = mo_recipe(method, 1, extra);
    std::vector<TpeHistoryTrial> history;
    std::set<std::string> seen;
    for (int64_t i = 0; i < 40; ++i) {
      const TrialSpec t = propose_sweep_trial(r, i, history);
      EXPECT_TRUE(seen.insert(t.params.dump()).second) << method << " proposed " << t.params.dump() << " twice";
      // Four slots: each trial completes three proposals later.
      history.push_back({t.params, TpeObservation::running, 0, -1});
      if (i >= 3) {
        TpeHistoryTrial& done = history[static_cast<size_t>(i - 3)];
        const json f = mo_zdt1(done.params);
        done.state = TpeObservation::complete;
        done.values = {f[0].get<double>(), f[1].get<double>()};
      }
    }
  }
}

// NSGA-II and MOTPE reach a larger hypervolume than random search on ZDT1, over a few seeds.
TEST(MultiObjective, SamplersBeatRandomOnAKnownFront) {
  double random = 0, nsga = 0, motpe = 0;
  for (int64_t seed = 0; seed < 3; ++seed) {
    random += mo_front_volume(mo_run(mo_recipe("random", seed), 80));
    nsga += mo_front_volume(mo_run(mo_recipe("nsga2", seed, "[sweep.nsga2]\npopulation_size = 10\n"), 80));
    motpe += mo_front_volume(mo_run(mo_recipe("tpe", seed), 80));
  }
  std::printf("hypervolume over 3 seeds (80 trials each): random %.4f, nsga2 %.4f, motpe %.4f\n", random, nsga, motpe);
  EXPECT_GT(nsga, random);
  EXPECT_GT(motpe, random);
}

}  // namespace
}  // namespace precon::orch
