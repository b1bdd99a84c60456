// Several objectives run by a live controller, for MOTPE (tpe) and NSGA-II (nsga2): each trial the
// sampler's proposal from the trials before it (replayed offline), parallel slots never given the
// same values, and a controller restart mid-sweep that loses no trial and runs none twice.
#include <cmath>
#include <set>

#include "orchestrator/recipe/tpe_sweep.h"
#include "tests/orchestrator/support/program_sweep_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

class MultiObjectiveSweep : public ProgramSweepFixture, public ::testing::WithParamInterface<const char*> {
 protected:
  // Two objectives of (x, y) in [0, 1]² (ZDT1), written at step 1 after sleeping `sleep` seconds.
  std::string mo_text(int samples, int max_concurrent, double sleep) const {
    const std::string method = GetParam();
    return program_recipe("objectives.py", "mo", sleep, "g = 1 + 9 * p['y']\n",
                          "{'f1': p['x'], 'f2': g * (1 - math.sqrt(p['x'] / g))}") +
           "[objective]\nmetrics = [\"f1\", \"f2\"]\nmodes = [\"min\", \"min\"]\n[sweep]\nmethod = \"" + method +
           "\"\nsamples = " + std::to_string(samples) + "\nseed = 2\nmax_concurrent = " + std::to_string(max_concurrent) +
           (method == "tpe" ? "\n[sweep.tpe]\nn_startup_trials = 3\n" : "\n[sweep.nsga2]\npopulation_size = 3\n") +
           "[sweep.parameters]\nx = { uniform = [0.0, 1.0] }\ny = { uniform = [0.0, 1.0] }\n";
  }
};

// One slot: each stored trial is what the sampler proposes from the completed ones before it.
TEST_P(MultiObjectiveSweep, TrialsAreTheSamplersProposals) {
  auto c = start();
  const std::string text = mo_text(8, 1, 0.0);
  const int64_t id = submit(c->url(), text);
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(90)));
  const std::vector<TrialRow> trials = c->store().trials(id);
  ASSERT_EQ(trials.size(), 8u);
  const Recipe recipe = parse_recipe_text(text, "t.toml");
  std::vector<TpeHistoryTrial> history;
  for (size_t i = 0; i < trials.size(); ++i) {
    ASSERT_EQ(trials[i].state, TrialState::completed) << trials[i].reason;
    const json params = json::parse(trials[i].params_json);
    EXPECT_EQ(params, propose_sweep_trial(recipe, static_cast<int64_t>(i), history).params) << "trial " << i;
    const auto f1 = c->store().last_metric(trials[i].id, "f1"), f2 = c->store().last_metric(trials[i].id, "f2");
    ASSERT_TRUE(f1 && f2);
    TpeHistoryTrial h{params, TpeObservation::complete, f1->value, -1};
    h.values = {f1->value, f2->value};
    history.push_back(h);
  }
  // The front is served.
  const json best = get(c->url(), "/api/v1/experiments/" + std::to_string(id) + "/best");
  ASSERT_TRUE(best.contains("objectives")) << best.dump();
  EXPECT_EQ(best["objectives"]["front"].size(), 8u);
  EXPECT_EQ(best["objectives"]["front"][0]["rank"], 1);
  c->stop();
}

// Two slots and a restart mid-sweep: `samples` trials in the end, each run once, all different.
TEST_P(MultiObjectiveSweep, ARestartLosesNoTrialAndRunsNoneTwice) {
  auto c = start();
  const int64_t id = submit(c->url(), mo_text(9, 2, 0.3));
  ASSERT_TRUE(wait_for([&] { return c->store().trial_ids(id, TrialState::completed).size() >= 3; },
                       std::chrono::seconds(60)));
  c->stop();
  c.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c = start();
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(90)));
  const std::vector<TrialRow> trials = c->store().trials(id);
  ASSERT_EQ(trials.size(), 9u);
  const json events = get(c->url(), "/api/v1/events?limit=1000");
  std::set<std::string> distinct;
  for (size_t i = 0; i < trials.size(); ++i) {
    EXPECT_EQ(trials[i].index, static_cast<int64_t>(i));
    EXPECT_EQ(trials[i].state, TrialState::completed) << trials[i].reason;
    EXPECT_EQ(trials[i].attempts, 1) << "trial " << i;
    EXPECT_EQ(endings_and_adoptions(events, trials[i].id).endings, 1) << "trial " << i;
    distinct.insert(trials[i].params_json);
  }
  EXPECT_EQ(distinct.size(), trials.size());
  c->stop();
}

INSTANTIATE_TEST_SUITE_P(Samplers, MultiObjectiveSweep, ::testing::Values("tpe", "nsga2"));

}  // namespace
}  // namespace precon::orch::testing
