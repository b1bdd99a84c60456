#include "orchestrator/exec/slurm_executor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <utility>

#include "orchestrator/common/clock.h"
#include "orchestrator/exec/slurm_state.h"
#include "orchestrator/exec/wrapped_process.h"
#include "worker/common/file_io.h"

namespace precon::orch {
namespace fs = std::filesystem;

namespace {

fs::path status_path(const Handle& h) { return h.run_dir / ("exit_status." + std::to_string(h.attempt)); }
fs::path job_record_path(const fs::path& run_dir, const std::string& id) { return run_dir / ("slurm_job." + id); }

// The scripts, the token and the job records are written as every file in a run directory:
// atomically, and readable by the controller's user only (a script 0700).
void write_file(const fs::path& path, const std::string& text, unsigned mode = worker::kPrivateFileMode) {
  try {
    worker::write_file_atomic(path, text, mode);
  } catch (const std::exception& e) {
    throw ExecError(std::string("cannot write ") + e.what());
  }
}

// What a restarted controller needs to take the job over: the attempt it began as, and what its
// pending limit counts from. Best effort: a restart without it falls back to the attempt it is
// given and counts the limit from then.
void write_job_record(const fs::path& run_dir, const std::string& id, int64_t base_attempt, int64_t pending_limit,
                      double submitted_at) {
  try {
    write_file(job_record_path(run_dir, id), "base_attempt=" + std::to_string(base_attempt) +
                                                 "\npending_limit=" + std::to_string(pending_limit) +
                                                 "\nsubmitted_at=" + std::to_string(submitted_at) + "\n");
  } catch (const std::exception&) {
  }
}

int64_t to_int(const std::string& s, int64_t fallback) {
  try {
    size_t used = 0;
    long long v = std::stoll(s, &used);
    return used == s.size() ? v : fallback;
  } catch (const std::exception&) {
    return fallback;
  }
}

// "123" or "123;cluster" from `sbatch --parsable`.
std::string parsable_job_id(const std::string& out) {
  std::string id = out.substr(0, out.find_first_of(";\n"));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) return "";
  return id;
}

// sbatch could not reach slurmctld (down, restarting, overloaded): nothing was submitted.
bool slurm_unreachable(const CommandResult& r) {
  for (const char* text : {"Unable to contact slurm controller", "Socket timed out", "Zero Bytes were transmitted",
                           "Slurm temporarily unable", "Slurm backup controller in standby"})
    if (r.err.find(text) != std::string::npos) return true;
  return r.error.find("timed out") != std::string::npos;
}

constexpr unsigned kScript = 0700;

}  // namespace

SlurmExecutor::SlurmExecutor(SlurmExecutorOptions options) : options_(std::move(options)) {}

SlurmExecutor::~SlurmExecutor() = default;

bool SlurmExecutor::available() {
  const char* path = std::getenv("PATH");
  return resolve_program("sbatch", path ? path : "/usr/bin:/bin").has_value();
}

CommandResult SlurmExecutor::run(const std::vector<std::string>& argv) const {
  return run_command(argv, options_.command_timeout);
}

void SlurmExecutor::validate(const LaunchSpec& spec) const {
  validate_slurm_spec(spec);
  // A recipe's own program may be a bare name, found on the node's PATH.
  const bool bare = spec.user_program && spec.argv[0].find('/') == std::string::npos;
  if (!bare && !fs::path(spec.argv[0]).is_absolute()) {
    throw ExecError("trial " + std::to_string(spec.trial_id) + ": the trainer must be an absolute path on the "
                    "shared filesystem for Slurm, got " + spec.argv[0]);
  }
}

std::string SlurmExecutor::submit(const fs::path& script) {
  CommandResult r = run({options_.sbatch, "--parsable", script.string()});
  const std::string id = parsable_job_id(r.out);
  if (!r.ok() && slurm_unreachable(r)) {
    throw ExecUnavailable("sbatch " + script.string() + ": Slurm does not answer now (" + r.message() +
                          "); the trial waits and is submitted when slurmctld is back");
  }
  if (!r.ok() || id.empty()) {
    throw ExecError("sbatch " + script.string() + " failed: " + r.message() +
                    (r.ok() ? " (no job id in its output: " + r.out + ")" : ""));
  }
  return id;
}

void SlurmExecutor::track(const Handle& h, int64_t base_attempt, int64_t pending_limit, double submitted_at) {
  Job j;
  j.handle = h;
  j.base_attempt = base_attempt;
  j.pending_limit = pending_limit;
  j.submitted_at = submitted_at;
  jobs_.push_back(std::move(j));
}

Handle SlurmExecutor::launch(const LaunchSpec& spec) {
  auto results = launch_batch({spec}, 0);
  if (!results[0].handle && results[0].retry_later) throw ExecUnavailable(results[0].error);
  if (!results[0].handle) throw ExecError(results[0].error);
  return *results[0].handle;
}

std::optional<Handle> SlurmExecutor::earlier_job(const LaunchSpec& spec) const {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(spec.run_dir, ec)) {
    const std::string file = e.path().filename().string();
    constexpr std::string_view kPrefix = "slurm_job.";
    if (file.rfind(kPrefix, 0) != 0 || file.find(".tmp") != std::string::npos) continue;
    std::ifstream in(e.path());
    std::string line;
    int64_t base = -1;
    while (std::getline(in, line))
      if (line.rfind("base_attempt=", 0) == 0) base = to_int(line.substr(13), -1);
    if (base != spec.attempt) continue;
    Handle h;
    h.executor = name();
    h.external_id = file.substr(kPrefix.size());
    h.trial_id = spec.trial_id;
    h.attempt = spec.attempt;
    h.run_dir = spec.run_dir;
    return h;
  }
  return std::nullopt;
}

std::vector<Executor::BatchResult> SlurmExecutor::launch_batch(const std::vector<LaunchSpec>& specs,
                                                               int max_concurrent) {
  std::vector<BatchResult> results(specs.size());
  std::vector<size_t> ready;
  std::vector<fs::path> scripts;
  for (size_t i = 0; i < specs.size(); ++i) {
    const LaunchSpec& spec = specs[i];
    if (std::optional<Handle> earlier = earlier_job(spec)) {
      // Submitted by a controller that died before recording it: the same attempt, pending,
      // running or ended. Submitting it again would run the trial twice.
      adopt(*earlier);
      results[i].handle = *earlier;
      continue;
    }
    try {
      validate(spec);
      std::error_code ec;
      worker::create_private_directories(spec.run_dir, ec);
      if (ec) throw ExecError("cannot create run directory " + spec.run_dir.string() + ": " + ec.message());
      fs::remove(status_path(Handle{"slurm", "", "", spec.trial_id, spec.attempt, spec.run_dir}), ec);
      if (auto token = spec.env.find(kTrialTokenEnv); token != spec.env.end())
        write_file(slurm_token_path(spec.run_dir, spec.attempt), token->second + "\n");
      const fs::path script = slurm_script_path(spec.run_dir, spec.attempt);
      write_file(script, trial_script(spec, options_.script), kScript);
      ready.push_back(i);
      scripts.push_back(script);
    } catch (const std::exception& e) {
      results[i].error = e.what();
    }
  }
  if (ready.empty()) return results;

  bool shared = ready.size() > 1;
  for (size_t k = 1; k < ready.size() && shared; ++k) shared = same_slurm_resources(specs[ready[0]], specs[ready[k]]);
  std::vector<std::pair<size_t, std::string>> ids;  // spec index -> external id
  if (shared) {
    std::vector<LaunchSpec> group;
    for (size_t i : ready) group.push_back(specs[i]);
    const fs::path dir = specs[ready[0]].run_dir.parent_path();
    const std::string stamp = std::to_string(::getpid()) + "-" +
                              std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
    const fs::path script = dir / ("slurm-array-" + stamp + ".sh");
    try {
      write_file(script, array_script(group, scripts, max_concurrent, dir / "slurm-array-%A_%a.out", options_.script),
                 kScript);
      const std::string array_id = submit(script);
      for (size_t k = 0; k < ready.size(); ++k) ids.emplace_back(ready[k], array_id + "_" + std::to_string(k));
    } catch (const std::exception& e) {
      const bool later = dynamic_cast<const ExecUnavailable*>(&e) != nullptr;
      for (size_t i : ready) {
        results[i].error = e.what();
        results[i].retry_later = later;
      }
      return results;
    }
  } else {
    for (size_t k = 0; k < ready.size(); ++k) {
      try {
        ids.emplace_back(ready[k], submit(scripts[k]));
      } catch (const ExecUnavailable& e) {
        results[ready[k]].error = e.what();
        results[ready[k]].retry_later = true;
      } catch (const std::exception& e) {
        results[ready[k]].error = e.what();
      }
    }
  }

  std::lock_guard lock(mu_);
  for (const auto& [i, id] : ids) {
    const LaunchSpec& spec = specs[i];
    Handle h;
    h.executor = name();
    h.external_id = id;
    h.trial_id = spec.trial_id;
    h.attempt = spec.attempt;
    h.run_dir = spec.run_dir;
    const int64_t pending_limit = slurm_time_seconds(spec.resources.pending_limit).value_or(0);
    const double submitted_at = epoch_seconds();
    write_job_record(spec.run_dir, id, spec.attempt, pending_limit, submitted_at);
    track(h, spec.attempt, pending_limit, submitted_at);
    results[i].handle = h;
  }
  return results;
}

std::map<std::string, std::string> SlurmExecutor::job_record(const std::string& id) {
  CommandResult r = run({options_.scontrol, "show", "job", "-o", id});
  if (r.ok()) {
    auto rec = parse_scontrol_record(r.out);
    if (!rec.empty()) return rec;
  }
  // Forgotten by slurmctld (MinJobAge passed): accounting, then the job completion log.
  for (std::vector<std::string> argv : {std::vector<std::string>{options_.sacct, "-P", "-n", "-X", "-j", id, "-o",
                                                                  "JobID,State,ExitCode"},
                                        std::vector<std::string>{options_.sacct, "-c", "-P", "-n", "-j", id, "-o",
                                                                  "JobID,State,ExitCode"}}) {
    CommandResult s = run(argv);
    if (!s.ok()) continue;
    if (auto row = parse_sacct(s.out, id)) return {{"JobState", row->state}, {"ExitCode", row->exit_code}};
  }
  return {};
}

SlurmExecutor::Decision SlurmExecutor::judge(Job& j, const SqueueRow* row) {
  const std::string& id = j.handle.external_id;
  std::map<std::string, std::string> rec;
  bool have_rec = false;
  auto record = [&]() -> std::map<std::string, std::string>& {
    if (!have_rec) rec = job_record(id);
    have_rec = true;
    return rec;
  };
  auto restarts = [&]() -> int64_t {
    auto& r = record();
    auto it = r.find("Restarts");
    return it == r.end() ? -1 : to_int(it->second, -1);
  };
  std::string state = row ? row->state : "";
  std::string reason = row ? row->reason : "";
  if (!row) {
    auto& r = record();
    state = base_state(r["JobState"]);
    reason = r.count("Reason") ? r["Reason"] : "";
  }
  if (state != j.state || reason != j.reason) {
    // The nodes of a run are those squeue lists while it runs: a COMPLETING job lists only the
    // nodes still cleaning up. A short run may never be seen RUNNING between two polls: then
    // the first list seen (squeue lists recently ended jobs' nodes too).
    if (row != nullptr && !row->nodes.empty() && (state == "RUNNING" || j.handle.nodes.empty()))
      j.handle.nodes = row->nodes;
    std::string note = "Slurm job " + id + " " + (state.empty() ? std::string("unknown") : state);
    if (!reason.empty() && reason != "None") note += " (" + reason + ")";
    if (state != "PENDING" && row != nullptr && !row->nodes.empty()) note += " on " + row->nodes;
    changes_.emplace_back(j.handle, note);
  }
  j.state = state;
  j.reason = reason;
  if (state == "RUNNING") j.seen_running = true;
  const bool active = slurm_state_active(state);
  // A task held back by its own array's throttle (sweep.max_concurrent) waits for its siblings,
  // not for the cluster: its clock starts when the throttle lets it go.
  const bool throttled = state == "PENDING" && reason == "JobArrayTaskLimit";
  if (throttled) {
    j.throttled = true;
  } else if (j.throttled) {
    j.throttled = false;
    j.submitted_at = epoch_seconds();
    // Unwritten, a restart counts from the sbatch: at worst the limit ends the wait sooner.
    if (j.pending_limit > 0) write_job_record(j.handle.run_dir, id, j.base_attempt, j.pending_limit, j.submitted_at);
  }
  if (state == "PENDING" && !throttled && j.pending_limit > 0 && !j.seen_running && !j.cancelled &&
      j.handle.attempt == j.base_attempt && epoch_seconds() - j.submitted_at > static_cast<double>(j.pending_limit)) {
    // It never started: waiting longer is the user's choice (resources.pending_limit), not ours.
    run({options_.scancel, id});
    j.cancelled = true;
    ExitStatus s;
    s.kind = ExitKind::usage;  // the same job would wait the same way again
    s.detail = "Slurm job " + id + " stayed PENDING" + (reason.empty() || reason == "None" ? "" : " (" + reason + ")") +
               " for " + std::to_string(static_cast<int64_t>(epoch_seconds() - j.submitted_at)) +
               " s, longer than resources.pending_limit (" + std::to_string(j.pending_limit) +
               " s); it was cancelled";
    return {true, s};
  }

  if (auto file = read_exit_status_file(status_path(j.handle))) {
    ExitStatus s = *file;
    if (s.kind == ExitKind::requeue && active && !j.cancelled) {
      const int64_t r = restarts();
      if (r >= 0 && j.base_attempt + r > j.handle.attempt) {
        s.continues = true;
        s.detail += "; Slurm job " + id + " requeued";
        return {true, s};
      }
      return {};  // the script is still requeueing the job: decide on a later poll
    }
    if (state == "OUT_OF_MEMORY" && (s.kind == ExitKind::killed || s.kind == ExitKind::failed)) {
      // The script saw its trainer die (SIGKILL, or srun's exit for it); Slurm says why.
      ExitStatus oom = slurm_exit_status(state, "0:9", "");
      oom.code = s.code;
      oom.signal = s.signal;
      oom.detail += " [" + s.detail + "]";
      return {true, oom};
    }
    if (!state.empty() && state != "COMPLETED" && state != "FAILED" && !active) s.detail += " (Slurm " + state + ")";
    // The job was requeued and ran again while nobody watched (a controller restart).
    Handle next = j.handle;
    next.attempt += 1;
    if (s.kind == ExitKind::requeue && fs::exists(status_path(next))) s.continues = true;
    return {true, s};
  }
  if (state.empty()) {
    return {true, lost("Slurm job " + id + " is no longer known to Slurm and left no " + status_path(j.handle).string())};
  }
  if (!active) {
    auto& r = record();
    return {true, slurm_exit_status(state, r["ExitCode"], reason)};
  }
  // A run that Slurm itself requeued (node failure, preemption) without the script's status.
  if (j.seen_running && slurm_state_waiting(state)) {
    const int64_t r = restarts();
    if (r >= 0 && j.base_attempt + r > j.handle.attempt) {
      ExitStatus s;
      s.kind = ExitKind::requeue;
      s.continues = true;
      s.detail = "Slurm requeued job " + id + " (" + (reason.empty() ? state : reason) + ")";
      return {true, s};
    }
  }
  return {};
}

std::vector<std::pair<Handle, ExitStatus>> SlurmExecutor::poll() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<Handle, ExitStatus>> ended;
  if (jobs_.empty()) return ended;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_poll_ < options_.poll_interval) return ended;
  last_poll_ = now;

  // One squeue for every job: array tasks are listed through their array's id.
  std::set<std::string> ids;
  for (const Job& j : jobs_) ids.insert(j.handle.external_id.substr(0, j.handle.external_id.find('_')));
  std::string list;
  for (const std::string& id : ids) list += (list.empty() ? "" : ",") + id;
  CommandResult q = run({options_.squeue, "-h", "-r", "-t", "all", "-j", list, "-o", kSqueueFormat});
  // squeue exits 1 ("Invalid job id specified") when it knows none of the ids; anything else
  // means Slurm did not answer, and nothing can be concluded this time.
  if (!q.ok() && q.err.find("Invalid job id") == std::string::npos) return ended;
  const auto rows = parse_squeue(q.out);

  for (auto it = jobs_.begin(); it != jobs_.end();) {
    auto row = rows.find(it->handle.external_id);
    Decision d = judge(*it, row == rows.end() ? nullptr : &row->second);
    if (!d.report) {
      ++it;
      continue;
    }
    ended.emplace_back(it->handle, d.status);
    if (d.status.continues) {
      it->handle.attempt += 1;
      it->seen_running = it->state == "RUNNING";
      ++it;
    } else {
      it = jobs_.erase(it);
    }
  }
  return ended;
}

void SlurmExecutor::cancel(const Handle& h) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(jobs_.begin(), jobs_.end(),
                         [&](const Job& j) { return j.handle.external_id == h.external_id; });
  if (it == jobs_.end()) return;
  it->cancelled = true;
  run({options_.scancel, it->handle.external_id});
  last_poll_ = {};  // learn the outcome at the next poll
}

// Slurm sends SIGTERM to every process of the job, then SIGKILL after KillWait; the trainer
// checkpoints on SIGTERM, and the script does not requeue after one.
void SlurmExecutor::signal_stop(const Handle& h) { cancel(h); }

void SlurmExecutor::kill(const Handle& h) { cancel(h); }

std::optional<ExitStatus> SlurmExecutor::adopt(const Handle& h) {
  if (h.executor != name()) {
    throw ExecError("the slurm executor cannot adopt an attempt of executor '" + h.executor + "'");
  }
  std::lock_guard lock(mu_);
  for (const Job& j : jobs_)
    if (j.handle.external_id == h.external_id) return std::nullopt;
  int64_t base = h.attempt, pending_limit = 0;
  double submitted_at = epoch_seconds();  // a record without the time: counted from now
  std::ifstream in(job_record_path(h.run_dir, h.external_id));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("base_attempt=", 0) == 0) base = to_int(line.substr(13), h.attempt);
    if (line.rfind("pending_limit=", 0) == 0) pending_limit = to_int(line.substr(14), 0);
    if (line.rfind("submitted_at=", 0) == 0) submitted_at = std::strtod(line.c_str() + 13, nullptr);
  }
  track(h, std::min(base, h.attempt), pending_limit, submitted_at);
  last_poll_ = {};
  return std::nullopt;  // the next poll() reports it if it already ended
}

size_t SlurmExecutor::running() const {
  std::lock_guard lock(mu_);
  return jobs_.size();
}

std::vector<std::pair<Handle, std::string>> SlurmExecutor::state_changes() {
  std::lock_guard lock(mu_);
  return std::exchange(changes_, {});
}

}  // namespace precon::orch
