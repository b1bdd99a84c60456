// Promotion: a trial ASHA stopped at a rung goes on from its checkpoint once later values at that
// rung put it in the top 1/reduction_factor (scheduler_promote.cpp). The answers are worked out by
// hand from the rule: at a rung with n recorded values the best max(n / reduction_factor, 1) go on.
//
// The live sweeps run rung_curve.py one trial at a time: val_loss 1, 2, 3, 4, 5, 6 below step 6
// (trials 0..5), then 0.9 for trial 0 and 0.5 for trial 1; ASHA with min_step 2 and factor 3 (rungs
// at steps 2 and 6). Trial 0 goes on alone; trials 1..4 fall behind it at step 2 (one of n < 6
// goes on); trial 5's value makes n = 6, so the best two go on: trial 5 stops and trial 1 (2 <= the
// cutoff 2) is promoted, resumes after its checkpoint, beats trial 0 at step 6 (0.5 < 0.9) and
// completes. Trial 2 (3) stays pruned.
#include <signal.h>
#include <sys/wait.h>

#include <sstream>

#include "orchestrator/sched/early_stop.h"
#include "tests/common/test_util.h"
#include "tests/orchestrator/support/cli_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

EarlyStopSettings asha(int64_t min_step, int64_t rf, std::string mode = "min") {
  EarlyStopSettings s;
  s.method = "asha";
  s.min_step = min_step;
  s.reduction_factor = rf;
  s.mode = std::move(mode);
  s.promote = true;
  return s;
}

std::vector<int64_t> promoted_trials(const std::vector<Promotion>& ps) {
  std::vector<int64_t> out;
  for (const Promotion& p : ps) out.push_back(p.trial);
  return out;
}

TEST(Promotions, AStoppedTrialGoesOnOnceItsRungRanksItInTheTopThird) {
  const EarlyStopper stopper(asha(2, 3));
  ObjectiveHistory h{{0, {{2, 1.0}, {6, 0.9}}}, {1, {{2, 2.0}}}, {2, {{2, 3.0}}}, {3, {{2, 4.0}}}, {4, {{2, 5.0}}}};
  std::map<int64_t, int64_t> stopped{{1, 0}, {2, 0}, {3, 0}, {4, 0}};
  EXPECT_TRUE(stopper.promotions(h, stopped).empty()) << "5 values at rung 0: only the best (trial 0) goes on";
  h[5] = {{2, 6.0}};
  stopped[5] = 0;
  const std::vector<Promotion> ps = stopper.promotions(h, stopped);
  ASSERT_EQ(promoted_trials(ps), std::vector<int64_t>{1}) << "6 values: the best 2 (1.0 and 2.0) go on";
  EXPECT_EQ(ps[0].rung, 0);
  EXPECT_EQ(ps[0].data["rung_step"], 2);
  EXPECT_EQ(ps[0].data["competitors"], 6);
  EXPECT_EQ(ps[0].data["keep"], 2);
  EXPECT_EQ(ps[0].data["cutoff"], 2.0);
  EXPECT_EQ(ps[0].reason, "promoted at ASHA rung 0 (step 2): val_loss 2 is now in the top 2 of 6 trials (1/3, cutoff 2)");
}

TEST(Promotions, MaximisingTiesPromoteAndPointsPastTheStopDoNotCount) {
  const EarlyStopper stopper(asha(10, 2, "max"));
  // Rung 1 (step 20): trial 0 has 0.8 there; trial 1 was stopped at rung 0, but a point it reported
  // after the stop (0.99 at step 20) must not compete at rung 1.
  ObjectiveHistory h{{0, {{10, 0.5}, {20, 0.8}}}, {1, {{10, 0.4}, {20, 0.99}}}, {2, {{10, 0.7}, {20, 0.6}}}};
  std::map<int64_t, int64_t> stopped{{1, 0}, {2, 1}};
  // Rung 0: 0.5, 0.4, 0.7: one of 3 goes on (0.7); trial 1 (0.4) not. Rung 1: 0.8 and 0.6 (trial
  // 1's 0.99 left out): the best 1 of 2 is 0.8; trial 2 (0.6) not.
  EXPECT_TRUE(stopper.promotions(h, stopped).empty());
  h[3] = {{10, 0.3}, {20, 0.6}};  // rung 1 now 0.8, 0.6, 0.6: still 1 of 3
  EXPECT_TRUE(stopper.promotions(h, stopped).empty());
  h[4] = {{10, 0.2}, {20, 0.6}};  // 4 values: the best 2 are 0.8 and 0.6; trial 2's 0.6 ties the cutoff
  EXPECT_EQ(promoted_trials(stopper.promotions(h, stopped)), std::vector<int64_t>{2});
}

TEST(Promotions, HyperbandPromotesAmongTheTrialsOfOneBracket) {
  EarlyStopSettings s = asha(1, 2);
  s.method = "hyperband";
  s.max_step = 4;  // 3 brackets: bracket 0's rungs at steps 1, 2, 4; bracket 1's at 2, 4
  s.study_name = "hb";
  const EarlyStopper stopper(s);
  ASSERT_EQ(stopper.brackets(), 3);
  std::vector<int64_t> first, others;  // trial numbers (here their ids) in bracket 0, and in another
  for (int64_t n = 0; first.size() < 4 || others.size() < 2; ++n) (stopper.bracket_of(n) == 0 ? first : others).push_back(n);
  // Bracket 0 at step 1: 1.0 goes on, 2.0 stops (one of two). The two trials of other brackets
  // report 9.0 at steps 1 and 2: counted with bracket 0's they would make four values at step 1, of
  // which the best two (1.0 and 2.0) go on.
  ObjectiveHistory h{{first[0], {{1, 1.0}}}, {first[1], {{1, 2.0}}}, {others[0], {{1, 9.0}, {2, 9.0}}},
                     {others[1], {{1, 9.0}, {2, 9.0}}}};
  const std::map<int64_t, int64_t> stopped{{first[1], 0}};
  EXPECT_TRUE(stopper.promotions(h, stopped).empty());
  h[first[2]] = {{1, 3.0}};
  EXPECT_TRUE(stopper.promotions(h, stopped).empty()) << "one of three in bracket 0";
  h[first[3]] = {{1, 4.0}};
  const std::vector<Promotion> ps = stopper.promotions(h, stopped);
  ASSERT_EQ(promoted_trials(ps), std::vector<int64_t>{first[1]}) << "two of four in bracket 0";
  EXPECT_EQ(ps[0].data["bracket"], 0);
  EXPECT_EQ(ps[0].data["competitors"], 4);
  EXPECT_EQ(ps[0].reason.rfind("Hyperband bracket 0 of 3, promoted at ASHA rung 0 (step 1): val_loss 2 is now in", 0), 0u)
      << ps[0].reason;
}

TEST(Promotions, MedianAndStoppersWithoutRungsPromoteNothing) {
  EarlyStopSettings m;
  m.method = "median";
  m.promote = true;
  const ObjectiveHistory h{{0, {{2, 1.0}}}, {1, {{2, 2.0}}}};
  EXPECT_TRUE(EarlyStopper(m).promotions(h, {{1, 0}}).empty());
}

class PromotionLive : public CliFixture {
 protected:
  // The sweep of the header: six trials of rung_curve.py, one at a time, reporting to `db`.
  static std::string sweep(const fs::path& db) {
    return "[experiment]\nname = \"promote\"\n[trial]\ncommand = [\"" + std::string(PRECON_PYTHON) + "\", \"" +
           PRECON_SOURCE_DIR + "/tests/orchestrator/sched/rung_curve.py\", \"" + db.string() +
           "\", \"{a}\", \"{b}\", \"6\", \"8\"]\n[sweep]\nmax_concurrent = 1\n"
           "[[sweep.grid]]\na = [1]\nb = [0.9]\n[[sweep.grid]]\na = [2]\nb = [0.5]\n[[sweep.grid]]\na = [3, 4, 5, 6]\nb = [9]\n"
           "[sweep.early_stop]\nmethod = \"asha\"\nmin_step = 2\nreduction_factor = 3\n";
  }

  // The steps each attempt of the trial started at (attempts.log).
  static std::vector<int64_t> attempt_starts(const TrialRow& t) {
    std::vector<int64_t> out;
    std::ifstream in(fs::path(t.run_dir) / "attempts.log");
    for (int64_t s; in >> s;) out.push_back(s);
    return out;
  }

  // The outcome of the header, whoever ran it: each trial's state, attempts and points.
  static void expect_the_known_answer(const Store& store, int64_t id) {
    std::vector<TrialRow> trials = store.trials(id);
    ASSERT_EQ(trials.size(), 6u);
    std::vector<EventRow> promotions = store.events_of_kind(id, "trial_promoted");
    ASSERT_EQ(promotions.size(), 1u);
    EXPECT_EQ(promotions[0].trial_id, trials[1].id);
    const json data = json::parse(promotions[0].data_json);
    EXPECT_EQ(data["rung"], 0);
    EXPECT_EQ(data["competitors"], 6);
    EXPECT_EQ(data["cutoff"], 2.0);
    for (size_t i = 0; i < trials.size(); ++i) {
      const TrialRow& t = trials[i];
      SCOPED_TRACE("trial " + std::to_string(i) + " " + t.params_json + ": " + t.reason);
      const bool goes_on = i < 2;
      EXPECT_EQ(t.state, goes_on ? TrialState::completed : TrialState::pruned);
      const std::vector<int64_t> starts = attempt_starts(t);
      const std::vector<AttemptRow> attempts = store.attempts(t.id);
      // Every attempt the store knows ran once; only the promoted trial ran twice.
      EXPECT_EQ(attempts.size(), i == 1 ? 2u : 1u);
      EXPECT_EQ(starts.size(), attempts.size());
      if (i == 1 && starts.size() == 2) {
        EXPECT_EQ(starts[0], 1);
        // Resumed after its checkpoint (step 2, or 3 when the stop came as it wrote step 3), short
        // of rung 1: not from the start.
        EXPECT_GE(starts[1], 3);
        EXPECT_LE(starts[1], 4);
      }
      if (goes_on) {  // every step once, each with the curve's value
        const std::vector<MetricPoint> points = store.metrics(t.id, "val_loss");
        ASSERT_EQ(points.size(), 8u);
        for (const MetricPoint& p : points)
          EXPECT_EQ(p.value, p.step < 6 ? (i == 0 ? 1.0 : 2.0) : (i == 0 ? 0.9 : 0.5)) << "step " << p.step;
      }
    }
    // Trial 1 stopped once (rung 0), and went on at rung 1 (0.5, the best of 2).
    int stops_of_1 = 0;
    for (const EventRow& e : store.events_of_kind(id, "early_stop")) stops_of_1 += e.trial_id == trials[1].id;
    EXPECT_EQ(stops_of_1, 1);
  }
};

TEST_F(PromotionLive, AStoppedTrialIsPromotedAndResumesFromItsCheckpoint) {
  auto c = std::make_unique<orch::Controller>(controller_options(2));
  c->start();
  const fs::path db = dir_ / "precon.db";
  const int64_t id = submit(c->url(), sweep(db));
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(120)));
  expect_the_known_answer(c->store(), id);
  const std::vector<TrialRow> trials = c->store().trials(id);
  // The dashboard's events and `precon show` tell the promotion.
  const json events = get(c->url(), "/api/v1/events?limit=1000&experiment=" + std::to_string(id));
  int promoted_events = 0;
  for (const json& e : events["events"])
    if (e["kind"] == "trial_promoted") {
      ++promoted_events;
      EXPECT_NE(e["message"].get<std::string>().find("promoted at ASHA rung 0 (step 2)"), std::string::npos) << e.dump();
    }
  EXPECT_EQ(promoted_events, 1);
  c->stop();
  const test::CommandResult shown = precon("show " + std::to_string(id) + " --db " + db.string());
  ASSERT_EQ(shown.status, 0) << shown.output;
  EXPECT_NE(shown.output.find("PROMOTED"), std::string::npos) << shown.output;
  EXPECT_NE(shown.output.find("rung 0 (step 2)"), std::string::npos) << shown.output;
  const test::CommandResult as_json = precon("show " + std::to_string(id) + " --json --db " + db.string());
  ASSERT_EQ(as_json.status, 0) << as_json.output;
  const json list = json::parse(as_json.output)["trial_list"];
  ASSERT_EQ(list.size(), 6u);
  for (size_t i = 0; i < list.size(); ++i) EXPECT_EQ(list[i]["promotions"].size(), i == 1 ? 1u : 0u) << i;
  EXPECT_EQ(list[1]["promotions"][0]["rung_step"], 2);
}

TEST_F(PromotionLive, AControllerKilledAsTheDecidingValueArrivesLosesNoPromotion) {
  // precon serve is killed (SIGKILL) as soon as trial 5 has written the value that promotes trial 1:
  // before, while or after the controller stored it, decided trial 5's stop and promoted trial 1.
  // The restarted controller must finish the same sweep: trial 1 promoted once, no trial run twice.
  Serve first = serve(PRECON_BIN, {"--admin-token", "admin-secret"});
  ASSERT_FALSE(first.url.empty()) << read_file(first.log);
  const int64_t id = submit(first.url, sweep(first.db));
  ASSERT_GT(id, 0);
  const json trials = get(first.url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  ASSERT_EQ(trials.size(), 6u);
  const fs::path last_metrics = fs::path(trials[5]["run_dir"].get<std::string>()) / "metrics.jsonl";
  ASSERT_TRUE(wait_for([&] { return read_file(last_metrics).find("\"step\": 2,") != std::string::npos; },
                       std::chrono::seconds(120)));
  ::kill(first.pid, SIGKILL);
  ::waitpid(first.pid, nullptr, 0);
  first.pid = -1;

  Serve second = serve(PRECON_BIN, {"--admin-token", "admin-secret"});
  ASSERT_FALSE(second.url.empty()) << read_file(second.log);
  ASSERT_TRUE(done(second.url, id, std::chrono::seconds(120)));
  second.stop();
  const Store store(second.db);
  expect_the_known_answer(store, id);
}

}  // namespace
}  // namespace precon::orch::testing
