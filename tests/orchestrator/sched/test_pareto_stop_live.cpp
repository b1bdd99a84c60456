// sweep.early_stop.method = "pareto" run by a live controller on programs whose two objectives are
// known: one slot, the first trial (1, 1) completes, the second (2, 2) is dominated by it at
// min_step and stopped there as pruned, the third (0.5, 3) trades off and completes.
#include "tests/orchestrator/support/cli_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

class ParetoStopLive : public ControllerFixture {};

TEST_F(ParetoStopLive, ADominatedTrialStopsAtMinStep) {
  auto c = std::make_unique<orch::Controller>(controller_options(4));
  c->start();
  const fs::path prog = dir_ / "curves.sh";
  std::ofstream(prog) << "#!/bin/sh\ni=0\nwhile [ $i -lt 8 ]; do\n  i=$((i + 1))\n"
                         "  echo \"{\\\"step\\\": $i, \\\"f1\\\": $1, \\\"f2\\\": $2}\" >> metrics.jsonl\n  sleep 0.05\ndone\n";
  fs::permissions(prog, fs::perms::owner_all);
  const std::string text = "[experiment]\nname = \"pareto\"\n[trial]\ncommand = [\"" + prog.string() +
                           "\", \"{a}\", \"{b}\"]\n[objective]\nmetrics = [\"f1\", \"f2\"]\nmodes = [\"min\", \"min\"]\n"
                           "[sweep]\nmax_concurrent = 1\n[[sweep.grid]]\na = [1]\nb = [1]\n[[sweep.grid]]\na = [2]\nb = [2]\n"
                           "[[sweep.grid]]\na = [0.5]\nb = [3]\n"
                           "[sweep.early_stop]\nmethod = \"pareto\"\nmin_step = 3\nmin_dominating = 1\n";
  const int64_t id = submit(c->url(), text);
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(60)));
  std::vector<TrialRow> trials = c->store().trials(id);
  ASSERT_EQ(trials.size(), 3u);
  EXPECT_EQ(trials[0].state, TrialState::completed) << trials[0].reason;
  EXPECT_EQ(trials[1].state, TrialState::pruned) << trials[1].reason;
  EXPECT_NE(trials[1].reason.find("Pareto rule (step 3)"), std::string::npos) << trials[1].reason;
  EXPECT_EQ(trials[2].state, TrialState::completed) << trials[2].reason;
  json decision;
  for (const EventRow& e : c->store().events_since(0, 10000, id))
    if (e.kind == "early_stop") decision = json::parse(e.data_json);
  EXPECT_EQ(decision["step"], 3);
  EXPECT_EQ(decision["dominated_by"], json({trials[0].id}));
  c->stop();
}

}  // namespace
}  // namespace precon::orch::testing
