// The Slurm executor against a real Slurm cluster (deploy/slurm/cluster.sh, started by a ctest
// fixture): a sweep as one job array, cancel, preemption and time-limit warnings that checkpoint,
// requeue and resume to the same loss curve as an uninterrupted run, sbatch errors, a controller
// killed with SIGKILL mid-sweep, a two-node job's ranks, a data-parallel trial over both nodes as one
// MPI job (run, preempted and resumed), a PyTorch script as the trial's program preempted and
// resumed, and the 100-trial submit time.
// Without a reachable cluster these tests are skipped, except under CI=true, where they fail.
#include <regex>
#include <set>

#include "orchestrator/sched/scheduler.h"
#include "orchestrator/store/token_hash.h"
#include "tests/common/test_util.h"
#include "tests/orchestrator/support/serve_process.h"
#include "tests/orchestrator/support/slurm_cluster_fixture.h"

namespace precon::orch::testing {
namespace {

TEST_F(SlurmCluster, FourTrialSweepRunsAsOneThrottledJobArray) {
  auto c = start();
  const std::string url = c->url();
  // Trials of a second or two, so that the throttled tasks are seen waiting.
  const int steps = 3000;
  const int64_t id = submit(url, slurm_recipe(steps, "", "[sweep]\nmax_concurrent = 2\n[sweep.parameters]\n"
                                                      "\"optimizer.lr\" = [0.001, 0.002, 0.003, 0.004]\n"));
  ASSERT_TRUE(done(url, id));
  const json ts = trials(url, id);
  ASSERT_EQ(ts.size(), 4u);
  std::set<std::string> arrays, ids;
  for (const json& x : ts) {
    const json t = trial(url, x["id"]);
    EXPECT_EQ(t["state"], "completed") << t.dump();
    ASSERT_EQ(t["attempts"].size(), 1u) << t.dump();
    EXPECT_EQ(t["attempts"][0]["executor"], "slurm");
    EXPECT_EQ(t["attempts"][0]["state"], "succeeded");
    const std::string ext = t["attempts"][0]["external_id"];
    arrays.insert(ext.substr(0, ext.find('_')));
    ids.insert(ext);
    EXPECT_EQ(losses(url, x["id"])["steps"].size(), static_cast<size_t>(steps));
    // The trial's own script names its job after the trial's id (the array job takes the experiment's name).
    std::ifstream script(fs::path(t["run_dir"].get<std::string>()) / "slurm-1.sh");
    const std::string text((std::istreambuf_iterator<char>(script)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("#SBATCH --job-name=precon-tiny_trial-" + std::to_string(x["id"].get<int64_t>()) + "\n"),
              std::string::npos) << text;
  }
  EXPECT_EQ(arrays.size(), 1u);  // one sbatch for the sweep
  EXPECT_EQ(ids.size(), 4u);
  // Slurm's states reach the events (a pending task with its reason), and the nodes each attempt ran on.
  int throttled = 0, on_node = 0;
  const json events = get(url, "/api/v1/events?limit=10000&experiment=" + std::to_string(id));
  for (const json& e : events["events"]) {
    if (e["kind"] != "attempt_state") continue;
    const std::string m = e["message"];
    throttled += m.find(" PENDING (JobArrayTaskLimit)") != std::string::npos;
    on_node += m.find(" on n") != std::string::npos;
  }
  EXPECT_GE(throttled, 1);  // a task held back by the throttle, with Slurm's reason
  EXPECT_GE(on_node, 4);
  for (const json& x : ts) {
    const std::string nodes = trial(url, x["id"])["attempts"][0]["nodes"];
    EXPECT_TRUE(nodes == "n1" || nodes == "n2") << nodes;
  }
  // The array script keeps the throttle: at most max_concurrent tasks at once.
  const fs::path root = fs::path(trial(url, ts[0]["id"])["run_dir"].get<std::string>()).parent_path();
  int scripts = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.path().filename().string().rfind("slurm-array-", 0) != 0 || e.path().extension() != ".sh") continue;
    ++scripts;
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("#SBATCH --array=0-3%2\n"), std::string::npos) << text;
  }
  EXPECT_EQ(scripts, 1);
  c->stop();
}

// sweep.method = "tpe" on Slurm: trials made as slots free up, each launched as its own job (or
// a small array), two at a time, every proposal a different point.
TEST_F(SlurmCluster, TpeSweepRunsItsSamplesTwoAtATime) {
  auto c = start();
  const std::string url = c->url();
  const fs::path prog = dir_ / "objective.py";
  std::ofstream(prog) << "import json, os\np = json.loads(os.environ['PRECON_PARAMS'])\n"
                         "with open('metrics.jsonl', 'a') as f:\n"
                         "    f.write(json.dumps({'step': 1, 'val_loss': (p['x'] - 1) ** 2 + p['k']}) + '\\n')\n";
  const int64_t id = submit(url, "[trial]\ncommand = [\"" + std::string(PRECON_PYTHON) + "\", \"" + prog.string() +
                                     "\"]\n[resources]\nexecutor = \"slurm\"\n[sweep]\nmethod = \"tpe\"\nsamples = 6\n"
                                     "max_concurrent = 2\n[sweep.tpe]\nn_startup_trials = 3\n[sweep.parameters]\n"
                                     "x = { uniform = [-3.0, 3.0] }\nk = { int_uniform = [0, 4] }\n");
  ASSERT_TRUE(done(url, id, seconds(180)));
  const json ts = trials(url, id);
  ASSERT_EQ(ts.size(), 6u);
  std::set<std::string> points;
  for (const json& x : ts) {
    const json t = trial(url, x["id"]);
    EXPECT_EQ(t["state"], "completed") << t.dump();
    ASSERT_EQ(t["attempts"].size(), 1u) << t.dump();
    EXPECT_EQ(t["attempts"][0]["executor"], "slurm");
    points.insert(t["params"].dump());
  }
  EXPECT_EQ(points.size(), 6u);
  c->stop();
}

TEST_F(SlurmCluster, CancelEndsARunningTrialAndItsJob) {
  auto c = start();
  const std::string url = c->url();
  const int64_t id = submit(url, slurm_recipe(400000, "", ""));
  const int64_t tid = trials(url, id)[0]["id"];
  ASSERT_TRUE(wait_for([&] { return trial(url, tid)["last_step"].get<int64_t>() > 20; }, seconds(60)));
  const std::string job = trial(url, tid)["attempts"][0]["external_id"];
  ASSERT_EQ(post(url, "/api/v1/trials/" + std::to_string(tid) + "/cancel", "{}", "admin-secret").status, 200);
  ASSERT_TRUE(done(url, id, seconds(60)));
  const json t = trial(url, tid);
  EXPECT_EQ(t["state"], "cancelled");
  EXPECT_EQ(t["attempts"].size(), 1u) << t.dump();
  // Not requeued, not left behind.
  EXPECT_TRUE(wait_for([&] { return active_state(job).empty(); }, seconds(30))) << active_state(job);
  c->stop();
}

TEST_F(SlurmCluster, PreemptionSignalCheckpointsRequeuesAndResumesTheSameCurve) {
  auto c = start();
  const std::string url = c->url();
  const int steps = 200;  // a checkpoint every step: a few seconds, so the signal lands mid-run
  const int64_t id = submit(url, slurm_recipe(steps, "", "[sweep]\nmax_attempts = 1\n[sweep.parameters]\n"
                                                         "\"train.checkpoint_every\" = [1]\n"
                                                         "\"train.keep_checkpoints\" = [2]\n"));
  const int64_t tid = trials(url, id)[0]["id"];
  auto reference = start_reference(url, tid);
  ASSERT_TRUE(wait_for([&] { return trial(url, tid)["last_step"].get<int64_t>() >= 20; }, seconds(60)));
  const std::string job = trial(url, tid)["attempts"][0]["external_id"];
  CommandResult r = slurm({"scancel", "--signal=USR1", "--batch", job});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(done(url, id, seconds(120)));
  expect_requeued_once(url, tid, steps, std::move(reference));
  EXPECT_EQ(trial(url, tid)["attempts"][0]["external_id"], job);
  c->stop();
}

TEST_F(SlurmCluster, AProgramsTrialIsPreemptedRequeuedAndResumesTheSameCurve) {
  // recipes/command_torch.py as the program: SIGUSR1 (a preemption notice) reaches it through the
  // job script and srun; it checkpoints and exits 75, the job requeues itself, and the next run
  // resumes with PRECON_RESUME=1 in its run directory.
  const std::string script = std::string(PRECON_SOURCE_DIR) + "/recipes/command_torch.py";
  const int steps = 60;
  const std::string args = "\"--lr\", \"0.3\", \"--steps\", \"" + std::to_string(steps) + "\"";
  auto c = start();
  const std::string url = c->url();
  const int64_t id = submit(url, "[trial]\ncommand = [\"" + std::string(PRECON_PYTHON) + "\", \"" + script + "\", " + args +
                                     ", \"--step-time\", \"0.1\"]\n[train]\nthreads = 1\n[resources]\nexecutor = \"slurm\"\n"
                                     "[sweep]\nmax_attempts = 1\n[sweep.parameters]\nseed = [0]\n");
  const int64_t tid = trials(url, id)[0]["id"];
  // The reference: the same script run straight through, here.
  const fs::path ref = dir_ / "reference";
  fs::create_directories(ref);
  CommandResult r = run_command({"/bin/sh", "-c", "cd '" + ref.string() + "' && PRECON_RUN_DIR=. '" + PRECON_PYTHON + "' '" +
                                                      script + "' --lr 0.3 --steps " + std::to_string(steps)},
                                seconds(120));
  ASSERT_TRUE(r.ok()) << r.message();
  std::map<int64_t, double> want;
  std::ifstream in(ref / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    want[j["step"].get<int64_t>()] = j["val_loss"].get<double>();
  }
  ASSERT_EQ(want.size(), static_cast<size_t>(steps));
  ASSERT_TRUE(wait_for([&] { return trial(url, tid)["last_step"].get<int64_t>() >= 10; }, seconds(90)))
      << job_text(trial(url, tid)["attempts"][0]["external_id"]);
  const std::string job = trial(url, tid)["attempts"][0]["external_id"];
  r = slurm({"scancel", "--signal=USR1", "--batch", job});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(done(url, id, seconds(120)));
  const json t = trial(url, tid);
  EXPECT_EQ(t["state"], "completed") << t.dump();
  ASSERT_EQ(t["attempts"].size(), 2u) << t.dump();
  EXPECT_EQ(t["attempts"][0]["state"], "requeue");
  EXPECT_EQ(t["attempts"][0]["exit_code"], 75);
  EXPECT_EQ(t["attempts"][1]["external_id"], job);
  const std::string log = test::slurp(fs::path(t["run_dir"].get<std::string>()) / "stderr.log");
  EXPECT_NE(log.find("(SIGUSR1); exiting 75"), std::string::npos) << log;
  EXPECT_NE(log.find("resumed from step"), std::string::npos) << log;
  const json m = get(url, "/api/v1/trials/" + std::to_string(tid) + "/metrics?name=val_loss&max_points=0")["metrics"]["val_loss"];
  ASSERT_EQ(m["steps"].size(), static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    ASSERT_EQ(m["steps"][i], i + 1);
    ASSERT_EQ(m["values"][i].get<double>(), want.at(i + 1)) << "step " << i + 1;
  }
  c->stop();
}

TEST_F(SlurmCluster, TimeLimitWarningCheckpointsRequeuesAndResumesTheSameCurve) {
  // A one-minute limit and a 60 s lead: Slurm sends the warning at the first time-limit check of
  // each run (every 30 s). The first run waits in its setup line, so that the warning lands there:
  // the trainer learns of it at its start (PRECON_STOP_SIGNAL; a signal then could kill srun or
  // the trainer before they handle it, exit 138), checkpoints after its first step and asks to be
  // requeued. A later run may be warned again before it ends (its check comes 0-30 s after its
  // start); it then checkpoints and requeues too, so the runs are two or more, all of one job.
  auto c = start(60);
  const std::string url = c->url();
  const int steps = 60;
  const int64_t id = submit(url, slurm_recipe(steps,
                                              "time_limit = \"1\"\nsetup = [\"if [ \\\"${SLURM_RESTART_COUNT:-0}\\\" = 0 ]; "
                                              "then sleep 45 & wait $!; fi\"]\n",
                                              "[sweep]\nmax_attempts = 1\n[sweep.parameters]\n"
                                              "\"train.checkpoint_every\" = [1]\n\"train.keep_checkpoints\" = [2]\n"));
  const int64_t tid = trials(url, id)[0]["id"];
  auto reference = start_reference(url, tid);
  ASSERT_TRUE(done(url, id, seconds(240)));
  const json t = trial(url, tid);
  EXPECT_EQ(t["state"], "completed") << t.dump();
  const json& a = t["attempts"];
  ASSERT_GE(a.size(), 2u) << t.dump();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["external_id"], a[0]["external_id"]) << a.dump();
    EXPECT_EQ(a[i]["state"], i + 1 < a.size() ? "requeue" : "succeeded") << a.dump();
    if (i + 1 < a.size()) {
      EXPECT_EQ(a[i]["exit_code"], 75) << a.dump();
    }
  }
  const std::string log = get(url, "/api/v1/trials/" + std::to_string(tid) + "/logs?stream=stderr&lines=2000")["text"];
  EXPECT_NE(log.find("signal received: checkpointed at step 1;"), std::string::npos) << log;
  EXPECT_EQ(log.find("exit code 138"), std::string::npos) << log;
  expect_same_curve(url, tid, steps, std::move(reference));
  c->stop();
}

TEST_F(SlurmCluster, SbatchErrorsFailTheTrialWithTheReason) {
  auto c = start();
  const std::string url = c->url();
  const int64_t bad_partition = submit(url, slurm_recipe(10, "partition = \"nosuch\"\n", ""));
  const int64_t bad_option = submit(url, slurm_recipe(10, "sbatch_args = [\"--no-such-option\"]\n", ""));
  ASSERT_TRUE(done(url, bad_partition, seconds(30)));
  ASSERT_TRUE(done(url, bad_option, seconds(30)));
  const json p = trials(url, bad_partition)[0];
  EXPECT_EQ(p["state"], "failed");
  EXPECT_NE(p["reason"].get<std::string>().find("sbatch"), std::string::npos) << p.dump();
  EXPECT_NE(p["reason"].get<std::string>().find("nvalid partition"), std::string::npos) << p.dump();
  const json o = trials(url, bad_option)[0];
  EXPECT_EQ(o["state"], "failed");
  EXPECT_NE(o["reason"].get<std::string>().find("no-such-option"), std::string::npos) << o.dump();
  // Rejected at submit, by the recipe's key rules: a hostile partition never reaches sbatch.
  const size_t before = get(url, "/api/v1/experiments")["experiments"].size();
  ClientResponse r = post(url, "/api/v1/experiments",
                          json{{"recipe", slurm_recipe(10, "partition = \"debug\\n#SBATCH --uid=0\"\n", "")}}.dump(),
                          "admin-secret");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("resources.partition"), std::string::npos) << r.body;
  EXPECT_EQ(get(url, "/api/v1/experiments")["experiments"].size(), before);  // nothing stored
  c->stop();
}

TEST_F(SlurmCluster, ConfigErrorFailsAtOnceWithTheTrainersLine) {
  // The real trainer, handed a configuration it rejects, in a Slurm job: exit 2, never retried,
  // and the reason is the line it wrote to the run directory's stderr.log.
  const fs::path wrapper = dir_ / "bad-config-trainer.sh";
  std::ofstream(wrapper) << "#!/bin/sh\nexec " << PRECON_TRAIN_BIN << " \"$@\" --set optimizer.muon.ns_steps=0\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  auto c = start(120, wrapper);
  const std::string url = c->url();
  const int64_t id = submit(url, slurm_recipe(10, "", "[sweep]\nmax_attempts = 3\n[sweep.parameters]\n\"train.seed\" = [7]\n"));
  ASSERT_TRUE(done(url, id, seconds(60)));
  const json t = trial(url, trials(url, id)[0]["id"]);
  EXPECT_EQ(t["state"], "failed");
  ASSERT_EQ(t["attempts"].size(), 1u) << t.dump();
  EXPECT_EQ(t["attempts"][0]["exit_code"], 2);
  const std::string reason = t["reason"];
  EXPECT_EQ(reason.rfind(trainer_error_message(t["run_dir"].get<std::string>()), 0), 0u) << reason;
  EXPECT_NE(reason.find("optimizer.muon.ns_steps"), std::string::npos) << reason;
  EXPECT_NE(reason.find("exit code 2: configuration error, not retried"), std::string::npos) << reason;
  c->stop();
}

TEST_F(SlurmCluster, ReportTokenReachesTheJobButNoFileOthersCanReadNorSlurmsJobRecord) {
  SlurmExecutorOptions o;
  o.poll_interval = std::chrono::milliseconds(200);
  SlurmExecutor ex(o);
  LaunchSpec s;
  s.trial_id = 1;
  s.attempt = 1;
  s.label = "token";
  s.run_dir = dir_ / "token";
  const std::string token = random_hex_token();
  s.env[kTrialTokenEnv] = token;
  // The job proves it got the token by its hash; the token itself is never written anywhere.
  s.argv = {"/bin/sh", "-c", "printf %s \"$PRECON_TRIAL_TOKEN\" | sha256sum >" + (s.run_dir / "seen").string()};
  s.resources.executor = "slurm";
  Handle h = ex.launch(s);
  const fs::path token_file = slurm_token_path(s.run_dir, 1);
  ASSERT_TRUE(fs::exists(token_file));
  EXPECT_EQ(fs::status(token_file).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  int scanned = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const bool others_read = (e.status().permissions() & (fs::perms::group_read | fs::perms::others_read)) != fs::perms::none;
    if (others_read) {
      EXPECT_EQ(text.find(token), std::string::npos) << e.path() << " is readable by others";
    }
    ++scanned;
  }
  // The batch script at least (0700 like every script precon writes for a run, its other files 0600:
  // none of them is readable by others any more, and none but the token file holds the token).
  EXPECT_GE(scanned, 1);
  for (const std::vector<std::string>& show : {std::vector<std::string>{"scontrol", "show", "job", "-d", h.external_id},
                                               std::vector<std::string>{"squeue", "-h", "-j", h.external_id, "-o", "%all"}}) {
    CommandResult r = slurm(show);
    EXPECT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r.out.find(token), std::string::npos) << r.out;
  }
  std::optional<ExitStatus> end;
  ASSERT_TRUE(wait_for([&] {
    for (auto& [handle, status] : ex.poll()) end = status;
    return end.has_value();
  }, seconds(60)));
  EXPECT_EQ(end->kind, ExitKind::succeeded) << end->detail;
  std::ifstream seen(s.run_dir / "seen");
  std::string hash;
  seen >> hash;
  EXPECT_EQ(hash, hash_token(token));
}

TEST_F(SlurmCluster, TwoNodeJobStartsOneRankPerNode) {
  SlurmExecutorOptions o;
  o.poll_interval = std::chrono::milliseconds(200);
  SlurmExecutor ex(o);
  LaunchSpec s;
  s.trial_id = 1;
  s.attempt = 1;
  s.label = "two-nodes";
  s.run_dir = dir_ / "two-nodes";
  s.argv = {"/bin/sh", "-c",
            "echo \"$SLURM_PROCID $SLURM_NODEID $SLURM_NTASKS $SLURMD_NODENAME $(hostname)\" > rank.$SLURM_PROCID"};
  s.resources.executor = "slurm";
  s.ranks = 2;
  s.resources.nodes = 2;
  s.resources.ntasks_per_node = 1;
  s.resources.sbatch_args = {"--chdir=" + s.run_dir.string()};
  Handle h = ex.launch(s);
  std::optional<ExitStatus> end;
  ASSERT_TRUE(wait_for([&] {
    for (auto& [handle, status] : ex.poll()) end = status;
    return end.has_value();
  }, seconds(60)));
  EXPECT_EQ(end->kind, ExitKind::succeeded) << end->detail;
  std::set<std::string> nodes;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(s.run_dir / ("rank." + std::to_string(rank)));
    int procid = -1, nodeid = -1, ntasks = -1;
    std::string node, host;
    ASSERT_TRUE(in >> procid >> nodeid >> ntasks >> node >> host) << "rank " << rank;
    EXPECT_EQ(procid, rank);
    EXPECT_EQ(nodeid, rank);
    EXPECT_EQ(ntasks, 2);
    nodes.insert(node);
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"n1", "n2"}));
  EXPECT_EQ(ex.running(), 0u);
}

// Two data-parallel ranks, one per node, of one trial: one MPI job that srun starts.
const char kTwoNodes[] = "nodes = 2\nntasks_per_node = 1\n";
const char kTwoRanks[] = "[parallel]\ndata = 2\n";
// fp32 sums reassociated across two ranks (tests/worker/parallel/test_data_tensor.cpp).
constexpr double kDataParallelTolerance = 2e-5;

TEST_F(SlurmCluster, TwoNodeDataParallelTrialRunsAsOneMpiJobAndReportsOnce) {
  const RanksSkipLeakChecks quiet;
  auto c = start();
  const std::string url = c->url();
  const int steps = 12;
  const int64_t id = submit(url, slurm_recipe(steps, kTwoNodes, kTwoRanks));
  const int64_t tid = trials(url, id)[0]["id"];
  auto reference = start_reference(url, tid);
  ASSERT_TRUE(done(url, id, seconds(120)));
  const json t = trial(url, tid);
  const std::string log = get(url, "/api/v1/trials/" + std::to_string(tid) + "/logs?stream=stderr&lines=400")["text"];
  EXPECT_EQ(t["state"], "completed") << t.dump();
  ASSERT_EQ(t["attempts"].size(), 1u) << t.dump() << "\nstderr of every attempt:\n" << log;
  EXPECT_EQ(t["attempts"][0]["executor"], "slurm");
  EXPECT_EQ(t["attempts"][0]["nodes"], "n1,n2") << t.dump();  // every node of the job
  EXPECT_EQ(t["layout"], (json{{"tensor", 1}, {"data", 2}, {"pipeline", 1}, {"virtual_stages", 1}, {"expert", 1}, {"ranks", 2}, {"backend", "auto"}})) << t.dump();
  // Every step once (only rank 0 reports), on the curve of one process.
  expect_same_curve(url, tid, steps, std::move(reference), kDataParallelTolerance);
  // Both ranks are one MPI world, each line with its rank.
  for (const char* rank : {"0", "1"}) {
    const std::regex layout(std::string("rank ") + rank + R"(: layout: [^\n]*\b2 data-parallel rank\(s\) over mpi)");
    EXPECT_TRUE(std::regex_search(log, layout)) << "rank " << rank << ":\n" << log;
  }
  // One metrics.jsonl in the shared run directory, written by rank 0 alone.
  std::ifstream in(fs::path(t["run_dir"].get<std::string>()) / "metrics.jsonl");
  std::map<int64_t, int> seen;
  for (std::string line; std::getline(in, line);)
    if (json j = json::parse(line, nullptr, false); j.is_object() && j.contains("train_loss")) ++seen[j["step"].get<int64_t>()];
  EXPECT_EQ(seen.size(), static_cast<size_t>(steps));
  for (const auto& [step, n] : seen) EXPECT_EQ(n, 1) << "step " << step;
  c->stop();
}

TEST_F(SlurmCluster, TwoNodeDataParallelTrialPreemptedCheckpointsOnBothRanksAndResumes) {
  const RanksSkipLeakChecks quiet;
  auto c = start();
  const std::string url = c->url();
  const int steps = 200;  // a checkpoint every step: a few seconds, so the signal lands mid-run
  const int64_t id = submit(url, slurm_recipe(steps, kTwoNodes,
                                              std::string(kTwoRanks) + "[sweep]\nmax_attempts = 1\n[sweep.parameters]\n"
                                                                       "\"train.checkpoint_every\" = [1]\n"
                                                                       "\"train.keep_checkpoints\" = [2]\n"));
  const int64_t tid = trials(url, id)[0]["id"];
  auto reference = start_reference(url, tid);
  ASSERT_TRUE(wait_for([&] { return trial(url, tid)["last_step"].get<int64_t>() >= 20; }, seconds(60)));
  const std::string job = trial(url, tid)["attempts"][0]["external_id"];
  CommandResult r = slurm({"scancel", "--signal=USR1", "--batch", job});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(done(url, id, seconds(120)));
  expect_requeued_once(url, tid, steps, std::move(reference), kDataParallelTolerance);
  const json t = trial(url, tid);
  for (const json& a : t["attempts"]) EXPECT_EQ(a["nodes"], "n1,n2") << a.dump();
  // Both ranks checkpointed at the same step of the first run, exited 75 there, and the second run
  // resumed both from that checkpoint.
  const std::string log = get(url, "/api/v1/trials/" + std::to_string(tid) + "/logs?stream=stderr&lines=2000")["text"];
  auto steps_of = [&](const std::string& pattern) {
    std::map<std::string, std::string> by_rank;
    const std::regex re(pattern);
    for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
      EXPECT_TRUE(by_rank.emplace((*it)[1], (*it)[2]).second) << "rank " << (*it)[1] << " twice: " << pattern;
    return by_rank;
  };
  const auto stopped = steps_of(R"(rank ([01]): signal received: checkpointed at step ([0-9]+);)");
  const auto resumed = steps_of(R"(rank ([01]): resumed from [^\n]*/step_[0-9]+ at step ([0-9]+))");
  ASSERT_EQ(stopped.size(), 2u) << log;
  EXPECT_EQ(stopped.at("0"), stopped.at("1")) << log;
  EXPECT_EQ(resumed, stopped) << log;
  for (const char* task : {"task 0: Exited with exit code 75", "task 1: Exited with exit code 75"})
    EXPECT_NE(log.find(task), std::string::npos) << task << "\n" << log;
  c->stop();
}

TEST_F(SlurmCluster, AdoptedJobThatRequeuedWhileNobodyWatchedReportsEachRunOnce) {
  // The executor that launched the job is gone (a controller crash) while the job is warned,
  // requeues itself and runs again; a new executor adopts the open first attempt.
  SlurmExecutorOptions o;
  o.poll_interval = std::chrono::milliseconds(200);
  LaunchSpec s;
  s.trial_id = 1;
  s.attempt = 1;
  s.label = "adopt";
  s.run_dir = dir_ / "adopt";
  const fs::path started = s.run_dir / "started";
  s.argv = {"/bin/sh", "-c",
            "trap 'exit 75' USR1; if [ \"$PRECON_ATTEMPT\" = 1 ]; then : >" + started.string() +
                "; sleep 60 & wait; fi; exit 0"};
  s.resources.executor = "slurm";
  Handle h;
  {
    SlurmExecutor first(o);
    h = first.launch(s);
  }
  // The task runs and handles the signal (srun forwards one only to running tasks).
  ASSERT_TRUE(wait_for([&] { return fs::exists(started); }, seconds(30)));
  ASSERT_TRUE(slurm({"scancel", "--signal=USR1", "--batch", h.external_id}).ok());
  // The requeued job may start again once its credential has expired (10 s on the test cluster).
  ASSERT_TRUE(wait_for([&] { return fs::exists(s.run_dir / "exit_status.2"); }, seconds(90)))
      << job_text(h.external_id);
  SlurmExecutor second(o);
  EXPECT_FALSE(second.adopt(h).has_value());
  std::vector<std::pair<Handle, ExitStatus>> reports;
  ASSERT_TRUE(wait_for([&] {
    for (auto& r : second.poll()) reports.push_back(r);
    return reports.size() >= 2;
  }, seconds(30)));
  // Both runs reported and the job is no longer tracked: nothing more can be reported.
  EXPECT_EQ(second.running(), 0u);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].first.attempt, 1);
  EXPECT_EQ(reports[0].second.kind, ExitKind::requeue) << reports[0].second.detail;
  EXPECT_TRUE(reports[0].second.continues);
  EXPECT_EQ(reports[1].first.attempt, 2);
  EXPECT_EQ(reports[1].first.external_id, h.external_id);
  EXPECT_EQ(reports[1].second.kind, ExitKind::succeeded) << reports[1].second.detail;
  EXPECT_EQ(second.running(), 0u);
}

TEST_F(SlurmCluster, ControllerKilledMidSweepRestartsAndEveryTrialEndsOnce) {
  ServeProcess controller(dir_, {"--slurm", "on", "--slurm-poll-interval", "0.3"});
  ASSERT_TRUE(controller.start());
  const std::string url = controller.url();
  const int steps = 200;
  const int64_t id = submit(url, slurm_recipe(steps, "", "[sweep]\nmax_concurrent = 2\n[sweep.parameters]\n"
                                                         "\"optimizer.lr\" = [0.001, 0.002, 0.003]\n"
                                                         "\"train.checkpoint_every\" = [1]\n"
                                                         "\"train.keep_checkpoints\" = [2]\n"));
  int64_t running = 0;
  ASSERT_TRUE(wait_for([&] {
    for (const json& x : trials(url, id))
      if (x["last_step"].get<int64_t>() > 20) running = x["id"];
    return running != 0;
  }, seconds(60)));
  const fs::path metrics = fs::path(trial(url, running)["run_dir"].get<std::string>()) / "metrics.jsonl";
  controller.kill9();
  // The job keeps training in Slurm while no controller runs: its metrics.jsonl grows.
  const auto size = fs::file_size(metrics);
  EXPECT_TRUE(wait_for([&] { return fs::file_size(metrics) > size + 2000; }, seconds(60)));
  ASSERT_TRUE(controller.start());
  ASSERT_TRUE(done(url, id, seconds(180)));
  const json events = get(url, "/api/v1/events?limit=10000&experiment=" + std::to_string(id));
  const json ts = trials(url, id);
  ASSERT_EQ(ts.size(), 3u);
  for (const json& x : ts) {
    const int64_t tid = x["id"];
    SCOPED_TRACE("trial " + std::to_string(tid));
    EXPECT_EQ(x["state"], "completed");
    const auto [endings, adoptions] = endings_and_adoptions(events, tid);
    EXPECT_EQ(endings, 1);
    // All three were in Slurm (one array) when the controller died: adopted, never submitted again.
    EXPECT_EQ(adoptions, 1);
    EXPECT_EQ(trial(url, tid)["attempts"].size(), 1u);
    const json m = losses(url, tid);
    ASSERT_EQ(m["steps"].size(), static_cast<size_t>(steps));
  }
  controller.terminate();
}

// Not a timed assertion: prints how long submitting 100 trials takes (the target is < 5 s).
TEST_F(SlurmCluster, PrintsTheTimeToSubmitHundredTrials) {
  SlurmExecutor ex;
  auto specs_for = [&](const std::string& tag, bool shared) {
    std::vector<LaunchSpec> specs;
    for (int i = 0; i < 100; ++i) {
      LaunchSpec s;
      s.trial_id = i + 1;
      s.attempt = 1;
      s.label = tag + "/" + std::to_string(i);
      s.run_dir = dir_ / tag / ("trial-" + std::to_string(i));
      s.argv = {"/bin/true"};
      s.resources.executor = "slurm";
      if (!shared) s.resources.sbatch_args = {"--comment=bench-" + std::to_string(i)};
      specs.push_back(s);
    }
    return specs;
  };
  std::printf("\n%-36s %10s %8s\n", "submission", "seconds", "jobs");
  for (bool shared : {true, false}) {
    const auto specs = specs_for(shared ? "array" : "single", shared);
    const auto t0 = std::chrono::steady_clock::now();
    auto results = ex.launch_batch(specs, 4);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::set<std::string> jobs;
    for (const auto& r : results) {
      ASSERT_TRUE(r.handle) << r.error;
      jobs.insert(r.handle->external_id.substr(0, r.handle->external_id.find('_')));
    }
    std::printf("%-36s %10.3f %8zu\n", shared ? "100 trials, shared resources (array)" : "100 trials, one job each", s,
                jobs.size());
    std::vector<std::string> cancel = {"scancel"};
    cancel.insert(cancel.end(), jobs.begin(), jobs.end());
    slurm(cancel);
  }
}

}  // namespace
}  // namespace precon::orch::testing
