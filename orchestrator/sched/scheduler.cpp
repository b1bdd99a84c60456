#include "orchestrator/sched/scheduler.h"

#include <boost/asio/post.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <stdexcept>

#include "orchestrator/obs/controller_metrics.h"
#include "worker/ckpt/checkpoint.h"
#include "worker/train/train_state.h"
#include "worker/config/parse.h"

namespace precon::orch {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string sanitize(const std::string& name) {
  std::string out;
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return out.empty() ? "experiment" : out;
}

}  // namespace

std::string random_hex_token(size_t chars) {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (size_t i = 0; i < chars; ++i) t += hex[rd() % 16];
  return t;
}

struct Scheduler::Live {
  int64_t attempt_id = 0;
  Handle handle;
  Executor* executor = nullptr;
  bool stop_requested = false;
  TrialState stop_state = TrialState::cancelled;
  std::string stop_reason;
  std::chrono::steady_clock::time_point stop_at;
  bool sigterm_sent = false;
  bool sigkill_sent = false;
  std::chrono::steady_clock::time_point checkpoints_scanned{};  // last record_checkpoints()
  int64_t start_step = -1;  // the trial's last_step when this attempt was launched; -1 = adopted
};

Scheduler::Scheduler(Store& store, std::map<std::string, Executor*> executors, SchedulerOptions options)
    : store_(store), executors_(std::move(executors)), options_(std::move(options)) {
  if (options_.metrics)
    for (const auto& [name, ex] : executors_) options_.metrics->add_executor(name);
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::log(const std::string& line) {
  if (options_.log) options_.log(line);
}

void Scheduler::post(std::function<void()> fn) { boost::asio::post(io_, std::move(fn)); }

void Scheduler::event(int64_t experiment_id, int64_t trial_id, const std::string& kind, const std::string& message,
                      json data) {
  EventRow e;
  e.time = now_seconds();
  e.experiment_id = experiment_id;
  e.trial_id = trial_id;
  e.kind = kind;
  e.message = message;
  e.data_json = data.dump();
  store_.add_event(e);
}

void Scheduler::start() {
  if (started_) return;
  started_ = true;
  // Tokens and objectives of every unfinished experiment, for report handlers.
  for (const ExperimentRow& exp : store_.experiments()) {
    std::lock_guard lock(shared_mu_);
    objective_metric_[exp.id] = exp.objective_metric;
    for (const TrialRow& t : store_.trials(exp.id)) tokens_[t.id] = {t.token, exp.id};
  }
  timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  thread_ = std::thread([this] {
    thread_id_ = std::this_thread::get_id();
    post([this] {
      reconcile();
      tick();
    });
    io_.run();
  });
}

void Scheduler::stop() {
  if (!started_) return;
  started_ = false;
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::tick() {
  try {
    collect_finished();
    escalate_stops();
    scan_checkpoints();
    launch_ready();
  } catch (const std::exception& e) {
    log(std::string("scheduler error: ") + e.what());
  }
  timer_->expires_after(options_.poll_interval);
  timer_->async_wait([this](const boost::system::error_code& ec) {
    if (!ec) tick();
  });
}

void Scheduler::reconcile() {
  // Attempts left open by a previous controller: adopt the workers still running, settle the rest.
  for (const AttemptRow& a : store_.open_attempts()) {
    auto trial = store_.trial(a.trial_id);
    if (!trial) continue;
    auto it = executors_.find(a.executor);
    if (it == executors_.end()) {
      AttemptRow done = a;
      done.state = AttemptState::lost;
      done.ended_at = now_seconds();
      done.detail = "executor " + a.executor + " is not configured in this controller";
      store_.update_attempt(done);
      finish_attempt(a.trial_id, ExitStatus{ExitKind::lost, -1, 0, done.detail});
      continue;
    }
    Handle h;
    h.executor = a.executor;
    h.external_id = a.external_id;
    h.nodes = a.nodes;
    h.trial_id = a.trial_id;
    h.attempt = a.number;
    h.run_dir = trial->run_dir;
    auto live = std::make_unique<Live>();
    live->attempt_id = a.id;
    live->handle = h;
    live->executor = it->second;
    live_[a.trial_id] = std::move(live);
    if (options_.metrics) {
      auto exp = store_.experiment(trial->experiment_id);
      options_.metrics->trial_active(a.trial_id, exp ? exp->name : "");
    }
    std::optional<ExitStatus> status = it->second->adopt(h);
    if (status) {
      finish_attempt(a.trial_id, *status);
    } else {
      event(trial->experiment_id, trial->id, "attempt_adopted",
            "controller restarted: re-attached to running worker " + a.external_id);
    }
  }
  // Trials marked running without an open attempt (the controller died between the two writes).
  for (TrialRow t : store_.trials_in_state(TrialState::running)) {
    if (live_.count(t.id)) continue;
    t.state = TrialState::pending;
    store_.update_trial(t);
  }
  // Experiments whose trials all ended while the controller was down.
  for (const ExperimentRow& exp : store_.experiments())
    if (exp.state == ExperimentState::running) maybe_finish_experiment(exp.id);
}

void Scheduler::collect_finished() {
  for (auto& [name, ex] : executors_) {
    std::vector<std::pair<Handle, ExitStatus>> ended;
    const auto t0 = std::chrono::steady_clock::now();
    bool failed = false;
    try {
      ended = ex->poll();
    } catch (const std::exception& e) {
      failed = true;  // the other executors are still polled; this one is tried again next tick
      log("executor " + name + ": poll failed: " + e.what());
    }
    if (options_.metrics)
      options_.metrics->executor_polled(
          name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), failed);
    for (auto& [handle, note] : ex->state_changes()) note_attempt_state(ex, handle, note);
    for (auto& [handle, status] : ended) {
      for (auto& [trial_id, live] : live_) {
        if (live->handle.external_id == handle.external_id && live->executor == ex) {
          finish_attempt(trial_id, status);
          break;
        }
      }
    }
  }
}

void Scheduler::note_attempt_state(Executor* ex, const Handle& h, const std::string& note) {
  for (auto& [trial_id, live] : live_) {
    if (live->executor != ex || live->handle.external_id != h.external_id || live->handle.attempt != h.attempt) continue;
    if (!h.nodes.empty() && h.nodes != live->handle.nodes) {
      live->handle.nodes = h.nodes;
      for (AttemptRow a : store_.attempts(trial_id)) {
        if (a.id != live->attempt_id) continue;
        a.nodes = h.nodes;
        store_.update_attempt(a);
      }
    }
    if (auto trial = store_.trial(trial_id)) event(trial->experiment_id, trial_id, "attempt_state", note);
    return;
  }
}

void Scheduler::finish_attempt(int64_t trial_id, const ExitStatus& status) {
  auto it = live_.find(trial_id);
  if (it == live_.end()) return;
  std::unique_ptr<Live> live = std::move(it->second);
  live_.erase(it);
  if (options_.metrics) {
    options_.metrics->trial_inactive(trial_id);
    if (!live->stop_requested && status.kind == ExitKind::requeue) options_.metrics->attempt_requeued(live->handle.executor);
    if (!live->stop_requested && status.kind != ExitKind::requeue && status.kind != ExitKind::succeeded)
      options_.metrics->attempt_failed(live->handle.executor);
  }
  auto trial_opt = store_.trial(trial_id);
  if (!trial_opt) return;
  TrialRow trial = *trial_opt;
  auto exp = store_.experiment(trial.experiment_id);

  for (AttemptRow a : store_.attempts(trial_id)) {
    if (a.id != live->attempt_id) continue;
    a.ended_at = now_seconds();
    a.exit_code = status.code;
    a.detail = status.detail;
    switch (status.kind) {
      case ExitKind::succeeded: a.state = live->stop_requested ? AttemptState::stopped : AttemptState::succeeded; break;
      case ExitKind::requeue: a.state = AttemptState::requeue; break;
      case ExitKind::killed: a.state = AttemptState::killed; break;
      case ExitKind::lost: a.state = AttemptState::lost; break;
      default: a.state = AttemptState::failed;
    }
    store_.update_attempt(a);
  }
  record_checkpoints(trial);
  {
    std::lock_guard lock(shared_mu_);
    stop_answers_.erase(trial_id);
  }

  if (live->stop_requested) {
    if (status.continues) {  // the executor restarted the job; it must not run again
      Handle next = live->handle;
      next.attempt += 1;
      live->executor->kill(next);
    }
    end_trial(trial, live->stop_state, live->stop_reason);
    return;
  }
  const int64_t max_attempts = exp ? exp->max_attempts : 1;
  switch (status.kind) {
    case ExitKind::succeeded:
      end_trial(trial, TrialState::completed, "trained to the last step");
      return;
    case ExitKind::requeue:
      // Preempted or signalled: resumes from its checkpoint; does not count as a failure.
      if (status.continues) {
        continue_attempt(trial, std::move(live), status);
        return;
      }
      trial.state = TrialState::pending;
      store_.update_trial(trial);
      event(trial.experiment_id, trial.id, "attempt_requeued", "worker asked to be requeued: " + status.detail);
      return;
    case ExitKind::usage:
      end_trial(trial, TrialState::failed, "configuration error (exit 2): see " + trial.run_dir + "/stderr.log");
      return;
    default: {
      // Requeued attempts (preemption, time limits) are not failures; count only the others.
      int64_t failures = 0;
      for (const AttemptRow& a : store_.attempts(trial_id))
        failures += a.state == AttemptState::failed || a.state == AttemptState::killed || a.state == AttemptState::lost;
      if (failures < max_attempts) {
        trial.state = TrialState::pending;
        store_.update_trial(trial);
        if (options_.metrics) options_.metrics->trial_failed_attempts(trial.id, exp ? exp->name : "", failures);
        event(trial.experiment_id, trial.id, "attempt_failed",
              "attempt " + std::to_string(trial.attempts) + " failed (" + std::to_string(failures) + " of " +
                  std::to_string(max_attempts) + " allowed failures; " +
                  status.detail + "); retrying from the last checkpoint");
        log("trial " + std::to_string(trial.id) + ": attempt failed (" + status.detail + "), retrying");
      } else {
        end_trial(trial, TrialState::failed,
                  status.detail + " after " + std::to_string(failures) + " failed attempt(s); see " + trial.run_dir +
                      "/stderr.log");
      }
    }
  }
}

void Scheduler::continue_attempt(TrialRow& trial, std::unique_ptr<Live> live, const ExitStatus& status) {
  // The executor already requeued the same job (Slurm): its next run is the next attempt.
  Handle next = live->handle;
  next.attempt += 1;
  live->attempt_id = add_attempt(trial.id, next);
  live->handle = next;
  live_[trial.id] = std::move(live);
  if (options_.metrics) {
    auto exp = store_.experiment(trial.experiment_id);
    options_.metrics->trial_active(trial.id, exp ? exp->name : "");
  }
  trial.state = TrialState::running;
  trial.attempts = next.attempt;
  store_.update_trial(trial);
  event(trial.experiment_id, trial.id, "attempt_requeued",
        "attempt " + std::to_string(next.attempt - 1) + " requeued (" + status.detail + "); attempt " +
            std::to_string(next.attempt) + " continues in " + next.executor + " job " + next.external_id);
}

void Scheduler::end_trial(TrialRow& trial, TrialState state, const std::string& reason) {
  if (is_terminal(trial.state)) return;  // a trial ends exactly once
  if (options_.metrics) {
    options_.metrics->trial_inactive(trial.id);
    options_.metrics->trial_ended(trial.id);
  }
  trial.state = state;
  trial.reason = reason;
  trial.ended_at = now_seconds();
  store_.update_trial(trial);
  event(trial.experiment_id, trial.id, std::string("trial_") + trial_state_name(state), reason);
  log("trial " + std::to_string(trial.id) + " " + trial_state_name(state) + ": " + reason);
  maybe_finish_experiment(trial.experiment_id);
}

void Scheduler::maybe_finish_experiment(int64_t experiment_id) {
  auto exp = store_.experiment(experiment_id);
  if (!exp || exp->state != ExperimentState::running) return;
  bool cancelled = false;
  for (const TrialRow& t : store_.trials(experiment_id)) {
    if (!is_terminal(t.state)) return;
    cancelled |= t.state == TrialState::cancelled;
  }
  const ExperimentState state = cancelled ? ExperimentState::cancelled : ExperimentState::completed;
  store_.set_experiment_state(experiment_id, state, now_seconds());
  event(experiment_id, 0, std::string("experiment_") + experiment_state_name(state),
        "experiment " + exp->name + " " + experiment_state_name(state));
}

void Scheduler::launch_ready() {
  int64_t queued = 0;
  for (const ExperimentRow& exp : store_.experiments()) {
    if (exp.state != ExperimentState::running) continue;
    std::vector<TrialRow> trials = store_.trials(exp.id);
    if (launch_batched(exp, trials)) continue;
    int64_t running = 0;
    for (const TrialRow& t : trials) running += t.state == TrialState::running;
    for (TrialRow& t : trials) {
      if (running >= exp.max_concurrent) break;
      if (t.state != TrialState::pending) continue;
      const size_t before = live_.size();
      launch(t, exp);
      if (live_.size() == before) break;  // no capacity now
      ++running;
    }
    for (const TrialRow& t : trials) queued += t.state == TrialState::pending;
  }
  if (options_.metrics) options_.metrics->set_queue_length(queued);
}

Executor* Scheduler::prepare_launch(TrialRow& trial, const ExperimentRow& exp, LaunchSpec& spec) {
  worker::ParsedConfig parsed;
  try {
    parsed = worker::parse_config_text(trial.config_toml, "trial " + std::to_string(trial.id));
  } catch (const std::exception& e) {
    end_trial(trial, TrialState::failed, std::string("invalid stored config: ") + e.what());
    return nullptr;
  }
  const worker::TrialConfig& cfg = parsed.config;
  auto ex = executors_.find(cfg.resources.executor);
  if (ex == executors_.end()) {
    end_trial(trial, TrialState::failed, "executor \"" + cfg.resources.executor + "\" is not available in this controller");
    return nullptr;
  }
  spec.trial_id = trial.id;
  spec.attempt = trial.attempts + 1;
  spec.label = exp.name + "/" + std::to_string(trial.index);
  spec.run_dir = trial.run_dir;
  spec.cpus = cfg.train.threads > 0 ? static_cast<int>(cfg.train.threads) : 1;
  spec.gpus = cfg.train.device == "cuda" ? std::max<int>(1, static_cast<int>(cfg.resources.gpus_per_node)) : 0;
  spec.resources = cfg.resources;
  const fs::path config_path = fs::path(trial.run_dir) / "config.toml";
  spec.argv = {options_.trainer.string(), "--config", config_path.string(), "--run-dir", trial.run_dir,
               "--report-url", options_.report_url, "--trial-id", std::to_string(trial.id)};
  spec.env["PRECON_TRIAL_TOKEN"] = trial.token;
  spec.env["PRECON_TRIAL_ID"] = std::to_string(trial.id);
  try {
    ex->second->validate(spec);
  } catch (const std::exception& e) {
    end_trial(trial, TrialState::failed, std::string("cannot run on ") + cfg.resources.executor + ": " + e.what());
    return nullptr;
  }
  return ex->second;
}

void Scheduler::write_config(const TrialRow& trial) {
  fs::create_directories(trial.run_dir);
  std::ofstream(fs::path(trial.run_dir) / "config.toml") << trial.config_toml;
}

void Scheduler::launch(TrialRow& trial, const ExperimentRow& exp) {
  LaunchSpec spec;
  Executor* ex = prepare_launch(trial, exp, spec);
  if (ex == nullptr) return;
  if (!ex->has_capacity(spec)) return;
  write_config(trial);
  Handle handle;
  // Active before the worker can report; a failed launch ends the trial, which removes it again.
  if (options_.metrics) options_.metrics->trial_active(trial.id, exp.name);
  try {
    handle = ex->launch(spec);
  } catch (const std::exception& e) {
    end_trial(trial, TrialState::failed, std::string("launch failed: ") + e.what());
    return;
  }
  record_launch(trial, exp, ex, handle);
}

bool Scheduler::launch_batched(const ExperimentRow& exp, std::vector<TrialRow>& trials) {
  // Executors that queue and throttle themselves (Slurm job arrays) take every ready trial at once.
  std::vector<TrialRow*> rows;
  std::vector<LaunchSpec> specs;
  Executor* batcher = nullptr;
  for (TrialRow& t : trials) {
    if (t.state != TrialState::pending) continue;
    LaunchSpec spec;
    Executor* ex = prepare_launch(t, exp, spec);
    if (ex == nullptr) continue;
    if (!ex->batches()) return batcher != nullptr;  // first pending trial decides; others wait for the next tick
    if (batcher != nullptr && ex != batcher) continue;
    batcher = ex;
    write_config(t);
    if (options_.metrics) options_.metrics->trial_active(t.id, exp.name);
    rows.push_back(&t);
    specs.push_back(std::move(spec));
  }
  if (batcher == nullptr) return false;
  std::vector<Executor::BatchResult> results = batcher->launch_batch(specs, static_cast<int>(exp.max_concurrent));
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i < results.size() && results[i].handle) {
      record_launch(*rows[i], exp, batcher, *results[i].handle);
    } else {
      end_trial(*rows[i], TrialState::failed,
                std::string("launch failed: ") + (i < results.size() ? results[i].error : "no result from the executor"));
    }
  }
  return true;
}

int64_t Scheduler::add_attempt(int64_t trial_id, const Handle& handle) {
  AttemptRow a;
  a.trial_id = trial_id;
  a.number = handle.attempt;
  a.executor = handle.executor;
  a.external_id = handle.external_id;
  a.nodes = handle.nodes;
  a.started_at = now_seconds();
  return store_.add_attempt(a);
}

void Scheduler::record_launch(TrialRow& trial, const ExperimentRow& exp, Executor* ex, const Handle& handle) {
  auto live = std::make_unique<Live>();
  live->attempt_id = add_attempt(trial.id, handle);
  live->handle = handle;
  live->executor = ex;
  live->start_step = trial.last_step;
  live_[trial.id] = std::move(live);
  if (options_.metrics) options_.metrics->attempt_started(handle.executor);
  trial.state = TrialState::running;
  trial.attempts = handle.attempt;
  if (trial.started_at == 0) trial.started_at = now_seconds();
  store_.update_trial(trial);
  event(exp.id, trial.id, "attempt_started",
        "attempt " + std::to_string(handle.attempt) + " started (" + handle.executor + " " + handle.external_id + ")");
  log("trial " + std::to_string(trial.id) + " (" + trial.params_json + ") attempt " + std::to_string(handle.attempt) +
      " started");
}

void Scheduler::request_stop(int64_t trial_id, TrialState final_state, const std::string& reason) {
  auto trial = store_.trial(trial_id);
  if (!trial || is_terminal(trial->state)) return;
  auto it = live_.find(trial_id);
  if (it == live_.end()) {  // not running: ends now
    end_trial(*trial, final_state, reason);
    return;
  }
  Live& live = *it->second;
  if (live.stop_requested) return;
  live.stop_requested = true;
  live.stop_state = final_state;
  live.stop_reason = reason;
  live.stop_at = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(shared_mu_);
    stop_answers_[trial_id] = reason;
  }
  // An attempt that has not reported yet (a Slurm job still pending, a worker still starting)
  // cannot hear the stop answer: signal it now instead of after the grace period.
  if (live.start_step >= 0 && trial->last_step == live.start_step) {
    live.executor->signal_stop(live.handle);
    live.sigterm_sent = true;
  }
}

void Scheduler::escalate_stops() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [trial_id, live] : live_) {
    if (!live->stop_requested) continue;
    if (!live->sigterm_sent && now - live->stop_at > options_.stop_grace) {
      live->executor->signal_stop(live->handle);
      live->sigterm_sent = true;
    } else if (!live->sigkill_sent && now - live->stop_at > 2 * options_.stop_grace) {
      live->executor->kill(live->handle);
      live->sigkill_sent = true;
    }
  }
}

void Scheduler::scan_checkpoints() {
  // Running trials write and delete checkpoints as they go; record them every few seconds so
  // the store sees each one (and its deletion) even when it lives shorter than the attempt.
  const auto now = std::chrono::steady_clock::now();
  for (auto& [trial_id, live] : live_) {
    if (now - live->checkpoints_scanned < std::chrono::seconds(2)) continue;
    live->checkpoints_scanned = now;
    if (auto trial = store_.trial(trial_id)) record_checkpoints(*trial);
  }
}

void Scheduler::record_checkpoints(const TrialRow& trial) {
  if (trial.run_dir.empty() || !fs::exists(fs::path(trial.run_dir) / "checkpoints")) return;
  std::vector<CheckpointRow> known = store_.checkpoints(trial.id);
  std::set<int64_t> on_disk;
  auto exp = store_.experiment(trial.experiment_id);
  for (const auto& info : worker::list_checkpoints(trial.run_dir)) {
    on_disk.insert(info.step);
    bool seen = false;
    for (const CheckpointRow& c : known) seen |= c.step == info.step;
    if (seen) continue;
    CheckpointRow c;
    c.trial_id = trial.id;
    c.step = info.step;
    c.path = info.dir.string();
    c.created_at = now_seconds();
    // The worker records the objective it ranked the checkpoint by (keep_best); older
    // checkpoints without it take the stored metric at or before their step.
    std::optional<double> objective = worker::checkpoint_objective(info.dir);
    if (!objective && exp) {
      if (auto m = store_.metric_at_or_before(trial.id, exp->objective_metric, info.step)) objective = m->value;
    }
    c.objective = objective.value_or(NAN);
    store_.add_checkpoint(c);
  }
  // The worker applies keep_checkpoints and keep_best; record what it deleted.
  for (const CheckpointRow& c : known)
    if (c.deleted_at == 0 && !on_disk.count(c.step)) store_.mark_checkpoint_deleted(c.id, now_seconds());
}

int64_t Scheduler::submit(const Recipe& recipe, const std::vector<TrialSpec>& specs, const fs::path& run_root) {
  return call([&]() -> int64_t {
    const worker::TrialConfig& base = recipe.base.config;
    ExperimentRow exp;
    exp.name = base.experiment.name;
    exp.description = base.experiment.description;
    exp.recipe_path = recipe.source;
    exp.recipe_text = recipe.text;
    exp.overrides_json = json(recipe.overrides).dump();
    exp.objective_metric = base.objective.metric;
    exp.objective_mode = base.objective.mode;
    exp.max_concurrent = recipe.sweep.max_concurrent;
    exp.max_attempts = recipe.sweep.max_attempts;
    const EarlyStopConfig& es = recipe.sweep.early_stop;
    exp.early_stop_json = json{{"method", es.method},
                               {"metric", es.metric.empty() ? base.objective.metric : es.metric},
                               {"mode", es.mode.empty() ? base.objective.mode : es.mode},
                               {"min_step", es.min_step},
                               {"reduction_factor", es.reduction_factor},
                               {"min_early_stopping_rate", es.min_early_stopping_rate},
                               {"n_startup_trials", es.n_startup_trials},
                               {"interval", es.interval}}
                              .dump();
    exp.created_at = now_seconds();
    // Unique, readable run root per experiment: <root>/<name>-<timestamp>.
    const std::string stamp = std::to_string(static_cast<int64_t>(exp.created_at * 1000));
    const fs::path root = fs::absolute(run_root) / (sanitize(exp.name) + "-" + stamp);
    exp.run_root = root.string();
    std::vector<TrialRow> rows;
    for (const TrialSpec& s : specs) {
      TrialRow t;
      t.index = s.index;
      t.params_json = s.params.dump();
      t.config_toml = s.config_toml;
      t.run_dir = (root / ("trial-" + std::to_string(s.index))).string();
      t.token = random_hex_token();
      t.created_at = exp.created_at;
      rows.push_back(t);
    }
    const int64_t id = store_.create_experiment(exp, rows);
    {
      std::lock_guard lock(shared_mu_);
      objective_metric_[id] = exp.objective_metric;
      for (const TrialRow& t : store_.trials(id)) tokens_[t.id] = {t.token, id};
    }
    event(id, 0, "experiment_submitted",
          "experiment " + exp.name + " with " + std::to_string(specs.size()) + " trial(s)");
    log("experiment " + std::to_string(id) + " (" + exp.name + "): " + std::to_string(specs.size()) + " trial(s)");
    return id;
  });
}

void Scheduler::cancel_experiment(int64_t experiment_id, const std::string& reason) {
  call([&] {
    if (!store_.experiment(experiment_id)) throw std::out_of_range("no experiment " + std::to_string(experiment_id));
    for (const TrialRow& t : store_.trials(experiment_id))
      if (!is_terminal(t.state)) request_stop(t.id, TrialState::cancelled, reason);
    event(experiment_id, 0, "experiment_cancel", reason);
    return 0;
  });
}

void Scheduler::cancel_trial(int64_t trial_id, const std::string& reason) {
  call([&] {
    if (!store_.trial(trial_id)) throw std::out_of_range("no trial " + std::to_string(trial_id));
    request_stop(trial_id, TrialState::cancelled, reason);
    return 0;
  });
}

bool Scheduler::experiment_done(int64_t experiment_id) {
  auto exp = store_.experiment(experiment_id);
  return exp && exp->state != ExperimentState::running;
}

ReportAnswer Scheduler::report(int64_t trial_id, const std::string& token, const std::vector<MetricPoint>& points) {
  int64_t experiment_id = 0;
  std::string objective;
  {
    std::lock_guard lock(shared_mu_);
    auto it = tokens_.find(trial_id);
    if (it == tokens_.end()) throw std::out_of_range("no trial " + std::to_string(trial_id));
    if (it->second.first.size() != token.size()) throw std::invalid_argument("wrong token for this trial");
    unsigned diff = 0;
    for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned>(token[i] ^ it->second.first[i]);
    if (diff != 0) throw std::invalid_argument("wrong token for this trial");
    experiment_id = it->second.second;
    objective = objective_metric_[experiment_id];
  }
  store_.insert_metrics(trial_id, points);
  if (options_.metrics) options_.metrics->report(trial_id, points);
  std::vector<std::pair<int64_t, double>> objective_points;
  for (const MetricPoint& p : points)
    if (p.name == objective && std::isfinite(p.value)) objective_points.emplace_back(p.step, p.value);
  if (!objective_points.empty()) {
    post([this, trial_id, objective_points] {
      for (auto [step, value] : objective_points) early_stop_check(trial_id, step, value);
    });
  }
  std::lock_guard lock(shared_mu_);
  auto stop = stop_answers_.find(trial_id);
  if (stop != stop_answers_.end()) return {true, stop->second};
  return {};
}

void Scheduler::early_stop_check(int64_t trial_id, int64_t step, double value) {
  auto trial = store_.trial(trial_id);
  if (!trial || is_terminal(trial->state)) return;
  // A trial already being stopped gets no further decisions (its late reports are stored only).
  if (auto live = live_.find(trial_id); live != live_.end() && live->second->stop_requested) return;
  const int64_t exp_id = trial->experiment_id;
  auto& stopper = stoppers_[exp_id];
  if (!stopper) {
    auto exp = store_.experiment(exp_id);
    if (!exp) return;
    json es = json::parse(exp->early_stop_json.empty() ? "{}" : exp->early_stop_json);
    EarlyStopSettings s;
    s.method = es.value("method", "none");
    s.mode = es.value("mode", exp->objective_mode);
    s.metric = exp->objective_metric;
    s.min_step = es.value("min_step", int64_t{100});
    s.reduction_factor = es.value("reduction_factor", int64_t{3});
    s.min_early_stopping_rate = es.value("min_early_stopping_rate", int64_t{0});
    s.n_startup_trials = es.value("n_startup_trials", int64_t{5});
    s.interval = std::max<int64_t>(1, es.value("interval", int64_t{1}));
    stopper = std::make_unique<EarlyStopper>(s);
    // History from the store (a restarted controller has no curves in memory).
    for (const TrialRow& t : store_.trials(exp_id))
      for (const MetricPoint& p : store_.metrics(t.id, exp->objective_metric))
        if (std::isfinite(p.value)) curves_[exp_id][t.id][p.step] = p.value;
  }
  // A resent or resumed step was judged already: each point is decided once.
  auto& own = curves_[exp_id][trial_id];
  if (own.count(step) && stopper_seen_[trial_id].count(step)) return;
  own[step] = value;
  stopper_seen_[trial_id].insert(step);
  std::set<int64_t> completed;
  for (const TrialRow& t : store_.trials(exp_id))
    if (t.state == TrialState::completed) completed.insert(t.id);
  StopDecision d = stopper->report(trial_id, step, value, curves_[exp_id], completed);
  if (options_.metrics) options_.metrics->early_stop_decision(d.stop);
  if (!d.stop) return;
  event(exp_id, trial_id, "early_stop", d.reason, d.data);
  request_stop(trial_id, TrialState::pruned, d.reason);
}

}  // namespace precon::orch
