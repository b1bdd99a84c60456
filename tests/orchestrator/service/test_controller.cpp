// The controller end to end: every HTTP route over a real socket against a live controller
// running real precon-train workers, bad input answered with the one error shape, early
// stopping, cancellation, retries and requeues.
#include <csignal>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "orchestrator/service/controller.h"
#include "tests/orchestrator/support/controller_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;

class Controller : public ControllerFixture {
 protected:
  std::unique_ptr<orch::Controller> start(int cpu_slots = 2,
                                          const std::function<void(ControllerOptions&)>& adjust = nullptr) {
    ControllerOptions o = controller_options(cpu_slots);
    if (adjust) adjust(o);
    auto c = std::make_unique<orch::Controller>(o);
    c->start();
    return c;
  }
  // `precon ARGS` with this test's database; its stdout.
  std::string cli(const std::string& args) const {
    const std::string cmd = std::string(PRECON_BIN) + " " + args + " --db " + (dir_ / "precon.db").string() + " 2>&1";
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      ::pclose(p);
    }
    return out;
  }
};

TEST_F(Controller, EveryReadRouteOverASocket) {
  auto c = start();
  const std::string url = c->url();
  EXPECT_TRUE(get(url, "/healthz")["ok"].get<bool>());
  const int64_t id = submit(url, recipe(20, "[sweep]\nmax_concurrent = 2\n[sweep.parameters]\n\"optimizer.lr\" = [0.001, 0.003]\n"));
  ASSERT_GT(id, 0);
  ASSERT_TRUE(done(url, id));

  json exps = get(url, "/api/v1/experiments")["experiments"];
  ASSERT_EQ(exps.size(), 1u);
  EXPECT_EQ(exps[0]["state"], "completed");
  EXPECT_EQ(exps[0]["trial_states"]["completed"], 2);

  json exp = get(url, "/api/v1/experiments/" + std::to_string(id));
  EXPECT_NE(exp["recipe"].get<std::string>().find("[sweep.parameters]"), std::string::npos);
  ASSERT_EQ(exp["trial_list"].size(), 2u);
  json trials = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  ASSERT_EQ(trials.size(), 2u);
  const int64_t trial = trials[0]["id"];
  EXPECT_EQ(trials[0]["params"]["optimizer.lr"], 0.001);
  EXPECT_EQ(trials[0]["last_step"], 20);
  EXPECT_TRUE(trials[0]["objective"].is_number());

  json t = get(url, "/api/v1/trials/" + std::to_string(trial));
  EXPECT_EQ(t["state"], "completed");
  ASSERT_EQ(t["attempts"].size(), 1u);
  EXPECT_EQ(t["attempts"][0]["state"], "succeeded");
  EXPECT_EQ(t["attempts"][0]["exit_code"], 0);
  EXPECT_FALSE(t["checkpoints"].empty());
  EXPECT_NE(t["config"].get<std::string>().find("lr = 0.001"), std::string::npos);

  // Metrics: every train_loss step stored once; downsampling bounded and keeping the extremes.
  json m = get(url, "/api/v1/trials/" + std::to_string(trial) + "/metrics?name=train_loss&max_points=0")["metrics"];
  ASSERT_EQ(m["train_loss"]["steps"].size(), 20u);
  json small = get(url, "/api/v1/trials/" + std::to_string(trial) + "/metrics?name=train_loss&max_points=8")["metrics"];
  EXPECT_LE(small["train_loss"]["steps"].size(), 8u);
  double lo = 1e9, hi = -1e9, slo = 1e9, shi = -1e9;
  for (const json& v : m["train_loss"]["values"]) lo = std::min(lo, v.get<double>()), hi = std::max(hi, v.get<double>());
  for (const json& v : small["train_loss"]["values"]) slo = std::min(slo, v.get<double>()), shi = std::max(shi, v.get<double>());
  EXPECT_EQ(lo, slo);
  EXPECT_EQ(hi, shi);
  json all = get(url, "/api/v1/trials/" + std::to_string(trial) + "/metrics")["metrics"];
  EXPECT_TRUE(all.contains("val_loss"));
  EXPECT_TRUE(all.contains("grad_norm"));

  json logs = get(url, "/api/v1/trials/" + std::to_string(trial) + "/logs?stream=stderr&lines=5");
  EXPECT_NE(logs["text"].get<std::string>().find("checkpoint"), std::string::npos) << logs.dump();

  json ev = get(url, "/api/v1/events?since=0&limit=1000");
  ASSERT_FALSE(ev["events"].empty());
  const int64_t cursor = ev["cursor"];
  EXPECT_TRUE(get(url, "/api/v1/events?since=" + std::to_string(cursor))["events"].empty());
  int completions = 0;
  for (const json& e : ev["events"]) completions += e["kind"] == "trial_completed";
  EXPECT_EQ(completions, 2);

  json best = get(url, "/api/v1/experiments/" + std::to_string(id) + "/best");
  EXPECT_TRUE(best.is_object());
  c->stop();

  // Everything under the run root is the user's alone, as the database is: the directories the
  // controller created 0700, every file in them 0600 (config, logs, metrics, checkpoints).
  int files = 0, checkpoint_files = 0;
  const auto mode = [](const fs::path& p) { return fs::symlink_status(p).permissions() & fs::perms::all; };
  EXPECT_EQ(mode(dir_ / "runs"), fs::perms::owner_all);
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir_ / "runs")) {
    if (e.is_directory()) {
      EXPECT_EQ(mode(e.path()), fs::perms::owner_all) << e.path();
    } else {
      EXPECT_EQ(mode(e.path()), fs::perms::owner_read | fs::perms::owner_write) << e.path();
      ++files;
      checkpoint_files += e.path().string().find("/checkpoints/step_") != std::string::npos;
    }
  }
  EXPECT_GT(checkpoint_files, 4) << "model, optimizer, trainer.json, manifest, configs";
  EXPECT_GT(files, checkpoint_files + 6) << "config.toml, logs and metrics of each trial";
  EXPECT_EQ(mode(dir_ / "precon.db"), fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(Controller, KeepBestCheckpointSurvivesAndDeletionsAreRecorded) {
  // objective = max val_loss makes an early checkpoint the best one; keep_checkpoints = 1 deletes
  // the rest. The expected survivor comes from the stored val_loss curve.
  auto c = start();
  const std::string url = c->url();
  std::string text = recipe(40, "[objective]\nmetric = \"val_loss\"\nmode = \"max\"\n");
  text.replace(text.find("checkpoint_every = 10"), 21, "checkpoint_every = 10\nkeep_checkpoints = 1\nkeep_best = 1");
  const int64_t ok = submit(url, text);
  ASSERT_GT(ok, 0);
  ASSERT_TRUE(done(url, ok));
  const int64_t trial = get(url, "/api/v1/experiments/" + std::to_string(ok) + "/trials")["trials"][0]["id"];
  json val = get(url, "/api/v1/trials/" + std::to_string(trial) + "/metrics?name=val_loss&max_points=0")["metrics"]["val_loss"];
  std::map<int64_t, double> at;
  for (size_t i = 0; i < val["steps"].size(); ++i) at[val["steps"][i].get<int64_t>()] = val["values"][i].get<double>();
  int64_t best = 10;
  for (int64_t s : {20, 30, 40})
    if (at.at(s) > at.at(best)) best = s;
  ASSERT_NE(best, 40) << "the loss did not fall; the test needs an early maximum";

  json t = get(url, "/api/v1/trials/" + std::to_string(trial));
  std::set<int64_t> alive;
  for (const json& ck : t["checkpoints"]) {
    const bool deleted = !ck["deleted_at"].is_null();
    EXPECT_EQ(fs::exists(ck["path"].get<std::string>()), !deleted) << ck.dump();
    if (!deleted) alive.insert(ck["step"].get<int64_t>());
    if (ck["step"] == best) {
      EXPECT_NEAR(ck["objective"].get<double>(), at.at(best), 1e-6) << ck.dump();
    }
  }
  EXPECT_EQ(alive, (std::set<int64_t>{best, 40}));
}

TEST_F(Controller, CancelOfAnAttemptThatNeverReportedSignalsAtOnce) {
  // A worker that has not reported (here: one that never will) cannot hear the stop answer, so
  // the cancel must signal it at once rather than after the 30 s grace period.
  const fs::path fake = dir_ / "silent-trainer.sh";
  std::ofstream(fake) << "#!/bin/sh\nexec sleep 120\n";
  fs::permissions(fake, fs::perms::owner_all);
  auto c = start(2, [&](ControllerOptions& o) {
    o.trainer = fake;
    o.stop_grace = std::chrono::seconds(30);
  });
  const std::string url = c->url();
  const int64_t id = submit(url, recipe(10, ""));
  ASSERT_GT(id, 0);
  const std::string trials = "/api/v1/experiments/" + std::to_string(id) + "/trials";
  ASSERT_TRUE(wait_for([&] { return get(url, trials)["trials"][0]["state"] == "running"; }, std::chrono::seconds(20)));
  ASSERT_EQ(post(url, "/api/v1/experiments/" + std::to_string(id) + "/cancel", "{}", "admin-secret").status, 200);
  EXPECT_TRUE(wait_for([&] { return get(url, trials)["trials"][0]["state"] == "cancelled"; }, std::chrono::seconds(10)));
  c->stop();
}

TEST_F(Controller, BadInputGetsTheErrorShapeAndChangesNothing) {
  auto c = start();
  const std::string url = c->url();
  auto error_code = [](const ClientResponse& r) {
    json j = json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"]["code"].get<std::string>() : std::string("?");
  };
  // No token / wrong token on a route that changes state.
  ClientResponse r = post(url, "/api/v1/experiments", json{{"recipe", recipe(5, "")}}.dump(), "");
  EXPECT_EQ(r.status, 401);
  r = post(url, "/api/v1/experiments", json{{"recipe", recipe(5, "")}}.dump(), "wrong");
  EXPECT_EQ(r.status, 401);
  // A bad recipe names the file, line and key.
  r = post(url, "/api/v1/experiments", json{{"recipe", recipe(5, "[sweep.parameters]\n\"optimizer.muon.ns_step\" = [3]\n")},
                                            {"source", "bad.toml"}}.dump(), "admin-secret");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_code(r), "bad_recipe");
  EXPECT_NE(r.body.find("bad.toml:"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("ns_steps"), std::string::npos) << r.body;
  // Missing data files.
  r = post(url, "/api/v1/experiments",
           json{{"recipe", recipe(5, "") + "\n"}, {"overrides", {"data.train=/nonexistent.bin"}}}.dump(), "admin-secret");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("/nonexistent.bin"), std::string::npos) << r.body;
  // Malformed JSON, wrong shapes.
  r = post(url, "/api/v1/experiments", "{not json", "admin-secret");
  EXPECT_EQ(r.status, 400);
  r = post(url, "/api/v1/experiments", "[1,2]", "admin-secret");
  EXPECT_EQ(r.status, 400);
  // Oversized body.
  r = post(url, "/api/v1/experiments", std::string(9 << 20, 'x'), "admin-secret");
  EXPECT_EQ(r.status, 413);
  // Unknown things.
  get(url, "/api/v1/experiments/999", 404);
  get(url, "/api/v1/trials/999/metrics", 404);
  get(url, "/api/v1/trials/abc", 400);
  get(url, "/api/v1/nothing", 404);
  // Reports: unknown trial, wrong token, malformed records.
  // An unknown trial is told apart from a wrong token by nobody.
  r = post(url, "/api/v1/report", json{{"trial", "999"}, {"records", json::array()}}.dump(), "x");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(error_code(r), "bad_token");
  EXPECT_TRUE(get(url, "/api/v1/experiments")["experiments"].empty());  // nothing was stored
  const int64_t id = submit(url, recipe(400, ""));
  const int64_t trial = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0]["id"];
  r = post(url, "/api/v1/report", json{{"trial", std::to_string(trial)}, {"records", json::array()}}.dump(), "wrong");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(error_code(r), "bad_token");
  r = post(url, "/api/v1/report", json{{"trial", std::to_string(trial)}, {"records", {{{"step", "x"}}}}}.dump(), "wrong");
  EXPECT_EQ(r.status, 400);
  // Cancel through the API, with the token; the worker stops and the trial ends cancelled.
  EXPECT_EQ(post(url, "/api/v1/experiments/" + std::to_string(id) + "/cancel", "", "").status, 401);
  EXPECT_EQ(post(url, "/api/v1/experiments/" + std::to_string(id) + "/cancel", "", "admin-secret").status, 200);
  ASSERT_TRUE(done(url, id));
  json t = get(url, "/api/v1/trials/" + std::to_string(trial));
  EXPECT_EQ(t["state"], "cancelled");
  c->stop();
}

TEST_F(Controller, AshaStopsTrialsThroughTheReportAnswer) {
  auto c = start(4);
  const std::string url = c->url();
  // Widely different learning rates: ASHA at steps 10, 20, 40, ... keeps the best half. Training
  // does not wait for report answers, so the trials run long past the rungs: with 60 steps a
  // loaded machine once let every trial finish before its stop answer came.
  const int64_t id = submit(url, recipe(400, "[sweep]\nmax_concurrent = 3\n[sweep.parameters]\n"
                                            "\"optimizer.lr\" = [0.00001, 0.003, 0.00003, 0.01, 0.0001, 0.02]\n"
                                            "[sweep.early_stop]\nmethod = \"asha\"\nmin_step = 10\nreduction_factor = 2\n"));
  ASSERT_TRUE(done(url, id, std::chrono::seconds(240)));
  json trials = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  int pruned = 0, completed = 0;
  for (const json& t : trials) {
    pruned += t["state"] == "pruned";
    completed += t["state"] == "completed";
    if (t["state"] == "pruned") {
      EXPECT_NE(t["reason"].get<std::string>().find("ASHA"), std::string::npos) << t.dump();
      EXPECT_LT(t["last_step"].get<int64_t>(), 400);
    }
  }
  EXPECT_GE(pruned, 1);
  EXPECT_GE(completed, 1);
  int decisions = 0;
  std::string kinds;
  const json events = get(url, "/api/v1/events?limit=10000");
  for (const json& e : events["events"]) {
    decisions += e["kind"] == "early_stop";
    if (e["kind"] == "early_stop") {
      EXPECT_NE(e["message"].get<std::string>().find("ASHA"), std::string::npos) << e.dump();
    }
    kinds += e["kind"].get<std::string>() + " ";
  }
  // A trial may finish its last step before it reads the stop answer: a decision without a prune.
  EXPECT_GE(decisions, pruned) << kinds;
  c->stop();
}

TEST_F(Controller, FailedAttemptsAreRetriedThenTheTrialFails) {
  ::setenv("PRECON_FAULT_NAN_LOSS_AT_STEP", "3", 1);  // inherited by the workers
  auto c = start();
  const std::string url = c->url();
  const int64_t id = submit(url, recipe(10, "[sweep]\nmax_attempts = 2\n[sweep.parameters]\n\"train.seed\" = [7]\n"));
  ASSERT_TRUE(done(url, id));
  ::unsetenv("PRECON_FAULT_NAN_LOSS_AT_STEP");
  json trial = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0];
  EXPECT_EQ(trial["state"], "failed");
  EXPECT_NE(trial["reason"].get<std::string>().find("after 2 failed attempt(s)"), std::string::npos) << trial.dump();
  EXPECT_EQ(trial["reason"].get<std::string>().rfind("non-finite training loss", 0), 0u) << trial.dump();
  json t = get(url, "/api/v1/trials/" + std::to_string(trial["id"].get<int64_t>()));
  ASSERT_EQ(t["attempts"].size(), 2u);
  EXPECT_EQ(t["attempts"][1]["exit_code"], 1);
  c->stop();
}

TEST_F(Controller, ConfigErrorIsNotRetriedAndTheReasonIsTheTrainersLine) {
  // The real trainer handed a configuration it rejects: it exits 2 with its own error line.
  const fs::path wrapper = dir_ / "bad-config-trainer.sh";
  std::ofstream(wrapper) << "#!/bin/sh\nexec " << PRECON_TRAIN_BIN << " \"$@\" --set optimizer.muon.ns_steps=0\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  auto c = start(2, [&](ControllerOptions& o) { o.trainer = wrapper; });
  const std::string url = c->url();
  const int64_t id = submit(url, recipe(10, "[sweep]\nmax_attempts = 3\n[sweep.parameters]\n\"train.seed\" = [7]\n"));
  ASSERT_TRUE(done(url, id));
  const json row = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0];
  const int64_t trial = row["id"];
  json t = get(url, "/api/v1/trials/" + std::to_string(trial));
  EXPECT_EQ(t["state"], "failed");
  ASSERT_EQ(t["attempts"].size(), 1u) << t.dump();  // never retried, whatever max_attempts says
  EXPECT_EQ(t["attempts"][0]["exit_code"], 2);
  // The reason starts with the trainer's line as it wrote it to stderr.log, then the context.
  std::ifstream log(fs::path(t["run_dir"].get<std::string>()) / "stderr.log");
  std::string line, said;
  while (std::getline(log, line))
    if (size_t at = line.find("precon-train: config error: "); at != std::string::npos) said = line.substr(at + 28);
  ASSERT_NE(said.find("optimizer.muon.ns_steps"), std::string::npos) << said;
  const std::string reason = t["reason"];
  EXPECT_EQ(reason, said + " (exit code 2: configuration error, not retried)");
  EXPECT_EQ(row["reason"], reason);
  const json events = get(url, "/api/v1/events?limit=1000");
  ASSERT_FALSE(events["events"].empty());
  for (const json& e : events["events"]) EXPECT_NE(e["kind"], "attempt_failed") << e.dump();
  c->stop();
  // `precon show` gives the same reason in the trial's row, which starts with the trial's id.
  const std::string shown = cli("show " + std::to_string(id));
  const size_t at = shown.find(reason);
  ASSERT_NE(at, std::string::npos) << shown;
  EXPECT_EQ(shown.substr(shown.rfind('\n', at) + 1, std::to_string(trial).size() + 2), std::to_string(trial) + "  ")
      << shown;
}

TEST_F(Controller, ANameStartingWithADotGetsAVisibleRunDirectory) {
  // issue 28, item 10: experiment.name = ".hidden" made a hidden run directory.
  auto c = start();
  const std::string url = c->url();
  std::string text = recipe(2, "");
  text.replace(text.find("name = \"tiny\""), 13, "name = \".hidden\"");
  const int64_t id = submit(url, text);
  ASSERT_TRUE(done(url, id));
  const json t = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0];
  const std::string dir = fs::path(get(url, "/api/v1/trials/" + std::to_string(t["id"].get<int64_t>()))["run_dir"].get<std::string>())
                              .parent_path()
                              .filename()
                              .string();
  EXPECT_EQ(dir.rfind("_hidden-", 0), 0u) << dir;
  c->stop();
}

TEST_F(Controller, OneTrialIdentifierInRunDirsApiAndCli) {
  // A second experiment's trials are trials 4..6: every place names them so, never 0..2.
  auto c = start(3);
  const std::string url = c->url();
  const std::string sweep = "[sweep]\nmax_concurrent = 3\n[sweep.parameters]\n\"optimizer.lr\" = [0.001, 0.002, 0.003]\n";
  const int64_t first = submit(url, recipe(5, sweep));
  ASSERT_TRUE(done(url, first));
  const int64_t second = submit(url, recipe(5, sweep));
  ASSERT_TRUE(done(url, second));
  const json trials = get(url, "/api/v1/experiments/" + std::to_string(second) + "/trials")["trials"];
  ASSERT_EQ(trials.size(), 3u);
  std::vector<int64_t> ids;
  for (const json& t : trials) {
    const int64_t tid = t["id"];
    ids.push_back(tid);
    const fs::path run_dir = t["run_dir"].get<std::string>();
    EXPECT_EQ(run_dir.filename(), "trial-" + std::to_string(tid));
    EXPECT_TRUE(fs::exists(run_dir / "config.toml")) << run_dir;
    EXPECT_EQ(get(url, "/api/v1/trials/" + std::to_string(tid))["id"], tid);
  }
  EXPECT_EQ(ids, (std::vector<int64_t>{4, 5, 6}));
  std::set<int64_t> event_trials;
  const json events = get(url, "/api/v1/events?limit=1000&experiment=" + std::to_string(second));
  for (const json& e : events["events"])
    if (e["trial_id"].is_number()) event_trials.insert(e["trial_id"].get<int64_t>());
  EXPECT_EQ(event_trials, (std::set<int64_t>{4, 5, 6}));
  c->stop();
  // `precon show`: one TRIAL column holding the ids; `precon best`: the same ids.
  const std::string shown = cli("show " + std::to_string(second));
  std::istringstream lines(shown);
  std::string line;
  std::vector<std::string> first_cells;
  bool table = false;
  while (std::getline(lines, line)) {
    if (line.rfind("TRIAL", 0) == 0) {
      EXPECT_EQ(line.find(" ID "), std::string::npos) << line;
      table = true;
    } else if (table && !line.empty()) {
      first_cells.push_back(line.substr(0, line.find(' ')));
    }
  }
  EXPECT_EQ(first_cells, (std::vector<std::string>{"4", "5", "6"})) << shown;
  const json show = json::parse(cli("show " + std::to_string(second) + " --json"), nullptr, false);
  ASSERT_TRUE(show.is_object());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(show["trial_list"][i]["id"], ids[i]);
  const json best = json::parse(cli("best " + std::to_string(second) + " --json"), nullptr, false);
  ASSERT_TRUE(best.is_object());
  std::set<int64_t> ranked;
  for (const json& e : best["at_step"]["entries"]) ranked.insert(e["trial"].get<int64_t>());
  EXPECT_EQ(ranked, (std::set<int64_t>{4, 5, 6}));
}

TEST_F(Controller, PreconRunShowsTrialIdsAndTheFailureReason) {
  // `precon run`, embedded controller, real workers that fail at step 3 with the trainer's error.
  ::setenv("PRECON_FAULT_NAN_LOSS_AT_STEP", "3", 1);
  std::ofstream(dir_ / "r.toml") << recipe(10, "[sweep]\nmax_attempts = 1\n[sweep.parameters]\n\"train.seed\" = [7, 8]\n");
  const std::string out = cli("run " + (dir_ / "r.toml").string() + " --quiet --cpus 2 --runs " + (dir_ / "runs").string());
  ::unsetenv("PRECON_FAULT_NAN_LOSS_AT_STEP");
  orch::Store store(dir_ / "precon.db");
  const auto exps = store.experiments();
  ASSERT_EQ(exps.size(), 1u) << out;
  for (const TrialRow& t : store.trials(exps[0].id)) {
    SCOPED_TRACE("trial " + std::to_string(t.id));
    EXPECT_EQ(t.state, TrialState::failed);
    EXPECT_EQ(t.reason.rfind("non-finite training loss", 0), 0u) << t.reason;
    EXPECT_NE(t.reason.find("after 1 failed attempt(s)"), std::string::npos) << t.reason;
    // The leaderboard has a row for the trial: its id, then the reason in the note.
    const size_t board = out.find("\nobjective: ");
    ASSERT_NE(board, std::string::npos) << out;
    std::istringstream lines(out.substr(board));
    int rows = 0;
    for (std::string line; std::getline(lines, line);)
      rows += line.find("failed: " + t.reason) != std::string::npos &&
              (" " + line + " ").find(" " + std::to_string(t.id) + " ") != std::string::npos;
    EXPECT_GE(rows, 1) << out;
    EXPECT_EQ(fs::path(t.run_dir).filename(), "trial-" + std::to_string(t.id));
  }
  EXPECT_EQ(out.find("failed; no val_loss reported"), std::string::npos) << out;
}

TEST_F(Controller, RequeuedWorkerResumesAndCompletes) {
  // 300 steps of at least 15 ms: the run is still going when the signal comes at step 30 however
  // fast or loaded the machine (4 s at the least after it; a sanitizer build need not train
  // thousands of steps: under ThreadSanitizer 600 steps took 86 s).
  const PacedSteps paced(15);
  const int steps = 300;
  auto c = start();
  const std::string url = c->url();
  const int64_t id =
      submit(url, recipe(steps, "[sweep]\nmax_attempts = 1\n[sweep.parameters]\n\"train.seed\" = [7]\n"));
  const int64_t trial = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0]["id"];
  // Wait until it is well under way (a checkpoint exists), then send the signal Slurm sends
  // before a time limit.
  ASSERT_TRUE(wait_for([&] { return get(url, "/api/v1/trials/" + std::to_string(trial))["last_step"].get<int64_t>() >= 30; },
                       std::chrono::seconds(60)));
  json t = get(url, "/api/v1/trials/" + std::to_string(trial));
  const std::string pid = t["attempts"][0]["external_id"].get<std::string>();
  ::killpg(std::stoi(pid.substr(0, pid.find(':'))), SIGUSR1);  // the process group, as Slurm signals the batch step
  ASSERT_TRUE(done(url, id, std::chrono::seconds(240)));
  t = get(url, "/api/v1/trials/" + std::to_string(trial));
  EXPECT_EQ(t["state"], "completed");  // a requeue is not a failure, even with max_attempts = 1
  ASSERT_EQ(t["attempts"].size(), 2u);
  EXPECT_EQ(t["attempts"][0]["state"], "requeue");
  EXPECT_EQ(t["attempts"][0]["exit_code"], 75);
  EXPECT_EQ(t["attempts"][1]["state"], "succeeded");
  json m = get(url, "/api/v1/trials/" + std::to_string(trial) + "/metrics?name=train_loss&max_points=0")["metrics"];
  EXPECT_EQ(m["train_loss"]["steps"].size(), static_cast<size_t>(steps));  // each step once, across both attempts
  c->stop();
}

}  // namespace
}  // namespace precon::orch::testing

namespace precon::orch::testing {
namespace {

TEST(WorkerFacingUrl, AdvertisedBoundOrThisHost) {
  EXPECT_EQ(worker_facing_url("127.0.0.1", 8080, ""), "http://127.0.0.1:8080");
  EXPECT_EQ(worker_facing_url("::1", 8080, ""), "http://[::1]:8080");
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(worker_facing_url("0.0.0.0", 9000, ""), "http://" + std::string(name) + ":9000");
  EXPECT_EQ(worker_facing_url("0.0.0.0", 9000, "http://login01.cluster:8080/"), "http://login01.cluster:8080");
  for (const char* bad : {"login01:8080", "https://", "http://x; rm -rf /", "ftp://x"}) {
    SCOPED_TRACE(bad);
    try {
      worker_facing_url("127.0.0.1", 1, bad);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("advertise URL"), std::string::npos) << e.what();
    }
  }
  ControllerOptions o;
  o.db = std::filesystem::temp_directory_path() / ("precon_adv_" + std::to_string(::getpid()) + ".db");
  o.advertise_url = "login01";
  EXPECT_THROW(orch::Controller c(o), std::invalid_argument);  // refused before anything starts
  std::filesystem::remove(o.db);
}


// A stand-in trainer that leaves its token where the test can read it and exits 0 (the trial
// completes) once the test creates <run dir>/finish. argv: --config C --run-dir D ...
std::string write_fake_trainer(const fs::path& dir) {
  const fs::path script = dir / "fake-train.sh";
  std::ofstream(script) << "#!/bin/sh\nprintf '%s\\n' \"$PRECON_TRIAL_TOKEN\" > \"$4/token.txt\"\n"
                           "while [ ! -e \"$4/finish\" ]; do sleep 0.05; done\n";
  fs::permissions(script, fs::perms::owner_all);
  return script.string();
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Reports are checked strictly, the token before anything about the trial is told, and a
// trial's metrics are final once it ended. The database keeps no token.
TEST_F(Controller, ReportsAreStrictTokensComeFirstAndEndedTrialsRefuseThem) {
  const std::string trainer = write_fake_trainer(dir_);
  auto c = start(2, [&](ControllerOptions& o) { o.trainer = trainer; });
  const std::string url = c->url();
  const int64_t id = submit(url, recipe(5, ""));
  const json trial_json = get(url, "/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"][0];
  const int64_t trial = trial_json["id"];
  const fs::path run_dir = get(url, "/api/v1/trials/" + std::to_string(trial))["run_dir"].get<std::string>();
  ASSERT_TRUE(wait_for([&] { return fs::exists(run_dir / "token.txt") && fs::file_size(run_dir / "token.txt") > 1; },
                       std::chrono::seconds(20)));
  std::string token = read_file(run_dir / "token.txt");
  token.pop_back();
  ASSERT_EQ(token.size(), 32u);
  const auto report = [&](const std::string& body, const std::string& with) {
    return post(url, "/api/v1/report", body, with);
  };
  const auto code_of = [](const ClientResponse& r) {
    const json j = json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"]["code"].get<std::string>() : std::string("?");
  };
  const std::string t = std::to_string(trial);
  const std::string now = std::to_string(static_cast<int64_t>(std::time(nullptr)));
  const std::string good_record = R"({"step": 1, "time": )" + now + R"(, "values": {"loss": 2.5}})";
  ClientResponse r = report(R"({"trial": ")" + t + R"(", "records": [)" + good_record + "]}", token);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(report(R"({"trial": )" + t + R"(, "records": []})", token).status, 200);  // an integer id too

  // Ids that only look like this trial's, and steps, times and names that cannot be stored.
  for (const std::string& bad_trial : std::vector<std::string>{"\"" + t + "abc\"", "\" " + t + "\"", "\"+" + t + "\"", t + ".5", "\"" + t + ".0\"",
                                      "\"99999999999999999999\"", "99999999999999999999", "-1", "0", "true", "null"}) {
    r = report(R"({"trial": )" + bad_trial + R"(, "records": [)" + good_record + "]}", token);
    EXPECT_EQ(r.status, 400) << bad_trial << ": " << r.body;
    EXPECT_EQ(code_of(r), "bad_report") << r.body;
  }
  const std::string prefix = R"({"trial": ")" + t + R"(", "records": [)";
  for (const std::string& bad_record : std::vector<std::string>{R"({"step": 18446744073709551615, "values": {"loss": 1}})", R"({"step": 9223372036854775808, "values": {"loss": 1}})",
        R"({"step": -1, "values": {"loss": 1}})", R"({"step": 1.5, "values": {"loss": 1}})",
        R"({"step": "1", "values": {"loss": 1}})", R"({"values": {"loss": 1}})",
        R"({"step": 2, "time": 1e308, "values": {"loss": 1}})", R"({"step": 2, "time": -5, "values": {"loss": 1}})",
        R"({"step": 2, "time": "now", "values": {"loss": 1}})", R"({"step": 2, "values": {"lo\nss": 1}})",
        R"({"step": 2, "values": {"\u001b[31m": 1}})"}) {
    r = report(prefix + bad_record + "]}", token);
    EXPECT_EQ(r.status, 400) << bad_record << ": " << r.body;
    EXPECT_EQ(code_of(r), "bad_report") << r.body;
  }
  // One bad record refuses the whole report: the good one beside it is not stored either.
  r = report(prefix + R"({"step": 3, "values": {"loss": 1}}, {"step": -3, "values": {"loss": 1}}]})", token);
  EXPECT_EQ(r.status, 400) << r.body;
  json metrics = get(url, "/api/v1/trials/" + t + "/metrics?name=loss")["metrics"];
  EXPECT_EQ(metrics["loss"]["steps"], json::array({1})) << metrics.dump();

  // An unknown trial and a wrong token get the same answer; no token is refused before the body.
  const ClientResponse unknown = report(R"({"trial": "999999", "records": []})", token);
  const ClientResponse wrong = report(R"({"trial": ")" + t + R"(", "records": []})", token + "x");
  EXPECT_EQ(unknown.status, 401);
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(unknown.body, wrong.body);
  EXPECT_EQ(report(R"({"trial": ")" + t + R"(", "records": []})", "").status, 401);

  // The token is nowhere in the database files or the API.
  EXPECT_EQ(get(url, "/api/v1/trials/" + t).dump().find(token), std::string::npos);
  for (const char* suffix : {"", "-wal"}) {
    EXPECT_EQ(read_file(dir_.string() + "/precon.db" + suffix).find(token), std::string::npos) << suffix;
  }
  EXPECT_EQ(get(url, "/healthz").dump().find("precon.db"), std::string::npos);

  // Once the trial ended its metrics are final.
  std::ofstream(run_dir / "finish").put('\n');
  ASSERT_TRUE(done(url, id, std::chrono::seconds(30)));
  r = report(prefix + R"({"step": 4, "values": {"loss": 0.5}}]})", token);
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(code_of(r), "trial_finished");
  metrics = get(url, "/api/v1/trials/" + t + "/metrics?name=loss")["metrics"];
  EXPECT_EQ(metrics["loss"]["steps"], json::array({1})) << metrics.dump();

  // Cancelling what has finished is refused, through the API and the CLI, and leaves no event.
  r = post(url, "/api/v1/experiments/" + std::to_string(id) + "/cancel", "", "admin-secret");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(code_of(r), "already_finished");
  EXPECT_EQ(post(url, "/api/v1/trials/" + t + "/cancel", "", "admin-secret").status, 409);
  const std::string cmd = std::string(PRECON_BIN) + " cancel " + std::to_string(id) + " --db " +
                          (dir_ / "precon.db").string() + " --url " + url + " --token admin-secret 2>&1; echo \"exit=$?\"";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    ::pclose(p);
  }
  EXPECT_NE(out.find("already finished"), std::string::npos) << out;
  EXPECT_EQ(out.find("cancel requested"), std::string::npos) << out;
  EXPECT_EQ(out.find("exit=0"), std::string::npos) << out;
  // Kept in a variable: a range-for over a member of a temporary reads freed memory.
  const json events = get(url, "/api/v1/events?limit=10000");
  for (const json& e : events["events"]) EXPECT_NE(e["kind"], "experiment_cancel") << e.dump();
  c->stop();
}

// Names reach logs and terminals: the recipe schema refuses control characters in them however
// they arrive (the recipe, an override, a sweep), and `precon ls` escapes what an older
// controller stored.
TEST_F(Controller, ControlCharactersInNamesAreRefusedOrEscaped) {
  auto c = start();
  const std::string url = c->url();
  std::string text = recipe(5, "");
  text.replace(text.find("name = \"tiny\""), 13, "name = \"a\\nprecon: forged \\u001b[31m\"");
  ClientResponse r = post(url, "/api/v1/experiments", json{{"recipe", text}}.dump(), "admin-secret");
  EXPECT_EQ(r.status, 400) << r.body;
  r = post(url, "/api/v1/experiments",
           json{{"recipe", recipe(5, "")}, {"overrides", {"experiment.name=x\x1b[2Jy"}}}.dump(), "admin-secret");
  EXPECT_EQ(r.status, 400) << r.body;
  r = post(url, "/api/v1/experiments",
           json{{"recipe", recipe(5, "[sweep.parameters]\n\"experiment.name\" = [\"ok\", \"b\\u0007\"]\n")}}.dump(),
           "admin-secret");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(get(url, "/api/v1/experiments")["experiments"].empty());
  c->stop();
  c.reset();
  {
    Store store(dir_ / "precon.db");
    ExperimentRow e;
    e.name = "evil\x1b[2J\rname\nID  forged\a";
    e.objective_metric = "val_loss";
    e.objective_mode = "min";
    e.max_concurrent = 1;
    e.max_attempts = 1;
    e.state = ExperimentState::completed;
    store.create_experiment(e, {});
  }
  const std::string out = cli("ls");
  EXPECT_NE(out.find("evil\\x1b[2J\\rname\\nID  forged\\x07"), std::string::npos) << out;
  for (char ch : {'\x1b', '\r', '\a'}) EXPECT_EQ(out.find(ch), std::string::npos) << out;
}

}  // namespace
}  // namespace precon::orch::testing
