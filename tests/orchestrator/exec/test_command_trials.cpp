// Trials that run any program, end to end: real programs (a PyTorch training script, shell and
// Python scripts) run by a live controller: their metrics.jsonl against what the store holds,
// requeue and resume, pruning by SIGTERM and by SIGKILL after the grace period, the program's
// environment and the report API, a controller restart mid-run, and programs that fail in each way.
#include <sys/stat.h>

#include <map>
#include <set>

#include "orchestrator/recipe/command.h"
#include "tests/orchestrator/support/cli_fixture.h"

namespace precon::orch::testing {
namespace {

using nlohmann::json;
using Points = std::map<std::pair<std::string, int64_t>, double>;  // (metric, step) -> value

// The reference: every numeric value of every line of a metrics.jsonl that is a record, the
// later line winning, read here without the controller's code.
Points file_points(const fs::path& path) {
  Points out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    for (const auto& [name, value] : j.items())
      if (name != "step" && name != "time" && value.is_number()) out[{name, j["step"].get<int64_t>()}] = value.get<double>();
  }
  return out;
}

Points store_points(const Store& store, int64_t trial) {
  Points out;
  for (const std::string& name : store.metric_names(trial))
    for (const MetricPoint& p : store.metrics(trial, name)) out[{name, p.step}] = p.value;
  return out;
}

class CommandTrials : public CliFixture {
 protected:
  std::unique_ptr<orch::Controller> start(const std::function<void(ControllerOptions&)>& adjust = nullptr) {
    ControllerOptions o = controller_options(2);
    if (adjust) adjust(o);
    auto c = std::make_unique<orch::Controller>(o);
    c->start();
    return c;
  }
  // An executable file in the test's directory.
  std::string program(const std::string& name, const std::string& text) const {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    fs::permissions(p, fs::perms::owner_all);
    return p.string();
  }
  static std::string torch_script() { return std::string(PRECON_SOURCE_DIR) + "/recipes/command_torch.py"; }
  // The experiment's trials by their parameters' JSON text.
  static std::map<std::string, TrialRow> by_params(const Store& store, int64_t experiment) {
    std::map<std::string, TrialRow> out;
    for (const TrialRow& t : store.trials(experiment)) out[json::parse(t.params_json).dump()] = t;
    return out;
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_F(CommandTrials, ATorchSweepThroughPreconRunIsStoredAsItsMetricsFilesSay) {
  // Two learning rates, each run straight through and preempted after step 10 (exit 75, then
  // resumed with PRECON_RESUME=1 from its checkpoint); full-batch SGD, so the resumed curve must
  // equal the one never interrupted, bit for bit.
  std::ofstream(dir_ / "torch.toml") << "[experiment]\nname = \"torch\"\n[trial]\ncommand = [\"" << PRECON_PYTHON
                                     << "\", \"" << torch_script()
                                     << "\", \"--lr\", \"{lr}\", \"--steps\", \"24\", \"--preempt-at\", \"{preempt_at}\"]\n"
                                        "[train]\nthreads = 1\nsteps = 24\n[sweep]\nmax_concurrent = 2\n"
                                        "[sweep.parameters]\nlr = [0.1, 0.3]\npreempt_at = [0, 10]\n";
  const test::CommandResult r = precon("run torch.toml --db run.db --runs runs --quiet --cpus 2");
  ASSERT_EQ(r.status, 0) << r.output;
  Store store(dir_ / "run.db");
  const std::map<std::string, TrialRow> trials = by_params(store, 1);
  ASSERT_EQ(trials.size(), 4u);
  for (const auto& [params, t] : trials) {
    EXPECT_EQ(t.state, TrialState::completed) << params << ": " << t.reason;
    EXPECT_EQ(t.reason, "the program exited 0");
    const Points file = file_points(fs::path(t.run_dir) / "metrics.jsonl");
    EXPECT_EQ(file.size(), 96u) << params;  // loss, val_loss, step_seconds and flops at steps 1..24
    EXPECT_EQ(store_points(store, t.id), file) << params;
    const std::vector<AttemptRow> attempts = store.attempts(t.id);
    if (json::parse(params)["preempt_at"] == 0) {
      EXPECT_EQ(attempts.size(), 1u) << params;
      continue;
    }
    ASSERT_EQ(attempts.size(), 2u) << params;
    EXPECT_EQ(attempts[0].state, AttemptState::requeue);
    EXPECT_EQ(attempts[0].exit_code, 75);
    EXPECT_EQ(attempts[1].state, AttemptState::succeeded);
    EXPECT_TRUE(contains(test::slurp(fs::path(t.run_dir) / "stderr.log"), "resumed from step 10")) << params;
  }
  // The losses, that is: step_seconds are the clock's.
  auto losses = [&](int64_t trial) {
    Points out;
    for (const char* name : {"loss", "val_loss"})
      for (const MetricPoint& p : store.metrics(trial, name)) out[{name, p.step}] = p.value;
    return out;
  };
  for (const char* lr : {"0.1", "0.3"}) {
    const TrialRow& straight = trials.at(json::parse(std::string("{\"lr\": ") + lr + ", \"preempt_at\": 0}").dump());
    const TrialRow& resumed = trials.at(json::parse(std::string("{\"lr\": ") + lr + ", \"preempt_at\": 10}").dump());
    EXPECT_EQ(losses(resumed.id), losses(straight.id)) << "lr " << lr;
    EXPECT_EQ(losses(resumed.id).size(), 48u);
  }
  EXPECT_NE(losses(trials.begin()->second.id), losses(trials.rbegin()->second.id));
}

TEST_F(CommandTrials, AshaPrunesAProgramBySigterm) {
  // One at a time: the first learning rate sets each rung; the far smaller ones fall behind it
  // at step 4 (val_loss 0.29 against 0.82 and 0.84 there) and get SIGTERM, on which the script
  // checkpoints and exits 75. The grace before SIGKILL is 30 s: on a loaded machine torch's
  // checkpoint and exit took longer than the fixture's 2 s (the program was killed mid-save), and a
  // stop that waited for the grace instead of signalling at once would let the 4-s trial complete.
  auto c = start([](ControllerOptions& o) { o.stop_grace = std::chrono::milliseconds(30000); });
  const std::string text = std::string("[trial]\ncommand = [\"") + PRECON_PYTHON + "\", \"" + torch_script() +
                           "\", \"--lr\", \"{lr}\", \"--steps\", \"40\", \"--step-time\", \"0.1\"]\n"
                           "[train]\nthreads = 1\n[sweep]\nmax_concurrent = 1\n[sweep.parameters]\nlr = [0.3, 0.001, 0.0003]\n"
                           "[sweep.early_stop]\nmethod = \"asha\"\nmin_step = 4\nreduction_factor = 2\n";
  const int64_t id = submit(c->url(), text);
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(180)));
  const std::map<std::string, TrialRow> trials = by_params(c->store(), id);
  ASSERT_EQ(trials.size(), 3u);
  EXPECT_EQ(trials.at("{\"lr\":0.3}").state, TrialState::completed) << trials.at("{\"lr\":0.3}").reason;
  for (const char* lr : {"{\"lr\":0.001}", "{\"lr\":0.0003}"}) {
    const TrialRow& t = trials.at(lr);
    EXPECT_EQ(t.state, TrialState::pruned) << lr << ": " << t.reason;
    EXPECT_TRUE(contains(t.reason, "ASHA")) << t.reason;
    EXPECT_GE(t.last_step, 4);
    // SIGTERM at the decision, not after the grace a report-answer stop waits.
    EXPECT_LE(t.last_step, 14);
    const std::vector<AttemptRow> attempts = c->store().attempts(t.id);
    ASSERT_EQ(attempts.size(), 1u);
    EXPECT_EQ(attempts[0].exit_code, 75) << attempts[0].detail;  // it heard SIGTERM: no SIGKILL was needed
    EXPECT_TRUE(contains(test::slurp(fs::path(t.run_dir) / "stderr.log"), "(SIGTERM); exiting 75"));
    EXPECT_EQ(store_points(c->store(), t.id), file_points(fs::path(t.run_dir) / "metrics.jsonl"));
  }
  c->stop();
}

TEST_F(CommandTrials, BohbPrunesAsOptunasHyperbandDoesOnTheSameCurves) {
  // sweep.method = "bohb": TPE proposes x, Hyperband's brackets prune. The program's loss is
  // (x - 0.3)² + 1/step. One trial at a time, so Optuna's HyperbandPruner, fed the curves the
  // store holds in trial order, must prune the same trials at the same steps in the same brackets.
  // 27 steps from min_step 1 at factor 3: log(27)/log(3) is 3.0000000000000004 in doubles, 4 brackets.
  auto c = start();
  const std::string prog = program("curve.sh",
                                   "#!/bin/sh\ni=0\nwhile [ $i -lt 27 ]; do\n  i=$((i + 1))\n"
                                   "  v=$(awk -v x=\"$1\" -v s=$i 'BEGIN { printf \"%.6f\", (x - 0.3) * (x - 0.3) + 1.0 / s }')\n"
                                   "  echo \"{\\\"step\\\": $i, \\\"val_loss\\\": $v}\" >> metrics.jsonl\n  sleep 0.01\ndone\n");
  const std::string text = "[experiment]\nname = \"hb\"\n[trial]\ncommand = [\"" + prog + "\", \"{x}\"]\n"
                           "[train]\nsteps = 27\nthreads = 1\n[sweep]\nmethod = \"bohb\"\nsamples = 12\nseed = 3\n"
                           "max_concurrent = 1\n[sweep.tpe]\nn_startup_trials = 5\n"
                           "[sweep.parameters]\nx = { uniform = [0.0, 1.0] }\n"
                           "[sweep.early_stop]\nmin_step = 1\nreduction_factor = 3\n";
  const int64_t id = submit(c->url(), text);
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(180)));
  std::vector<TrialRow> trials = c->store().trials(id);
  ASSERT_EQ(trials.size(), 12u);
  std::sort(trials.begin(), trials.end(), [](const TrialRow& a, const TrialRow& b) { return a.index < b.index; });
  std::map<int64_t, json> decisions;  // trial id -> its early_stop event's data
  for (const EventRow& e : c->store().events_since(0, 10000, id))
    if (e.kind == "early_stop") decisions[e.trial_id] = json::parse(e.data_json);
  // The curves the store holds, each up to its stop decision (what the pruner saw).
  json spec = {{"study_name", "hb"}, {"min_step", 1}, {"max_step", 27}, {"reduction_factor", 3}, {"mode", "min"},
               {"trials", json::array()}};
  for (const TrialRow& t : trials) {
    json points = json::array();
    for (const MetricPoint& p : c->store().metrics(t.id, "val_loss")) points.push_back({p.step, p.value});
    spec["trials"].push_back(points);
  }
  std::ofstream(dir_ / "curves.json") << spec.dump();
  const test::CommandResult r = test::run_command(std::string(PRECON_PYTHON) + " " + PRECON_SOURCE_DIR +
                                                  "/tests/orchestrator/sched/hyperband_replay.py " + (dir_ / "curves.json").string());
  ASSERT_EQ(r.status, 0) << r.output;
  const json optuna = json::parse(r.output);
  int pruned = 0;
  for (size_t i = 0; i < trials.size(); ++i) {
    const TrialRow& t = trials[i];
    SCOPED_TRACE("trial " + std::to_string(i) + " " + t.params_json + ": " + t.reason);
    const json& at = optuna["pruned_at"][i];
    if (at.is_null()) {
      EXPECT_EQ(t.state, TrialState::completed);
      EXPECT_FALSE(decisions.contains(t.id));
      continue;
    }
    ++pruned;
    EXPECT_EQ(t.state, TrialState::pruned);
    ASSERT_TRUE(decisions.contains(t.id));
    EXPECT_EQ(decisions[t.id]["step"], at);
    EXPECT_EQ(decisions[t.id]["bracket"], optuna["brackets"][i]);
    EXPECT_EQ(decisions[t.id]["brackets"], 4);
    EXPECT_TRUE(contains(t.reason, "Hyperband bracket")) << t.reason;
  }
  EXPECT_GE(pruned, 3) << "a sweep that prunes little proves little";
  EXPECT_LT(pruned, 12);
  c->stop();
}

TEST_F(CommandTrials, AProgramThatIgnoresSigtermIsKilledAfterTheGraceAndPruned) {
  // The second trial reports a worse value and ignores SIGTERM: SIGKILL follows the 1-s grace.
  auto c = start([](ControllerOptions& o) { o.stop_grace = std::chrono::milliseconds(1000); });
  const std::string prog = program("stubborn.sh",
                                   "#!/bin/sh\ntrap '' TERM\ni=0\nwhile [ $i -lt $2 ]; do\n  i=$((i + 1))\n"
                                   "  echo \"{\\\"step\\\": $i, \\\"val_loss\\\": $1}\" >> metrics.jsonl\n  sleep 0.05\ndone\n");
  const std::string text = "[trial]\ncommand = [\"" + prog + "\", \"{value}\", \"{steps}\"]\n[sweep]\nmax_concurrent = 1\n"
                           "[[sweep.grid]]\nvalue = [1]\nsteps = [6]\n[[sweep.grid]]\nvalue = [5]\nsteps = [600]\n"
                           "[sweep.early_stop]\nmethod = \"asha\"\nmin_step = 2\nreduction_factor = 2\n";
  const int64_t id = submit(c->url(), text);
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(60)));
  const std::map<std::string, TrialRow> trials = by_params(c->store(), id);
  EXPECT_EQ(trials.at("{\"steps\":6,\"value\":1}").state, TrialState::completed);
  const TrialRow& t = trials.at("{\"steps\":600,\"value\":5}");
  EXPECT_EQ(t.state, TrialState::pruned) << t.reason;
  EXPECT_LT(t.last_step, 600);
  const std::vector<AttemptRow> attempts = c->store().attempts(t.id);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].state, AttemptState::killed) << attempts[0].detail;
  EXPECT_TRUE(contains(attempts[0].detail, "SIGKILL")) << attempts[0].detail;
  double decided = 0;
  for (const EventRow& e : c->store().events_since(0, 1000, id))
    if (e.kind == "early_stop" && e.trial_id == t.id) decided = e.time;
  ASSERT_GT(decided, 0);
  EXPECT_GE(attempts[0].ended_at - decided, 1.0);  // the grace was given
  EXPECT_LT(attempts[0].ended_at - decided, 10.0);
  c->stop();
}

TEST_F(CommandTrials, AProgramSeesItsTrialAndReportsThroughTheApi) {
  auto c = start();
  const std::string prog = program("seen.py", R"(import json, os, sys, urllib.request
names = ["PRECON_RUN_DIR", "PRECON_TRIAL_ID", "PRECON_PARAMS", "PRECON_PARAMS_FILE", "PRECON_CONFIG",
         "PRECON_REPORT_URL", "PRECON_TRIAL_TOKEN", "PRECON_RESUME", "PRECON_ATTEMPT", "OMP_NUM_THREADS"]
seen = {"env": {n: os.environ.get(n) for n in names}, "cwd": os.getcwd(), "argv": sys.argv[1:],
        "params_file": open(os.environ["PRECON_PARAMS_FILE"]).read(), "config": open(os.environ["PRECON_CONFIG"]).read()}
json.dump(seen, open("seen.json", "w"))
# Step 500 is past the default train.steps (200), which bounds precon-train's reports only.
body = {"trial": os.environ["PRECON_TRIAL_ID"], "records": [{"step": 500, "time": 1.0, "values": {"val_loss": 0.75}}]}
request = urllib.request.Request(os.environ["PRECON_REPORT_URL"], data=json.dumps(body).encode(), headers={
    "Content-Type": "application/json", "Authorization": "Bearer " + os.environ["PRECON_TRIAL_TOKEN"]})
print(urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request).read().decode())
)");
  const std::string text = std::string("[trial]\ncommand = [\"") + PRECON_PYTHON + "\", \"" + prog +
                           "\", \"--x={x}\", \"{name}\"]\n[train]\nthreads = 1\n[sweep.parameters]\nx = [0.5]\n"
                           "name = [\"n 1\"]\n\"optimizer.lr\" = [0.02]\n";
  const int64_t id = submit(c->url(), text);
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(60)));
  const TrialRow t = c->store().trials(id).at(0);
  ASSERT_EQ(t.state, TrialState::completed) << t.reason;
  const json seen = json::parse(test::slurp(fs::path(t.run_dir) / "seen.json"));
  const json params = json::parse(R"({"x": 0.5, "name": "n 1", "optimizer.lr": 0.02})");
  EXPECT_EQ(fs::canonical(seen["cwd"].get<std::string>()), fs::canonical(t.run_dir));
  EXPECT_EQ(seen["argv"], json::parse(R"(["--x=0.5", "n 1"])"));
  const json& env = seen["env"];
  EXPECT_EQ(env["PRECON_RUN_DIR"], t.run_dir);
  EXPECT_EQ(env["PRECON_TRIAL_ID"], std::to_string(t.id));
  EXPECT_EQ(json::parse(env["PRECON_PARAMS"].get<std::string>()), params);
  EXPECT_EQ(env["PRECON_PARAMS_FILE"], (fs::path(t.run_dir) / "params.json").string());
  EXPECT_EQ(json::parse(seen["params_file"].get<std::string>()), params);
  EXPECT_EQ(env["PRECON_CONFIG"], (fs::path(t.run_dir) / "config.toml").string());
  const StoredTrial stored = parse_stored_trial(seen["config"].get<std::string>(), "config.toml");
  EXPECT_EQ(stored.command.back(), "n 1");
  EXPECT_DOUBLE_EQ(stored.config.optimizer.lr, 0.02);
  EXPECT_EQ(env["PRECON_REPORT_URL"], c->url() + "/api/v1/report");
  EXPECT_EQ(env["PRECON_TRIAL_TOKEN"].get<std::string>().size(), 32u);
  EXPECT_TRUE(env["PRECON_RESUME"].is_null());
  EXPECT_EQ(env["PRECON_ATTEMPT"], "1");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  const std::optional<MetricPoint> p = c->store().last_metric(t.id, "val_loss");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 500);
  EXPECT_EQ(p->value, 0.75);
  c->stop();
}

TEST_F(CommandTrials, EachWayAProgramFailsIsNamedOnItsTrialAndCostsNoOther) {
  const std::string prog = program("cases.sh", R"(#!/bin/sh
case "$1" in
  good) printf '{"step": 1, "val_loss": 0.5}\n{"step": 2, "val_loss": 0.25}\n' >> metrics.jsonl ;;
  exit3) echo "starting" >&2; echo "boom: the data loader died" >&2; exit 3 ;;
  exit2) echo "config error: --lr must be positive" >&2; exit 2 ;;
  malformed) printf '{"step": 1, "val_loss": 0.5}\nnot json\n{"val_loss": 0.4}\n{"step": 3, "val_loss": "high", "loss": 0.7}\n{"step": 4, "val_loss": 0.125}' >> metrics.jsonl ;;
  silent) echo "done" ;;
  other) echo '{"step": 1, "loss": 0.3}' >> metrics.jsonl ;;
esac
)");
  auto c = start();
  const std::string text = "[trial]\ncommand = [\"{prog}\", \"{case}\"]\n[sweep]\nmax_attempts = 2\n"
                           "[[sweep.grid]]\nprog = [\"/nonexistent/precon-prog\"]\ncase = [\"good\"]\n"
                           "[[sweep.grid]]\nprog = [\"" + prog + "\"]\ncase = [\"good\", \"exit3\", \"exit2\", \"malformed\", "
                           "\"silent\", \"other\"]\n";
  const int64_t id = submit(c->url(), text);
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(60)));
  std::map<std::string, TrialRow> trials;
  for (const TrialRow& t : c->store().trials(id)) {
    const json p = json::parse(t.params_json);
    trials[p["prog"] == prog ? p["case"].get<std::string>() : "missing"] = t;
  }
  ASSERT_EQ(trials.size(), 7u);
  const Store& store = c->store();
  auto attempts = [&](const std::string& name) { return store.attempts(trials.at(name).id).size(); };

  EXPECT_EQ(trials.at("missing").state, TrialState::failed);
  EXPECT_TRUE(contains(trials.at("missing").reason, "program not found or not executable: /nonexistent/precon-prog"))
      << trials.at("missing").reason;
  EXPECT_EQ(attempts("missing"), 0u);

  EXPECT_EQ(trials.at("good").state, TrialState::completed) << trials.at("good").reason;
  EXPECT_EQ(store_points(store, trials.at("good").id), (Points{{{"val_loss", 1}, 0.5}, {{"val_loss", 2}, 0.25}}));

  EXPECT_EQ(trials.at("exit3").state, TrialState::failed);
  EXPECT_TRUE(contains(trials.at("exit3").reason, "boom: the data loader died (exit code 3, after 2 failed attempt(s))"))
      << trials.at("exit3").reason;
  EXPECT_EQ(attempts("exit3"), 2u);

  EXPECT_EQ(trials.at("exit2").state, TrialState::failed);
  EXPECT_TRUE(contains(trials.at("exit2").reason, "config error: --lr must be positive (exit code 2: configuration error, not retried)"))
      << trials.at("exit2").reason;
  EXPECT_EQ(attempts("exit2"), 1u);

  // The good lines and values are kept, the last one without its newline too; each bad one named.
  const TrialRow& malformed = trials.at("malformed");
  EXPECT_EQ(malformed.state, TrialState::completed) << malformed.reason;
  EXPECT_EQ(store_points(store, malformed.id),
            (Points{{{"val_loss", 1}, 0.5}, {{"loss", 3}, 0.7}, {{"val_loss", 4}, 0.125}}));
  EXPECT_TRUE(contains(malformed.reason, "3 line(s) or value(s) of metrics.jsonl skipped, the first: metrics.jsonl line 2: "
                                         "not a JSON object (\"not json\"); skipped"))
      << malformed.reason;
  std::set<std::string> skipped;
  for (const EventRow& e : store.events_since(0, 1000, id))
    if (e.kind == "metrics_skipped" && e.trial_id == malformed.id) skipped.insert(e.message);
  EXPECT_FALSE(skipped.empty());

  EXPECT_EQ(trials.at("silent").state, TrialState::failed);
  EXPECT_TRUE(contains(trials.at("silent").reason, "never reported the objective val_loss (it reported no metric)"))
      << trials.at("silent").reason;
  EXPECT_EQ(attempts("silent"), 1u);
  EXPECT_EQ(trials.at("other").state, TrialState::failed);
  EXPECT_TRUE(contains(trials.at("other").reason, "never reported the objective val_loss (it reported loss)"))
      << trials.at("other").reason;
  EXPECT_EQ(store.experiment(id)->state, ExperimentState::completed);
  c->stop();
}

TEST_F(CommandTrials, ARestartedControllerStoresEachLineOnce) {
  const std::string prog = program("slow.sh",
                                   "#!/bin/sh\ni=0\nwhile [ $i -lt 30 ]; do\n  i=$((i + 1))\n"
                                   "  echo \"{\\\"step\\\": $i, \\\"val_loss\\\": $i.5}\" >> metrics.jsonl\n  sleep 0.1\ndone\n");
  auto c = start();
  const int64_t id = submit(c->url(), "[trial]\ncommand = [\"" + prog + "\"]\n");
  ASSERT_TRUE(wait_for([&] { return c->store().metric_count(1) >= 5; }, std::chrono::seconds(30)));
  c->stop();
  c.reset();  // the program runs on, and writes lines nobody reads
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  c = start();
  ASSERT_TRUE(done(c->url(), id, std::chrono::seconds(60)));
  const TrialRow t = *c->store().trial(1);
  EXPECT_EQ(t.state, TrialState::completed) << t.reason;
  const Points file = file_points(fs::path(t.run_dir) / "metrics.jsonl");
  ASSERT_EQ(file.size(), 30u);
  EXPECT_EQ(store_points(c->store(), t.id), file);
  EXPECT_EQ(c->store().metric_count(t.id), 30);
  EXPECT_EQ(endings_and_adoptions(get(c->url(), "/api/v1/events?limit=1000"), t.id).adoptions, 1);
  c->stop();
}

}  // namespace
}  // namespace precon::orch::testing
