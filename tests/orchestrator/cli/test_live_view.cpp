// The pure pieces of `precon run`'s live view: labels of the swept values that differ, the
// trial and summary lines fitted to a terminal width, a whole frame, and the redraw bytes.
#include <gtest/gtest.h>

#include "orchestrator/cli/live_view.h"

namespace precon::cli {
namespace {

using nlohmann::json;

TEST(CliLiveView, LabelsShowOnlyTheKeysATrialHasAndThatDiffer) {
  // A union sweep as in recipes/quickstart.toml: no trial shows another sub-grid's keys, and
  // adamw.lr (one value wherever it appears) is left out.
  const std::vector<json> params = {
      {{"optimizer.name", "adamw"}, {"optimizer.lr", 0.001}},
      {{"optimizer.name", "muon"}, {"optimizer.lr", 0.02}, {"optimizer.adamw.lr", 0.003}, {"optimizer.muon.ns_steps", 3}},
      {{"optimizer.name", "muon"}, {"optimizer.lr", 0.02}, {"optimizer.adamw.lr", 0.003}, {"optimizer.muon.ns_steps", 5}},
      {{"optimizer.name", "shampoo"}, {"optimizer.lr", 0.003}, {"optimizer.shampoo.precondition_frequency", 10}},
  };
  const std::vector<std::string> labels = trial_labels(params);
  ASSERT_EQ(labels.size(), 4u);
  EXPECT_EQ(labels[0], "optimizer=adamw lr=0.001");
  EXPECT_EQ(labels[1], "optimizer=muon lr=0.02 muon.ns_steps=3");
  EXPECT_EQ(labels[2], "optimizer=muon lr=0.02 muon.ns_steps=5");
  EXPECT_EQ(labels[3], "optimizer=shampoo lr=0.003");
  // One trial: nothing differs, so all its keys; no keys at all: the base config.
  EXPECT_EQ(trial_labels({json{{"train.seed", 1}}})[0], "train.seed=1");
  EXPECT_EQ(trial_labels({json::object()})[0], "(base config)");
}

TEST(CliLiveView, DurationsAndBars) {
  EXPECT_EQ(format_duration(0.4), "0s");
  EXPECT_EQ(format_duration(42), "42s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(kUnknown), "--");
  EXPECT_EQ(progress_bar(0.5, 12), "[#####.....]");
  EXPECT_EQ(progress_bar(0, 6), "[....]");
  EXPECT_EQ(progress_bar(1.7, 6), "[####]");
}

TrialProgress trial(int64_t id, std::string values, int64_t step) {
  TrialProgress t;
  t.id = id;
  t.values = std::move(values);
  t.step = step;
  t.steps = 1000;
  t.eta_s = 65;
  t.train_loss = 2.34567;
  t.val_loss = 2.5;
  return t;
}

TEST(CliLiveView, ATrialLineFitsTheWidthAndKeepsItsParts) {
  const TrialProgress t = trial(12, "optimizer=muon ns_steps=3", 450);
  const std::string wide = trial_line(t, 120);
  EXPECT_LE(wide.size(), 119u);
  EXPECT_EQ(wide.rfind("trial 12  optimizer=muon ns_steps=3  [", 0), 0u) << wide;
  EXPECT_NE(wide.find("[#"), std::string::npos) << wide;
  EXPECT_NE(wide.find("]   450/1000  ETA 1m05s  train 2.346  val 2.5"), std::string::npos) << wide;
  // Narrow: the values are cut (marked ~) before the bar gets under 12 columns; the stats stay.
  const std::string narrow = trial_line(t, 70);
  EXPECT_EQ(narrow.size(), 69u) << narrow;
  EXPECT_NE(narrow.find("~  ["), std::string::npos) << narrow;
  EXPECT_NE(narrow.find("450/1000  ETA 1m05s  train 2.346  val 2.5"), std::string::npos) << narrow;
  // Narrower than the stats: cut at the edge, never wrapped.
  EXPECT_EQ(trial_line(t, 30).size(), 29u);
  // Plain mode: no bar, nothing cut.
  EXPECT_EQ(trial_line(t, 0), "trial 12  optimizer=muon ns_steps=3  450/1000  ETA 1m05s  train 2.346  val 2.5");
}

TEST(CliLiveView, AFrameAlignsItsColumnsAndEndsWithTheSummary) {
  SweepProgress s;
  s.done = 1;
  s.running = 2;
  s.pending = 2;
  s.elapsed_s = 30;
  s.eta_s = 200;
  const std::vector<std::string> lines =
      frame({trial(3, "optimizer=adamw", 100), trial(12, "optimizer=muon ns_steps=3", 900)}, s, {100, 30});
  ASSERT_EQ(lines.size(), 3u);
  for (const std::string& l : lines) EXPECT_LE(l.size(), 99u) << l;
  EXPECT_EQ(lines[0].find('['), lines[1].find('['));
  EXPECT_EQ(lines[0].find('/'), lines[1].find('/'));
  EXPECT_EQ(lines[0].rfind("trial 3   optimizer=adamw ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[2], "sweep: 1 done, 2 running, 2 pending, 0 failed  elapsed 30s  ETA 3m20s");
  // More running trials than the screen holds: the frame stays within it.
  std::vector<TrialProgress> many;
  for (int i = 1; i <= 40; ++i) many.push_back(trial(i, "x", i));
  const std::vector<std::string> tall = frame(many, s, {100, 10});
  ASSERT_EQ(tall.size(), 9u);
  EXPECT_EQ(tall[7], "... 33 more running");
}

TEST(CliLiveView, RedrawGoesUpOverTheLastFrameAndErasesEachLine) {
  LiveView view;
  EXPECT_EQ(view.redraw({"a", "b"}), "\x1b[2Ka\n\x1b[2Kb\n");
  EXPECT_EQ(view.redraw({"c", "d", "e"}), "\r\x1b[2A\x1b[2Kc\n\x1b[2Kd\n\x1b[2Ke\n");
  // Shorter: the left-over line is blanked and the cursor comes back under the new frame.
  EXPECT_EQ(view.redraw({"f"}), "\r\x1b[3A\x1b[2Kf\n\x1b[2K\n\x1b[2K\n\x1b[2A");
  view.detach();
  EXPECT_EQ(view.redraw({"g"}), "\x1b[2Kg\n");
}

}  // namespace
}  // namespace precon::cli
