#include "orchestrator/exec/slurm_script.h"

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "worker/config/keys.h"
#include "worker/config/parse.h"
#include "worker/train/exit_codes.h"

namespace precon::orch {
namespace fs = std::filesystem;

namespace {

// Paths and environment names are written into the script and #SBATCH lines unquoted.
const std::regex kPath(R"(/[A-Za-z0-9_./+@,:=-]{0,4000})");
const std::regex kEnvKey(R"([A-Za-z_][A-Za-z0-9_]{0,200})");

// The resources keys that become sbatch options, from the one key table.
const std::vector<const worker::KeySpec*>& sbatch_keys() {
  static const std::vector<const worker::KeySpec*> keys = [] {
    std::vector<const worker::KeySpec*> out;
    for (const worker::KeySpec* k : worker::trial_keys())
      if (!k->sbatch.empty()) out.push_back(k);
    return out;
  }();
  return keys;
}

std::string who(const LaunchSpec& spec) { return "trial " + std::to_string(spec.trial_id); }

std::string slurm_name_char_filter(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return out;
}

int cpus_per_task(const LaunchSpec& spec) {
  return spec.resources.cpus_per_task > 0 ? static_cast<int>(spec.resources.cpus_per_task) : std::max(1, spec.cpus);
}

// The value an sbatch option gets from its key; "" = leave the option out (an unset string, a
// zero count).
std::string sbatch_value(const LaunchSpec& spec, const worker::KeySpec& key) {
  if (key.name == "resources.cpus_per_task") return std::to_string(cpus_per_task(spec));
  worker::TrialConfig config;
  config.resources = spec.resources;
  worker::FieldRef ref = key.field(config);
  if (auto p = std::get_if<std::string*>(&ref)) return **p;
  const int64_t n = *std::get<int64_t*>(ref);
  return n == 0 ? "" : std::to_string(n);
}

}  // namespace

std::string shell_quote(const std::string& s) {
  if (s.find('\0') != std::string::npos) throw ExecError("a NUL byte cannot be passed through a shell script");
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string slurm_job_name(const std::string& label) { return "precon-" + slurm_name_char_filter(label).substr(0, 100); }

void validate_slurm_spec(const LaunchSpec& spec) {
  const worker::ResourcesConfig& r = spec.resources;
  if (spec.argv.empty() || spec.argv[0].empty()) throw ExecError(who(spec) + ": nothing to run (argv is empty)");
  if (!std::regex_match(spec.run_dir.string(), kPath)) {
    throw ExecError(who(spec) + ": run directory \"" + spec.run_dir.string() +
                    "\" must be an absolute path of letters, digits and _./+@,:=- for Slurm (it is written into "
                    "#SBATCH lines); choose a plain --runs directory");
  }
  // The key table's ranges, patterns and rules: recipes were checked with them, a spec built in
  // code is checked here again before anything reaches a script. The spec's ranks stand for the
  // layout, so that nodes × ntasks_per_node is held to them.
  worker::TrialConfig config;
  config.resources = r;
  config.resources.executor = "slurm";
  config.parallel.tensor = 1;
  config.parallel.data = spec.ranks;
  worker::ConfigIssues issues;
  worker::check_values(config, "resources.", who(spec), issues);
  try {
    issues.throw_if_any();
  } catch (const worker::ConfigError& e) {
    const worker::ConfigIssue& first = e.issues().front();
    throw ExecError(who(spec) + ": " + first.key + ": " + first.message + " (not valid for Slurm)");
  }
  for (const auto& [key, value] : spec.env) {
    if (!std::regex_match(key, kEnvKey)) {
      throw ExecError(who(spec) + ": environment variable name \"" + key + "\" is not a shell name");
    }
    if (value.find('\0') != std::string::npos) throw ExecError(who(spec) + ": environment value of " + key + " has a NUL");
  }
  for (const std::string& a : spec.argv) {
    if (a.find('\0') != std::string::npos) throw ExecError(who(spec) + ": an argument contains a NUL byte");
  }
}

std::vector<std::string> slurm_options(const LaunchSpec& spec, const SlurmScriptOptions& options) {
  const worker::ResourcesConfig& r = spec.resources;
  std::vector<std::string> o;
  o.push_back("--job-name=" + slurm_job_name(spec.label));
  o.push_back("--output=" + (spec.run_dir / "slurm.out").string());
  o.push_back("--open-mode=append");
  o.push_back("--requeue");
  o.push_back("--signal=B:USR1@" + std::to_string(options.signal_lead_s));
  for (const worker::KeySpec* k : sbatch_keys())
    if (std::string v = sbatch_value(spec, *k); !v.empty()) o.push_back("--" + k->sbatch + "=" + v);
  for (const std::string& a : r.sbatch_args) o.push_back(a);
  return o;
}

bool same_slurm_resources(const LaunchSpec& a, const LaunchSpec& b) {
  for (const worker::KeySpec* k : sbatch_keys())
    if (sbatch_value(a, *k) != sbatch_value(b, *k)) return false;
  return a.resources.sbatch_args == b.resources.sbatch_args;
}

fs::path slurm_script_path(const fs::path& run_dir, int64_t attempt) {
  return run_dir / ("slurm-" + std::to_string(attempt) + ".sh");
}

fs::path slurm_token_path(const fs::path& run_dir, int64_t attempt) {
  return run_dir / ("slurm-" + std::to_string(attempt) + ".token");
}

std::string trial_script(const LaunchSpec& spec, const SlurmScriptOptions& options) {
  const worker::ResourcesConfig& r = spec.resources;
  std::ostringstream s;
  s << "#!/bin/bash\n";
  for (const std::string& o : slurm_options(spec, options)) s << "#SBATCH " << o << "\n";
  s << "#\n# precon trial " << spec.trial_id << ", attempt " << spec.attempt
    << " (the attempt grows with each restart of the job).\n"
    << "# Written by the precon controller's Slurm executor; `sbatch` this file to run the trial by hand.\n"
    << "# Ranks: srun starts " << r.nodes * r.ntasks_per_node << " " << (spec.user_program ? "program" : "precon-train")
    << " process(es) with SLURM_PROCID,\n"
    << "# SLURM_NODEID and SLURM_NTASKS set. SIGUSR1 (time-limit warning, preemption notice) makes the\n"
    << "# " << (spec.user_program ? "program" : "trainer") << " checkpoint and exit " << worker::kExitRequeue
    << "; the job then requeues itself.\n\n";
  // The traps come first, before anything that takes time: a warning that arrives during the
  // script's own setup is kept for the trainer. srun passes the umask on to every rank: what
  // the trial writes is its user's alone.
  s << "umask 077\nstop_signal=\nresend=\ntrainer=\n"
    << "forward() {\n"
    << "  stop_signal=$1\n"
    << "  if [ -n \"$trainer\" ]; then resend=$1; kill -s \"$1\" \"$trainer\" 2>/dev/null; fi\n"
    << "}\n"
    << "trap 'forward USR1' USR1\n"
    << "trap 'forward TERM' TERM\n\n";
  s << "run_dir=" << shell_quote(spec.run_dir.string()) << "\n";
  s << "attempt=$((" << spec.attempt << " + ${SLURM_RESTART_COUNT:-0}))\n";
  s << "status_file=\"$run_dir/exit_status.$attempt\"\n";
  for (const auto& [key, value] : spec.env)
    if (key != kTrialTokenEnv) s << "export " << key << "=" << shell_quote(value) << "\n";
  // The report token is read from its owner-only file, never written into this script.
  if (spec.env.count(kTrialTokenEnv) != 0) {
    s << "IFS= read -r " << kTrialTokenEnv << " <" << shell_quote(slurm_token_path(spec.run_dir, spec.attempt).string())
      << " || { echo 'precon: cannot read the trial token file' >&2; exit 1; }\n"
      << "export " << kTrialTokenEnv << "\n";
  }
  s << "export OMP_NUM_THREADS=" << cpus_per_task(spec) << "\n";
  s << "export PRECON_ATTEMPT=\"$attempt\"\n";
  if (spec.user_program) {
    // A recipe's own program resumes from its checkpoint on every attempt after the first (this
    // job requeued itself, or the controller launched the trial again), and runs in its run directory.
    s << "if [ \"$attempt\" -gt 1 ]; then export PRECON_RESUME=1; fi\n";
    s << "cd \"$run_dir\" || exit 1\n";
  }
  s << "rm -f \"$status_file\" \"$status_file.tmp\"\n";
  if (!r.setup.empty()) {
    s << "\n# resources.setup from the recipe\n";
    for (const std::string& line : r.setup) s << line << "\n";
    s << "# end of resources.setup\n\n";
  }
  // A stop that arrived before the trainer starts goes to it in its environment: a signal sent
  // to srun or to the trainer before they have installed their handlers would kill them.
  s << "launch_stop=$stop_signal\n"
    << "if [ -n \"$launch_stop\" ]; then export PRECON_STOP_SIGNAL=\"$launch_stop\"; fi\n";
  // Several ranks are one MPI job: srun hands them their ranks through PMIx.
  s << shell_quote(options.srun) << " --kill-on-bad-exit=1" << (spec.ranks > 1 ? " --mpi=pmix" : "") << " --nodes=" << r.nodes
    << " --ntasks-per-node=" << r.ntasks_per_node << " --cpus-per-task=" << cpus_per_task(spec) << " --";
  for (const std::string& a : spec.argv) s << " " << shell_quote(a);
  s << " >>\"$run_dir/stdout.log\" 2>>\"$run_dir/stderr.log\" &\n";
  // A stop that arrived between the check above and this line is sent like any later one. srun
  // forwards a signal only once its tasks run, so a stop that is under way is sent again every
  // 0.2 s until the trainer has exited (it checkpoints once and ignores the repeats).
  s << "trainer=$!\n"
    << "if [ \"$stop_signal\" != \"$launch_stop\" ]; then resend=$stop_signal; fi\n"
    << "while kill -0 \"$trainer\" 2>/dev/null; do\n"
    << "  if [ -n \"$resend\" ]; then\n"
    << "    sleep 0.2 & wait $!\n"
    << "    kill -s \"$resend\" \"$trainer\" 2>/dev/null\n"
    << "  else\n"
    << "    wait \"$trainer\"\n"
    << "  fi\n"
    << "done\n"
    << "wait \"$trainer\"\n"
    << "rc=$?\n"
    << "printf 'exit %d\\n' \"$rc\" >\"$status_file.tmp\" && mv -f \"$status_file.tmp\" \"$status_file\"\n"
    << "if [ \"$rc\" = " << worker::kExitRequeue << " ] && [ \"$stop_signal\" = USR1 ] && [ \"${SLURM_RESTART_COUNT:-0}\" -lt "
    << options.max_requeues << " ]; then\n"
    << "  " << shell_quote(options.scontrol) << " requeue \"$SLURM_JOB_ID\" && exit 0\n"
    << "fi\n"
    << "exit \"$rc\"\n";
  return s.str();
}

std::string array_script(const std::vector<LaunchSpec>& specs, const std::vector<fs::path>& scripts,
                         int max_concurrent, const fs::path& output, const SlurmScriptOptions& options) {
  if (specs.empty() || specs.size() != scripts.size()) throw ExecError("array_script: one script per spec is needed");
  // The file name may hold Slurm's %A/%a patterns; the directory must be plain.
  if (!std::regex_match(output.parent_path().string(), kPath)) {
    throw ExecError("array output directory is not a plain absolute path: " + output.parent_path().string());
  }
  std::ostringstream s;
  s << "#!/bin/bash\n";
  std::string range = "0-" + std::to_string(specs.size() - 1);
  if (max_concurrent > 0) range += "%" + std::to_string(max_concurrent);
  s << "#SBATCH --array=" << range << "\n";
  // The array is named after the experiment: the labels' common part before "/trial-<id>".
  const std::string& label = specs[0].label;
  const std::string array_name = slurm_job_name(label.substr(0, label.rfind('/')));
  for (std::string o : slurm_options(specs[0], options)) {
    if (o.rfind("--output=", 0) == 0) o = "--output=" + output.string();
    if (o.rfind("--job-name=", 0) == 0) o = "--job-name=" + array_name;
    s << "#SBATCH " << o << "\n";
  }
  s << "#\n# precon job array: task i runs the trial script of trial i below, its output appended to that\n"
    << "# trial's run directory.\n\n";
  s << "umask 077\n";
  s << "case \"$SLURM_ARRAY_TASK_ID\" in\n";
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string out = shell_quote((specs[i].run_dir / "slurm.out").string());
    s << "  " << i << ") exec /bin/bash " << shell_quote(scripts[i].string()) << " >>" << out << " 2>&1 ;;\n";
  }
  s << "  *) echo \"precon: no trial for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 2 ;;\n"
    << "esac\n";
  return s.str();
}

}  // namespace precon::orch
