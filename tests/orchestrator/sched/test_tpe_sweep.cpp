// sweep.method = "tpe" run by a live controller: trials made one at a time as slots free up, each
// the proposal the sampler makes from the trials before it (replayed here offline); max_concurrent
// > 1 without duplicate proposals; a controller restart mid-sweep loses no trial and runs none twice.
#include <cmath>
#include <map>
#include <set>

#include "orchestrator/recipe/tpe_sweep.h"
#include "tests/orchestrator/support/program_sweep_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

class TpeSweep : public ProgramSweepFixture {
 protected:
  // A recipe whose program writes val_loss = a Branin-like function of x, y (and k), after
  // sleeping `sleep` seconds.
  std::string tpe_text(int samples, int max_concurrent, double sleep, int seed = 1) const {
    return program_recipe("objective.py", "tpe", sleep,
                          "x, y = p['x'], p['y']\n"
                          "v = (y - 5.1 / (4 * math.pi ** 2) * x * x + 5 / math.pi * x - 6) ** 2 + "
                          "10 * (1 - 1 / (8 * math.pi)) * math.cos(x) + 10 + (p['k'] - 3) ** 2 / 10\n",
                          "{'val_loss': v}") +
           "[sweep]\nmethod = \"tpe\"\nsamples = " + std::to_string(samples) + "\nseed = " + std::to_string(seed) +
           "\nmax_concurrent = " + std::to_string(max_concurrent) +
           "\n[sweep.tpe]\nn_startup_trials = 4\n[sweep.parameters]\nx = { uniform = [-5.0, 10.0] }\n"
           "y = { uniform = [0.0, 15.0] }\nk = { int_uniform = [0, 6], step = 2 }\n";
  }
  // The trials' params, by index.
  static std::vector<json> params_of(const Store& store, int64_t experiment) {
    std::vector<json> out;
    for (const TrialRow& t : store.trials(experiment)) out.push_back(json::parse(t.params_json));
    return out;
  }
};

// One slot: each trial is the proposal from every trial before it, completed. Replayed offline
// with the stored values, the sampler makes the same trials; a second experiment with the same
// seed runs the same points.
TEST_F(TpeSweep, TrialsAreTheSamplersProposalsFromTheTrialsBefore) {
  auto c = start();
  const std::string text = tpe_text(12, 1, 0.0);
  const int64_t id = submit(c->url(), text);
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(90)));
  const std::vector<TrialRow> trials = c->store().trials(id);
  ASSERT_EQ(trials.size(), 12u);
  const Recipe recipe = parse_recipe_text(text, "t.toml");
  std::vector<TpeHistoryTrial> history;
  for (size_t i = 0; i < trials.size(); ++i) {
    EXPECT_EQ(trials[i].index, static_cast<int64_t>(i));
    EXPECT_EQ(trials[i].state, TrialState::completed) << trials[i].reason;
    const json params = json::parse(trials[i].params_json);
    EXPECT_EQ(params, propose_tpe_trial(recipe, static_cast<int64_t>(i), history).params) << "trial " << i;
    const auto v = c->store().last_metric(trials[i].id, "val_loss");
    ASSERT_TRUE(v.has_value());
    history.push_back({params, TpeObservation::complete, v->value, -1});
  }
  const int64_t again = submit(c->url(), text);
  ASSERT_TRUE(done(c->url(), again, std::chrono::seconds(90)));
  EXPECT_EQ(params_of(c->store(), again), params_of(c->store(), id));
  EXPECT_EQ(get(c->url(), "/api/v1/experiments/" + std::to_string(id))["state"], "completed");
  c->stop();
}

// Three slots: never more than three trials made and unfinished at once, and the constant liar
// keeps every proposal apart from the running ones.
TEST_F(TpeSweep, ParallelSlotsGetDistinctProposals) {
  auto c = start();
  const int64_t id = submit(c->url(), tpe_text(12, 3, 0.3));
  int most_active = 0;
  ASSERT_TRUE(wait_for(
      [&] {
        int active = 0;
        for (const TrialRow& t : c->store().trials(id))
          active += t.state == TrialState::pending || t.state == TrialState::running;
        most_active = std::max(most_active, active);
        return c->store().experiment(id)->state != ExperimentState::running;
      },
      std::chrono::seconds(90)));
  EXPECT_LE(most_active, 3);
  EXPECT_GE(most_active, 2);
  const std::vector<json> params = params_of(c->store(), id);
  ASSERT_EQ(params.size(), 12u);
  std::set<std::string> distinct;
  for (const json& p : params) distinct.insert(p.dump());
  EXPECT_EQ(distinct.size(), params.size());
  for (const TrialRow& t : c->store().trials(id)) EXPECT_EQ(t.state, TrialState::completed) << t.reason;
  c->stop();
}

// A restart mid-sweep: the new controller adopts the running trials, makes the rest, and ends
// with `samples` trials, each run once.
TEST_F(TpeSweep, ARestartLosesNoTrialAndRunsNoneTwice) {
  auto c = start();
  const int64_t id = submit(c->url(), tpe_text(10, 2, 0.4));
  ASSERT_TRUE(wait_for([&] { return c->store().trial_ids(id, TrialState::completed).size() >= 3; },
                       std::chrono::seconds(60)));
  c->stop();
  c.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c = start();
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(90)));
  const std::vector<TrialRow> trials = c->store().trials(id);
  ASSERT_EQ(trials.size(), 10u);
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

// Cancelled mid-sweep: the running trials stop, and no trial is proposed after.
TEST_F(TpeSweep, CancelEndsTheSweepWithNoNewTrials) {
  auto c = start();
  const int64_t id = submit(c->url(), tpe_text(20, 2, 0.5));
  ASSERT_TRUE(wait_for([&] { return c->store().trial_ids(id, TrialState::completed).size() >= 2; },
                       std::chrono::seconds(60)));
  ASSERT_TRUE(c->scheduler().cancel_experiment(id));
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(60)));
  const size_t made = c->store().trials(id).size();
  EXPECT_LT(made, 20u);
  EXPECT_EQ(get(c->url(), "/api/v1/experiments/" + std::to_string(id))["state"], "cancelled");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // several scheduler passes
  EXPECT_EQ(c->store().trials(id).size(), made);
  c->stop();
}

// `precon recipe suggest`: the proposal after the given trials is the sampler's, with its densities.
class TpeSuggest : public CliFixture {};

TEST_F(TpeSuggest, PrintsTheSamplersProposalAfterTheGivenTrials) {
  const std::string text =
      "[trial]\ncommand = [\"true\"]\n[sweep]\nmethod = \"tpe\"\nseed = 5\n[sweep.tpe]\nn_startup_trials = 3\n"
      "[sweep.parameters]\nx = { uniform = [-5.0, 10.0] }\nact = [\"relu\", \"gelu\"]\n";
  std::ofstream(dir_ / "r.toml") << text;
  const Recipe recipe = parse_recipe_text(text, "r.toml");
  json list = json::array();
  std::vector<TpeHistoryTrial> history;
  for (int i = 0; i < 6; ++i) {
    const json params = propose_tpe_trial(recipe, i, history).params;
    const double value = std::pow(params["x"].get<double>() - 2, 2) + (params["act"] == "gelu" ? 0 : 1);
    const bool running = i == 5;
    history.push_back({params, running ? TpeObservation::running : TpeObservation::complete, value, -1});
    list.push_back({{"params", params}, {"state", running ? "running" : "complete"}, {"value", value}});
  }
  std::ofstream(dir_ / "trials.json") << list.dump();
  TpeSuggestion detail;
  const TrialSpec want = propose_tpe_trial(recipe, 6, history, &detail);
  const test::CommandResult r = precon("recipe suggest r.toml --trials trials.json");
  ASSERT_EQ(r.status, 0) << r.output;
  const json got = json::parse(r.output);
  EXPECT_EQ(got["params"], want.params);
  EXPECT_EQ(got["index"], 6);
  EXPECT_FALSE(got["random"].get<bool>());
  EXPECT_DOUBLE_EQ(got["log_l"].get<double>(), detail.common.log_l);
  EXPECT_DOUBLE_EQ(got["log_g"].get<double>(), detail.common.log_g);
  const test::CommandResult bad = precon("recipe suggest trials.json");
  EXPECT_NE(bad.status, 0);
  std::ofstream(dir_ / "grid.toml") << "[sweep.parameters]\n\"train.seed\" = [1, 2]\n";
  const test::CommandResult grid = precon("recipe suggest grid.toml");
  EXPECT_NE(grid.status, 0);
  EXPECT_NE(grid.output.find("recipe suggest needs a sweep with method = \"tpe\""), std::string::npos) << grid.output;
}

}  // namespace
}  // namespace precon::orch::testing
