// The Slurm executor without a cluster: generated scripts (options, quoting, requeue logic run
// by a real bash), validation of hostile resources, and parsing of squeue/scontrol/sacct output
// with every Slurm state mapped.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "orchestrator/exec/slurm_command.h"
#include "orchestrator/exec/slurm_executor.h"
#include "orchestrator/exec/slurm_script.h"
#include "orchestrator/exec/slurm_state.h"

namespace precon::orch {
namespace {

namespace fs = std::filesystem;

LaunchSpec spec_in(const fs::path& run_dir) {
  LaunchSpec s;
  s.trial_id = 7;
  s.attempt = 1;
  s.label = "tiny/trial-7";  // as the scheduler names it: <experiment>/trial-<id>
  s.run_dir = run_dir;
  s.argv = {"/opt/precon/bin/precon-train", "--config", run_dir.string() + "/config.toml"};
  s.env["PRECON_TRIAL_ID"] = "7";
  s.cpus = 2;
  return s;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SlurmScript : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("precon_slurm_script_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs a trial script with bash; `srun` and `scontrol` are stand-ins that record their argv.
  int run_script(const LaunchSpec& spec, const std::string& trainer_body, const std::string& restart_count = "0") {
    SlurmScriptOptions o;
    o.srun = (dir_ / "fake-srun").string();
    o.scontrol = (dir_ / "fake-scontrol").string();
    o.max_requeues = 2;
    std::ofstream(o.srun) << "#!/bin/bash\nshift 5\nprintf '%s\\n' \"$@\" > " << (dir_ / "argv").string() << "\n"
                          << trainer_body << "\n";
    std::ofstream(o.scontrol) << "#!/bin/bash\necho \"$@\" > " << (dir_ / "scontrol").string() << "\n";
    fs::permissions(o.srun, fs::perms::owner_all);
    fs::permissions(o.scontrol, fs::perms::owner_all);
    const fs::path script = dir_ / "job.sh";
    std::ofstream(script) << trial_script(spec, o);
    const std::string cmd = "cd " + dir_.string() + " && SLURM_JOB_ID=42 SLURM_RESTART_COUNT=" + restart_count +
                            " bash " + script.string();
    int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  fs::path dir_;
};

TEST_F(SlurmScript, OptionsFromResources) {
  LaunchSpec s = spec_in(dir_ / "run");
  s.resources.nodes = 2;
  s.resources.ntasks_per_node = 4;
  s.ranks = 8;
  s.resources.gpus_per_node = 4;
  s.resources.cpus_per_task = 8;
  s.resources.mem = "64G";
  s.resources.time_limit = "1-12:00:00";
  s.resources.partition = "gpu";
  s.resources.account = "proj-1";
  s.resources.qos = "high";
  s.resources.constraint = "a100&ib";
  s.resources.sbatch_args = {"--exclusive", "--gres-flags=enforce-binding"};
  validate_slurm_spec(s);
  SlurmScriptOptions o;
  o.signal_lead_s = 300;
  const std::string text = trial_script(s, o);
  for (const char* want :
       {"#SBATCH --job-name=precon-tiny_trial-7\n", "#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=4\n",
        "#SBATCH --gpus-per-node=4\n", "#SBATCH --cpus-per-task=8\n", "#SBATCH --mem=64G\n",
        "#SBATCH --time=1-12:00:00\n", "#SBATCH --partition=gpu\n", "#SBATCH --account=proj-1\n",
        "#SBATCH --qos=high\n", "#SBATCH --constraint=a100&ib\n", "#SBATCH --exclusive\n",
        "#SBATCH --gres-flags=enforce-binding\n", "#SBATCH --signal=B:USR1@300\n", "#SBATCH --requeue\n",
        "#SBATCH --open-mode=append\n"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  EXPECT_NE(text.find("#SBATCH --output=" + (dir_ / "run" / "slurm.out").string() + "\n"), std::string::npos);
  // Unset keys give no option; cpus_per_task 0 falls back to the trial's threads.
  LaunchSpec plain = spec_in(dir_ / "run");
  const std::string p = trial_script(plain, o);
  EXPECT_EQ(p.find("--partition"), std::string::npos);
  EXPECT_EQ(p.find("--gpus-per-node"), std::string::npos);
  EXPECT_NE(p.find("#SBATCH --cpus-per-task=2\n"), std::string::npos);
}

TEST_F(SlurmScript, HostileValuesAreRejectedWithTheKey) {
  const std::vector<std::pair<std::string, std::function<void(LaunchSpec&)>>> cases = {
      {"resources.partition", [](LaunchSpec& s) { s.resources.partition = "gpu\n#SBATCH --uid=0"; }},
      {"resources.partition", [](LaunchSpec& s) { s.resources.partition = "gpu; rm -rf /"; }},
      {"resources.account", [](LaunchSpec& s) { s.resources.account = "$(touch /tmp/x)"; }},
      {"resources.qos", [](LaunchSpec& s) { s.resources.qos = "a b"; }},
      {"resources.constraint", [](LaunchSpec& s) { s.resources.constraint = "x`id`"; }},
      {"resources.mem", [](LaunchSpec& s) { s.resources.mem = "16GB"; }},
      {"resources.time_limit", [](LaunchSpec& s) { s.resources.time_limit = "1:00:00; reboot"; }},
      {"resources.sbatch_args", [](LaunchSpec& s) { s.resources.sbatch_args = {"--comment=a b"}; }},
      {"resources.sbatch_args", [](LaunchSpec& s) { s.resources.sbatch_args = {"-x"}; }},
      {"resources.sbatch_args", [](LaunchSpec& s) { s.resources.sbatch_args = {"--wrap=id"}; }},
      {"resources.partition instead", [](LaunchSpec& s) { s.resources.sbatch_args = {"--partition=x"}; }},
      {"resources.setup", [](LaunchSpec& s) { s.resources.setup = {"module load a\nid"}; }},
      {"run directory", [](LaunchSpec& s) { s.run_dir = "/tmp/with space/run"; }},
      {"run directory", [](LaunchSpec& s) { s.run_dir = "/tmp/run-%j"; }},
      {"run directory", [](LaunchSpec& s) { s.run_dir = "relative/run"; }},
      {"environment variable name", [](LaunchSpec& s) { s.env["A;id"] = "1"; }},
      {"resources.nodes", [](LaunchSpec& s) { s.resources.nodes = 0; }},
      // One rank per task: a task that is not a rank of the trial would train on its own.
      {"resources.ntasks_per_node", [](LaunchSpec& s) { s.resources.nodes = 2; }},
      {"resources.ntasks_per_node", [](LaunchSpec& s) { s.ranks = 2; }},
  };
  for (const auto& [key, mutate] : cases) {
    LaunchSpec s = spec_in(dir_ / "run");
    mutate(s);
    try {
      validate_slurm_spec(s);
      ADD_FAILURE() << "accepted a bad " << key;
    } catch (const ExecError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("trial 7"), std::string::npos) << e.what();
    }
  }
}

TEST_F(SlurmScript, HostileNamesArgumentsAndValuesReachTheTrainerVerbatim) {
  const fs::path run = dir_ / "run";
  fs::create_directories(run);
  LaunchSpec s = spec_in(run);
  s.label = "x$(touch pwned1)`touch pwned2`;touch pwned3 '\"\n";
  const std::vector<std::string> hostile = {"$(touch pwned4)", "`touch pwned5`", "a'b\"c", "; touch pwned6",
                                            "$HOME", "\\", "line\nbreak", ""};
  s.argv = {"/bin/true"};
  for (const auto& h : hostile) s.argv.push_back(h);
  s.env["PRECON_EVIL"] = "'; touch pwned7; echo '";
  validate_slurm_spec(s);
  EXPECT_EQ(slurm_job_name(s.label).find_first_of("$`;' \"\n()"), std::string::npos);
  const int rc = run_script(s, "[ \"$PRECON_EVIL\" = \"'; touch pwned7; echo '\" ] || exit 9; exit 0");
  EXPECT_EQ(rc, 0);
  for (int i = 1; i <= 7; ++i) EXPECT_FALSE(fs::exists(dir_ / ("pwned" + std::to_string(i)))) << i;
  // srun received the program and every argument exactly (one per line; the newline one spans two).
  std::string want = "/bin/true\n";
  for (const auto& h : hostile) want += h + "\n";
  EXPECT_EQ(read(dir_ / "argv"), want);
  EXPECT_EQ(read(run / "exit_status.1"), "exit 0\n");
}

TEST_F(SlurmScript, RequeuesItselfOnlyAfterTheWarningSignal) {
  const fs::path run = dir_ / "run";
  fs::create_directories(run);
  LaunchSpec s = spec_in(run);
  s.attempt = 3;
  // The trainer gets SIGUSR1 from the batch shell (as `--signal=B:USR1` delivers it) and exits 75.
  const std::string trainer = "trap 'exit 75' USR1; kill -USR1 $PPID; for i in $(seq 100); do sleep 0.05; done; exit 1";
  EXPECT_EQ(run_script(s, trainer, "1"), 0);
  EXPECT_EQ(read(run / "exit_status.4"), "exit 75\n");  // attempt = 3 + SLURM_RESTART_COUNT
  EXPECT_EQ(read(dir_ / "scontrol"), "requeue 42\n");
  // No requeue left (max_requeues = 2): the script ends with the trainer's code instead.
  fs::remove(dir_ / "scontrol");
  EXPECT_EQ(run_script(s, trainer, "2"), 75);
  EXPECT_EQ(read(run / "exit_status.5"), "exit 75\n");
  EXPECT_FALSE(fs::exists(dir_ / "scontrol"));
  // SIGTERM (scancel, time limit reached): no requeue either.
  const std::string on_term = "trap 'exit 75' TERM; kill -TERM $PPID; for i in $(seq 100); do sleep 0.05; done; exit 1";
  EXPECT_EQ(run_script(s, on_term, "0"), 75);
  EXPECT_FALSE(fs::exists(dir_ / "scontrol"));
  // A plain failure is recorded as it is.
  EXPECT_EQ(run_script(s, "exit 3", "0"), 3);
  EXPECT_EQ(read(run / "exit_status.3"), "exit 3\n");
}

TEST_F(SlurmScript, AWarningDuringSetupReachesTheTrainerInItsEnvironmentNotAsASignal) {
  // The warning arrives while a setup line runs (here the line sends it to the batch shell
  // itself). A signal sent on to srun then could land before srun or the trainer handle it and
  // kill them (exit 138): the trainer learns of it from PRECON_STOP_SIGNAL and is never signalled.
  const fs::path run = dir_ / "run";
  fs::create_directories(run);
  LaunchSpec s = spec_in(run);
  s.resources.setup = {"kill -USR1 $$"};
  const std::string trainer =
      "trap 'exit 9' USR1; [ \"$PRECON_STOP_SIGNAL\" = USR1 ] || exit 8; for i in $(seq 10); do sleep 0.05; done; exit 75";
  EXPECT_EQ(run_script(s, trainer, "0"), 0);
  EXPECT_EQ(read(run / "exit_status.1"), "exit 75\n");
  EXPECT_EQ(read(dir_ / "scontrol"), "requeue 42\n");
  // Without a warning the trainer's environment has no stop in it.
  s.resources.setup = {"true"};
  EXPECT_EQ(run_script(s, "[ -z \"$PRECON_STOP_SIGNAL\" ] || exit 8; exit 0", "0"), 0);
}

TEST_F(SlurmScript, TheReportTokenIsReadFromItsFileAndNeverWrittenIntoTheScript) {
  const fs::path run = dir_ / "run";
  fs::create_directories(run);
  LaunchSpec s = spec_in(run);
  const std::string token = "0123456789abcdef0123456789abcdef";
  s.env[kTrialTokenEnv] = token;
  const std::string text = trial_script(s, {});
  EXPECT_EQ(text.find(token), std::string::npos) << text;
  EXPECT_NE(text.find(slurm_token_path(run, 1).string()), std::string::npos) << text;
  std::ofstream(slurm_token_path(run, 1)) << token << "\n";
  EXPECT_EQ(run_script(s, "[ \"$PRECON_TRIAL_TOKEN\" = " + token + " ] || exit 8; exit 0", "0"), 0);
  // No token file: the job fails at once with the reason instead of reporting without a token.
  fs::remove(slurm_token_path(run, 1));
  EXPECT_EQ(run_script(s, "exit 0", "0"), 1);
}

TEST_F(SlurmScript, ArrayDispatchesEachTaskToItsTrial) {
  std::vector<LaunchSpec> specs;
  std::vector<fs::path> scripts;
  for (int i = 0; i < 3; ++i) {
    specs.push_back(spec_in(dir_ / ("trial-" + std::to_string(i))));
    scripts.push_back(dir_ / ("trial-" + std::to_string(i)) / "slurm-1.sh");
  }
  const std::string text = array_script(specs, scripts, 2, dir_ / "slurm-array-%A_%a.out", {});
  EXPECT_NE(text.find("#SBATCH --array=0-2%2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("#SBATCH --job-name=precon-tiny\n"), std::string::npos) << text;
  EXPECT_NE(text.find("#SBATCH --output=" + (dir_ / "slurm-array-%A_%a.out").string() + "\n"), std::string::npos);
  EXPECT_NE(text.find("  1) exec /bin/bash '" + scripts[1].string() + "' >>'" + (dir_ / "trial-1" / "slurm.out").string()),
            std::string::npos)
      << text;
  EXPECT_EQ(array_script(specs, scripts, 0, dir_ / "o", {}).find("%"), std::string::npos);
  EXPECT_TRUE(same_slurm_resources(specs[0], specs[1]));
  specs[1].resources.partition = "other";
  EXPECT_FALSE(same_slurm_resources(specs[0], specs[1]));
}

TEST(SlurmState, ParsesSqueueScontrolAndSacct) {
  auto rows = parse_squeue("12_0|RUNNING|None|n1\n12_1|PENDING|JobArrayTaskLimit|\n13|PENDING|Resources|\ngarbage\n");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows["12_0"].state, "RUNNING");
  EXPECT_EQ(rows["12_0"].nodes, "n1");
  EXPECT_EQ(rows["12_1"].reason, "JobArrayTaskLimit");
  EXPECT_EQ(rows["13"].reason, "Resources");
  EXPECT_EQ(parse_squeue("14|RUNNING|None|n[1-2]\n")["14"].nodes, "n1,n2");  // every node of a two-node job

  EXPECT_EQ(expand_hostlist("n[1-3,7],gpu05"), "n1,n2,n3,n7,gpu05");
  EXPECT_EQ(expand_hostlist("a[08-10]"), "a08,a09,a10");
  EXPECT_EQ(expand_hostlist("r[1-2]n[1,3]"), "r1n1,r1n3,r2n1,r2n3");
  EXPECT_EQ(expand_hostlist("n1"), "n1");
  EXPECT_EQ(expand_hostlist(""), "");
  for (const char* odd : {"n[1-", "n[2-1]", "n[x]", "n]1[", "n[1-100000]", "(null)"})
    EXPECT_EQ(expand_hostlist(odd), odd) << odd;  // not a host list: as it is

  auto rec = parse_scontrol_record(
      "JobId=15 JobName=precon-tiny_0 UserId=root(0) JobState=PENDING Reason=BeginTime Dependency=(null) "
      "Requeue=1 Restarts=2 BatchFlag=1 ExitCode=75:0 Comment=two words NodeList=n[1-2]\n");
  EXPECT_EQ(rec["JobState"], "PENDING");
  EXPECT_EQ(rec["Restarts"], "2");
  EXPECT_EQ(rec["ExitCode"], "75:0");
  EXPECT_EQ(rec["Comment"], "two words");
  EXPECT_EQ(rec["NodeList"], "n[1-2]");
  EXPECT_TRUE(parse_scontrol_record("").empty());

  auto row = parse_sacct("15|CANCELLED by 0|0:15\n15.batch|CANCELLED|0:15\n", "15");
  ASSERT_TRUE(row);
  EXPECT_EQ(row->state, "CANCELLED");
  EXPECT_EQ(row->exit_code, "0:15");
  EXPECT_FALSE(parse_sacct("16|COMPLETED|0:0\n", "15"));
}

TEST(SlurmState, TimesInEverySlurmFormat) {
  // The forms sbatch's --time takes (its man page), against seconds worked out by hand.
  EXPECT_EQ(slurm_time_seconds("90"), 5400);          // minutes
  EXPECT_EQ(slurm_time_seconds("2:30"), 150);         // minutes:seconds
  EXPECT_EQ(slurm_time_seconds("01:02:03"), 3723);    // hours:minutes:seconds
  EXPECT_EQ(slurm_time_seconds("2-3"), 183600);       // days-hours
  EXPECT_EQ(slurm_time_seconds("1-00:30"), 88200);    // days-hours:minutes
  EXPECT_EQ(slurm_time_seconds("1-1:1:1"), 90061);    // days-hours:minutes:seconds
  EXPECT_EQ(slurm_time_seconds(""), 0);
  EXPECT_EQ(slurm_time_seconds("UNLIMITED"), 0);
  for (const char* bad : {"1:2:3:4", "a", "1-", "-1", "1::2", "1:", "1-2-3", "1.5"})
    EXPECT_FALSE(slurm_time_seconds(bad).has_value()) << bad;
}

TEST(SlurmExecutorNodes, AnAttemptKeepsEveryNodeItRanOnWhileItsJobCompletes) {
  // Stand-ins for the Slurm commands. squeue shows the two-node job RUNNING, then COMPLETING on
  // the one node still cleaning up (as Slurm does); the attempt must keep both nodes.
  const fs::path dir = fs::temp_directory_path() / ("precon_nodes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "bin");
  const auto program = [&](const std::string& name, const std::string& body) {
    const fs::path p = dir / "bin" / name;
    std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(p, fs::perms::owner_all);
    return p.string();
  };
  SlurmExecutorOptions o;
  o.poll_interval = std::chrono::milliseconds(0);
  o.sbatch = program("sbatch", "echo 77");
  o.squeue = program("squeue", "n=$(cat " + (dir / "polls").string() + " 2>/dev/null || echo 0); n=$((n + 1)); echo $n > " +
                                   (dir / "polls").string() + "\n"
                                   "if [ $n = 1 ]; then echo '77|RUNNING|None|n[1-2]'; else echo '77|COMPLETING|None|n1'; fi");
  o.scontrol = program("scontrol", "echo 'JobId=77 JobState=COMPLETING Restarts=0 ExitCode=0:0'");
  o.scancel = program("scancel", "exit 0");
  o.sacct = program("sacct", "exit 0");
  SlurmExecutor ex(o);
  LaunchSpec spec;
  spec.trial_id = 1;
  spec.attempt = 1;
  spec.label = "nodes";
  spec.run_dir = dir / "run";
  spec.argv = {"/bin/true"};
  spec.resources.executor = "slurm";
  spec.resources.nodes = 2;
  spec.ranks = 2;
  const Handle h = ex.launch(spec);
  EXPECT_EQ(h.external_id, "77");
  EXPECT_TRUE(ex.poll().empty());  // RUNNING on n1 and n2
  EXPECT_TRUE(ex.poll().empty());  // COMPLETING on n1
  std::ofstream(spec.run_dir / "exit_status.1") << "exit 0\n";
  const auto ended = ex.poll();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].first.nodes, "n1,n2");
  EXPECT_EQ(ended[0].second.kind, ExitKind::succeeded) << ended[0].second.detail;
  fs::remove_all(dir);
}

TEST(SlurmState, EveryStateMaps) {
  for (const char* s : {"PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                        "CONFIGURING", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT"})
    EXPECT_TRUE(slurm_state_active(s)) << s;
  for (const char* s : {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                        "BOOT_FAIL", "DEADLINE", "REVOKED"})
    EXPECT_FALSE(slurm_state_active(s)) << s;
  EXPECT_TRUE(slurm_state_waiting("REQUEUED"));
  EXPECT_TRUE(slurm_state_waiting("PENDING"));
  EXPECT_FALSE(slurm_state_waiting("RUNNING"));
  EXPECT_FALSE(slurm_state_active("CANCELLED by 0"));

  struct Case {
    const char* state;
    const char* exit_code;
    ExitKind kind;
    int code;
  };
  const Case cases[] = {
      {"COMPLETED", "0:0", ExitKind::succeeded, 0}, {"FAILED", "1:0", ExitKind::failed, 1},
      {"FAILED", "2:0", ExitKind::usage, 2},        {"FAILED", "75:0", ExitKind::requeue, 75},
      {"FAILED", "0:9", ExitKind::killed, -1},      {"FAILED", "0:0", ExitKind::failed, -1},
      {"CANCELLED", "0:15", ExitKind::killed, -1},  {"TIMEOUT", "0:15", ExitKind::failed, -1},
      {"NODE_FAIL", "0:0", ExitKind::lost, -1},     {"BOOT_FAIL", "0:0", ExitKind::lost, -1},
      {"OUT_OF_MEMORY", "0:125", ExitKind::out_of_memory, -1}, {"PREEMPTED", "0:15", ExitKind::requeue, -1},
      {"DEADLINE", "0:0", ExitKind::failed, -1},    {"REVOKED", "0:0", ExitKind::lost, -1},
  };
  for (const Case& c : cases) {
    ExitStatus s = slurm_exit_status(c.state, c.exit_code, "None");
    EXPECT_EQ(s.kind, c.kind) << c.state << " " << c.exit_code << ": " << s.detail;
    EXPECT_EQ(s.code, c.code) << c.state << " " << c.exit_code;
    EXPECT_FALSE(s.detail.empty());
  }
  EXPECT_NE(slurm_exit_status("OUT_OF_MEMORY", "0:125", "").detail.find("resources.mem"), std::string::npos);
  EXPECT_NE(slurm_exit_status("TIMEOUT", "0:15", "").detail.find("time limit"), std::string::npos);
}

TEST(SlurmCommand, CapturesOutputAndReportsFailures) {
  CommandResult ok = run_command({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, std::chrono::seconds(10));
  EXPECT_EQ(ok.exit_code, 3);
  EXPECT_EQ(ok.out, "out\n");
  EXPECT_EQ(ok.message(), "err");
  CommandResult missing = run_command({"precon-no-such-command"}, std::chrono::seconds(10));
  EXPECT_EQ(missing.exit_code, -1);
  EXPECT_NE(missing.message().find("PATH"), std::string::npos) << missing.message();
  CommandResult slow = run_command({"/bin/sleep", "10"}, std::chrono::milliseconds(200));
  EXPECT_EQ(slow.exit_code, -1);
  EXPECT_NE(slow.message().find("timed out"), std::string::npos);
}

// sbatch passes its environment on to the job: the controller's admin token must not be in it.
TEST(SlurmCommand, CommandsDoNotInheritTheAdminToken) {
  ::setenv("PRECON_TOKEN", "admin-secret-for-this-test", 1);
  ::setenv("PRECON_TOKEN_LIKE", "kept", 1);
  CommandResult r = run_command({"/usr/bin/env"}, std::chrono::seconds(10));
  ::unsetenv("PRECON_TOKEN");
  ::unsetenv("PRECON_TOKEN_LIKE");
  ASSERT_EQ(r.exit_code, 0) << r.message();
  EXPECT_EQ(r.out.find("admin-secret-for-this-test"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PRECON_TOKEN_LIKE=kept"), std::string::npos);
  EXPECT_NE(r.out.find("PATH="), std::string::npos);
}

}  // namespace
}  // namespace precon::orch
