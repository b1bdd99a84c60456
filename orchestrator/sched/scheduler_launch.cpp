// Launching: which pending trials start now (concurrency limits, executor capacity), the spec
// of their next attempt, Slurm-style batches (job arrays), and the records a launch leaves.
#include "orchestrator/sched/scheduler.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/sched/scheduler_live.h"
#include "orchestrator/store/token_hash.h"
#include "worker/common/file_io.h"
#include "worker/config/choice.h"
#include "worker/config/parse.h"

namespace precon::orch {

namespace fs = std::filesystem;
using sched_detail::stderr_size;

namespace {

// Pending trials looked at per experiment and pass: a pass costs the same for an experiment of
// ten trials and one of a hundred thousand (the rest wait for later passes, a few a second).
constexpr size_t kLaunchWindow = 256;

// Fault injection (tests/faults): PRECON_FAULT_CONTROLLER_DIE=<point> ends the controller as
// kill -9 would at that point of a launch, between two of its writes.
void die_if_fault(const char* point) {
  const char* fault = std::getenv("PRECON_FAULT_CONTROLLER_DIE");
  if (fault == nullptr || std::strcmp(fault, point) != 0) return;
  std::fprintf(stderr, "precon serve: fault injected: dying %s\n", point);
  std::_Exit(137);
}

int64_t count_of(const std::map<TrialState, int64_t>& counts, TrialState s) {
  auto it = counts.find(s);
  return it == counts.end() ? 0 : it->second;
}

// Errors that writing a run directory meets again at every try: the path is wrong (a regular file
// on it, a loop, too long a name) or its file system refuses it (read-only, no permission). The
// others (a full disk, a quota, an I/O error) may pass.
bool lasting(int err) {
  switch (err) {
    case EROFS: case ENOTDIR: case EACCES: case EPERM: case EEXIST: case EISDIR: case ENAMETOOLONG: case ELOOP:
    case ENXIO:  // a FIFO or device where config.toml goes (worker::open_run_file)
      return true;
    default:
      return false;
  }
}

// Writes `text` to `path` (created or truncated): 0, or the errno of the call that failed.
int write_text_file(const fs::path& path, const std::string& text) {
  const int fd = worker::open_run_file(path, O_WRONLY | O_CREAT | O_TRUNC, worker::kPrivateFileMode);
  if (fd < 0) return errno;
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return err;
    }
    done += static_cast<size_t>(n);
  }
  return ::close(fd) == 0 ? 0 : errno;
}

}  // namespace

void Scheduler::launch_ready() {
  int64_t queued = 0;
  for (const ExperimentRow& exp : store_.experiments_in_state(ExperimentState::running)) {
    if (const Recipe* tpe = tpe_recipe(exp)) top_up_tpe(exp, *tpe);
    const std::map<TrialState, int64_t> counts = store_.trial_state_counts(exp.id);
    const int64_t pending = count_of(counts, TrialState::pending);
    int64_t running = count_of(counts, TrialState::running);
    queued += pending;
    if (pending == 0) continue;
    std::vector<TrialRow> trials = store_.pending_trials(exp.id, kLaunchWindow);
    if (launch_batched(exp, trials)) {
      for (const TrialRow& t : trials) queued -= t.state != TrialState::pending;
      continue;
    }
    for (TrialRow& t : trials) {
      if (running >= exp.max_concurrent) break;
      const size_t before = live_.size();
      launch(t, exp);
      queued -= t.state != TrialState::pending;
      if (live_.size() == before) {
        if (t.state == TrialState::pending) break;  // no capacity now
        continue;                                     // it failed to launch and has ended
      }
      ++running;
    }
  }
  if (options_.metrics) options_.metrics->set_queue_length(queued);
}

Executor* Scheduler::prepare_launch(TrialRow& trial, const ExperimentRow& exp, LaunchSpec& spec) {
  StoredTrial stored;
  try {
    stored = parse_stored_trial(trial.config_toml, "trial " + std::to_string(trial.id));
  } catch (const std::exception& e) {
    end_trial(trial, TrialState::failed, std::string("invalid stored config: ") + e.what());
    return nullptr;
  }
  const worker::TrialConfig& cfg = stored.config;
  auto ex = executors_.find(cfg.resources.executor);
  if (ex == executors_.end()) {
    end_trial(trial, TrialState::failed, "executor \"" + cfg.resources.executor + "\" is not available in this controller");
    return nullptr;
  }
  spec.trial_id = trial.id;
  spec.attempt = trial.attempts + 1;
  spec.label = exp.name + "/trial-" + std::to_string(trial.id);  // the Slurm job name
  spec.run_dir = trial.run_dir;
  spec.cpus = cfg.train.threads > 0 ? static_cast<int>(cfg.train.threads) : 1;
  spec.ranks = static_cast<int>(cfg.parallel.tensor * cfg.parallel.data * cfg.parallel.pipeline);
  constexpr worker::Choice<bool> kCuda[] = {{"cpu", false}, {"cuda", true}};  // train.device
  const bool cuda = worker::parse_choice<worker::ConfigError>("train.device", cfg.train.device, kCuda);
  spec.gpus = cuda ? std::max<int>(1, static_cast<int>(cfg.resources.gpus_per_node)) : 0;
  spec.resources = cfg.resources;
  const fs::path config_path = fs::path(trial.run_dir) / "config.toml";
  if (!stored.command.empty()) {
    spec.user_program = true;
    spec.argv = stored.command;
    // A path to the program is the controller's (it runs in its run directory).
    if (spec.argv[0].find('/') != std::string::npos) spec.argv[0] = fs::absolute(spec.argv[0]).string();
  } else {
    spec.argv = {options_.trainer.string(), "--config", config_path.string(), "--run-dir", trial.run_dir,
                 "--report-url", options_.report_url, "--trial-id", std::to_string(trial.id)};
  }
  spec.env["PRECON_TRIAL_ID"] = std::to_string(trial.id);
  try {
    ex->second->validate(spec);
  } catch (const std::exception& e) {
    end_trial(trial, TrialState::failed, std::string("cannot run on ") + cfg.resources.executor + ": " + e.what());
    return nullptr;
  }
  return ex->second;
}

void Scheduler::issue_token(const TrialRow& trial, LaunchSpec& spec) {
  const std::string token = random_hex_token();
  const std::string hash = hash_token(token);
  store_.set_trial_token_hash(trial.id, hash);  // before the worker can report with it
  {
    std::lock_guard lock(shared_mu_);
    TrialAuth& auth = tokens_[trial.id];
    auth.token_hash = hash;
    auth.experiment_id = trial.experiment_id;
    auth.finished = false;  // a promoted trial had ended: its new attempt reports again
  }
  spec.env["PRECON_TRIAL_TOKEN"] = token;
}

void Scheduler::set_program_env(const TrialRow& trial, LaunchSpec& spec) {
  if (!spec.user_program) return;
  const fs::path dir = trial.run_dir;
  spec.env["PRECON_RUN_DIR"] = trial.run_dir;
  spec.env["PRECON_PARAMS"] = trial.params_json;
  spec.env["PRECON_PARAMS_FILE"] = (dir / "params.json").string();
  spec.env["PRECON_CONFIG"] = (dir / "config.toml").string();
  spec.env["PRECON_ATTEMPT"] = std::to_string(spec.attempt);
  // Every attempt after the first (a requeue after exit 75, a retry after a failure) resumes.
  if (spec.attempt > 1) spec.env["PRECON_RESUME"] = "1";
  if (!options_.report_url.empty()) spec.env["PRECON_REPORT_URL"] = options_.report_url;
}

// A trial's first attempt gets a run directory of its own, made here (mkdir, which never follows
// a link); a name already taken (a link planted there, or what another database left on the same
// run root) gives it a fresh one. Later attempts resume in theirs, which must still be a private
// directory of this user. 0700: a run directory is the controller's user's alone.
bool Scheduler::write_config(TrialRow& trial, const ExperimentRow& exp, Executor* ex, LaunchSpec& spec) {
  const std::string base = trial.run_dir;
  fs::path dir = base;
  std::error_code ec;
  const bool first = trial.attempts == 0;
  worker::create_run_directory(dir, first, ec);
  for (int n = 1; first && ec == std::errc::file_exists && n <= 100; ++n) {
    dir = base + "-" + std::to_string(n);
    worker::create_run_directory(dir, true, ec);
  }
  if (!ec && dir.string() != base) {
    log("trial " + std::to_string(trial.id) + ": " + base + " exists already; its run directory is " + dir.string());
    trial.run_dir = dir.string();
    store_.update_trial(trial);
    spec.run_dir = trial.run_dir;
    for (size_t i = 0; i + 1 < spec.argv.size(); ++i) {
      if (spec.argv[i] == "--run-dir") spec.argv[i + 1] = trial.run_dir;
      if (spec.argv[i] == "--config") spec.argv[i + 1] = (dir / "config.toml").string();
    }
  }
  int err = ec.value();
  std::string what = ec ? "cannot create run directory " + dir.string() + ": " + ec.message() : "";
  if (ec == std::errc::too_many_symbolic_link_levels || ec == std::errc::operation_not_permitted)
    what += " (it must be a directory of this user, not a link, closed to others)";
  if (!ec && (err = write_text_file(dir / "config.toml", trial.config_toml)) != 0)
    what = "cannot write " + (dir / "config.toml").string() + ": " + std::strerror(err);
  if (what.empty() && spec.user_program && (err = write_text_file(dir / "params.json", trial.params_json + "\n")) != 0)
    what = "cannot write " + (dir / "params.json").string() + ": " + std::strerror(err);
  if (what.empty()) return true;
  if (lasting(err)) {
    end_trial(trial, TrialState::failed,
              what + " (not retried: the run root, --runs, must be a directory the controller can write)");
  } else {
    defer_launch(trial, exp, ex, what);
  }
  return false;
}

void Scheduler::launch(TrialRow& trial, const ExperimentRow& exp) {
  LaunchSpec spec;
  Executor* ex = prepare_launch(trial, exp, spec);
  if (ex == nullptr) return;
  if (!ex->has_capacity(spec) || deferring(ex)) return;
  if (!write_config(trial, exp, ex, spec)) return;
  set_program_env(trial, spec);
  issue_token(trial, spec);
  Handle handle;
  // Active before the worker can report; a failed launch ends the trial, which removes it again.
  if (options_.metrics) options_.metrics->trial_active(trial.id, exp.name);
  const uintmax_t stderr_offset = stderr_size(trial.run_dir);
  try {
    handle = ex->launch(spec);
  } catch (const ExecUnavailable& e) {
    defer_launch(trial, exp, ex, e.what());
    return;
  } catch (const std::exception& e) {
    end_trial(trial, TrialState::failed, std::string("launch failed: ") + e.what());
    return;
  }
  die_if_fault("after_spawn");
  record_launch(trial, exp, ex, handle, stderr_offset, spec.user_program);
}

bool Scheduler::launch_batched(const ExperimentRow& exp, std::vector<TrialRow>& trials) {
  // Executors that queue and throttle themselves (Slurm job arrays) take every ready trial at once.
  std::vector<TrialRow*> rows;
  std::vector<LaunchSpec> specs;
  std::vector<uintmax_t> stderr_offsets;
  Executor* batcher = nullptr;
  for (TrialRow& t : trials) {
    if (t.state != TrialState::pending) continue;
    LaunchSpec spec;
    Executor* ex = prepare_launch(t, exp, spec);
    if (ex == nullptr) continue;
    if (!ex->batches()) return batcher != nullptr;  // first pending trial decides; others wait for the next tick
    if (batcher != nullptr && ex != batcher) continue;
    if (deferring(ex)) return true;  // tried again once the executor may answer
    batcher = ex;
    if (!write_config(t, exp, ex, spec)) {
      if (deferring(ex)) break;  // a full disk: the others would fail alike; those ready launch now
      continue;                  // this trial has failed
    }
    set_program_env(t, spec);
    issue_token(t, spec);
    if (options_.metrics) options_.metrics->trial_active(t.id, exp.name);
    rows.push_back(&t);
    specs.push_back(std::move(spec));
    stderr_offsets.push_back(stderr_size(t.run_dir));
  }
  if (batcher == nullptr) return false;
  if (rows.empty()) return true;
  std::vector<Executor::BatchResult> results = batcher->launch_batch(specs, static_cast<int>(exp.max_concurrent));
  die_if_fault("after_spawn");
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i < results.size() && results[i].handle) {
      record_launch(*rows[i], exp, batcher, *results[i].handle, stderr_offsets[i], specs[i].user_program);
    } else if (i < results.size() && results[i].retry_later) {
      defer_launch(*rows[i], exp, batcher, results[i].error);
    } else {
      end_trial(*rows[i], TrialState::failed,
                std::string("launch failed: ") + (i < results.size() ? results[i].error : "no result from the executor"));
    }
  }
  return true;
}

bool Scheduler::deferring(Executor* ex) const {
  auto it = unavailable_until_.find(ex);
  return it != unavailable_until_.end() && std::chrono::steady_clock::now() < it->second;
}

void Scheduler::defer_launch(TrialRow& trial, const ExperimentRow& exp, Executor* ex, const std::string& why) {
  unavailable_until_[ex] = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  if (options_.metrics) options_.metrics->trial_inactive(trial.id);
  const std::string reason = "waiting to launch: " + why;
  if (trial.reason == reason) return;
  trial.reason = reason;
  store_.update_trial(trial);
  event(exp.id, trial.id, "launch_deferred", reason);
  log("trial " + std::to_string(trial.id) + ": " + reason);
}

int64_t Scheduler::add_attempt(int64_t trial_id, const Handle& handle) {
  AttemptRow a;
  a.trial_id = trial_id;
  a.number = handle.attempt;
  a.executor = handle.executor;
  a.external_id = handle.external_id;
  a.nodes = handle.nodes;
  a.started_at = epoch_seconds();
  return store_.add_attempt(a);
}

void Scheduler::record_launch(TrialRow& trial, const ExperimentRow& exp, Executor* ex, const Handle& handle,
                              uintmax_t stderr_offset, bool user_program) {
  auto live = std::make_unique<Live>();
  live->attempt_id = add_attempt(trial.id, handle);
  die_if_fault("after_attempt");
  live->handle = handle;
  live->executor = ex;
  live->start_step = trial.last_step;
  live->stderr_offset = stderr_offset;
  live->user_program = user_program;
  live_[trial.id] = std::move(live);
  if (options_.metrics) options_.metrics->attempt_started(handle.executor);
  trial.state = TrialState::running;
  trial.attempts = handle.attempt;
  if (trial.reason.rfind("waiting to launch: ", 0) == 0) trial.reason.clear();
  if (trial.started_at == 0) trial.started_at = epoch_seconds();
  store_.update_trial(trial);
  event(exp.id, trial.id, "attempt_started",
        "attempt " + std::to_string(handle.attempt) + " started (" + handle.executor + " " + handle.external_id + ")");
  log("trial " + std::to_string(trial.id) + " (" + trial.params_json + ") attempt " + std::to_string(handle.attempt) +
      " started");
}

}  // namespace precon::orch
