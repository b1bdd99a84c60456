// The scheduler's core: its thread and strand, submitting experiments, and the report path that
// worker HTTP handlers call. The rest of the class lives beside it by concern (see
// scheduler_live.h).
#include "orchestrator/sched/scheduler.h"
#include "orchestrator/store/objectives.h"

#include <boost/asio/post.hpp>
#include <cctype>
#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>

#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/sched/scheduler_live.h"
#include "orchestrator/store/disk_space.h"
#include "orchestrator/store/token_hash.h"
#include "worker/common/file_io.h"

namespace precon::orch {

namespace fs = std::filesystem;
using nlohmann::json;

uintmax_t sched_detail::stderr_size(const std::string& run_dir) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(trainer_stderr_path(run_dir), ec);
  return ec ? 0 : size;
}

namespace {

std::string sanitize(const std::string& name) {
  std::string out;
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (!out.empty() && out[0] == '.') out[0] = '_';  // a leading dot would hide the run directory
  return out.empty() ? "experiment" : out;
}

// An experiment's run root, made now by mkdir (which never follows a link) so that nobody can
// have put a link or a directory of their own at its name first: a taken name gets -1, -2, ….
// When it cannot be made at all (the run root is under a file, read-only) the name is kept and
// the trials' launch reports why.
fs::path make_experiment_root(const fs::path& wanted) {
  fs::path root = wanted;
  std::error_code ec;
  worker::create_run_directory(root, true, ec);
  for (int n = 1; ec == std::errc::file_exists && n <= 100; ++n) {
    root = wanted.string() + "-" + std::to_string(n);
    worker::create_run_directory(root, true, ec);
  }
  if (ec == std::errc::file_exists)
    throw std::runtime_error("cannot make a run directory for the experiment: " + wanted.string() +
                             " and the next 100 names after it are taken");
  return ec ? wanted : root;
}
}  // namespace

std::string random_hex_token(size_t chars) {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (size_t i = 0; i < chars; ++i) t += hex[rd() % 16];
  return t;
}

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
  e.time = epoch_seconds();
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
  // Objectives, and the tokens of trials that were given one (no other trial can report), for
  // report handlers.
  {
    std::lock_guard lock(shared_mu_);
    for (const ExperimentRow& exp : store_.experiments()) objective_metric_[exp.id] = exp.objective_metric;
    for (const TrialBrief& t : store_.trials_with_tokens())
      tokens_[t.id] = {t.token_hash, t.experiment_id, is_terminal(t.state)};
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

void Scheduler::note_store_error(const std::exception& e) {
  if (dynamic_cast<const StoreError*>(&e) != nullptr) tick_store_error_ = e.what();
}

std::optional<Scheduler::StoreFailure> Scheduler::store_failure() {
  std::lock_guard lock(shared_mu_);
  return store_failure_;
}

void Scheduler::tick() {
  tick_store_error_.clear();
  try {
    collect_finished();
    follow_metrics();
    escalate_stops();
    scan_checkpoints();
    launch_ready();
  } catch (const std::exception& e) {
    note_store_error(e);
    log(std::string("scheduler error: ") + e.what());
  }
  {
    // A pass that met no store error clears the failure: what waited to be stored has been (an
    // ended attempt is retried at every pass until it is).
    std::lock_guard lock(shared_mu_);
    if (tick_store_error_.empty()) store_failure_.reset();
    else if (!store_failure_) store_failure_ = StoreFailure{std::chrono::steady_clock::now(), tick_store_error_};
    else store_failure_->error = tick_store_error_;
  }
  timer_->expires_after(options_.poll_interval);
  timer_->async_wait([this](const boost::system::error_code& ec) {
    if (!ec) tick();
  });
}

int64_t Scheduler::submit(const Recipe& recipe, const std::vector<TrialSpec>& specs, const fs::path& run_root) {
  return call([&]() -> int64_t {
    // Refused whole, with the reason, rather than failing in the middle on a full disk.
    check_disk_room(store_.path(), (specs.size() + 1) * (recipe.text.size() + 1024));
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
    // Hyperband's longest run: the key, else the longest train.steps a trial can have.
    const int64_t max_step = longest_run(recipe.sweep, base.train.steps);
    json early_stop = json{{"method", es.method},
                               {"metric", es.metric.empty() ? base.objective.metric : es.metric},
                               {"mode", es.mode.empty() ? base.objective.mode : es.mode},
                               {"min_step", es.min_step},
                               {"reduction_factor", es.reduction_factor},
                               {"min_early_stopping_rate", es.min_early_stopping_rate},
                               {"n_startup_trials", es.n_startup_trials},
                               {"interval", es.interval},
                               {"max_step", max_step},
                               {"min_dominating", es.min_dominating},
                               // asha and hyperband promote the trials they stopped (scheduler_promote.cpp);
                               // bohb keeps Optuna's composition, in which a pruned trial has ended.
                               {"promote", recipe.sweep.method != "bohb"}};
    // Several objectives: kept here (store/objectives.h), the first also as objective_metric/mode.
    const std::vector<Objective> objectives = recipe_objectives(base.objective);
    if (objectives.size() > 1) {
      std::vector<StoredObjective> stored;
      for (const Objective& o : objectives) stored.push_back({o.metric, o.maximize ? "max" : "min"});
      early_stop["objectives"] = objectives_json(stored);
    }
    exp.early_stop_json = early_stop.dump();
    exp.created_at = epoch_seconds();
    // Unique, readable run root per experiment: <root>/<name>-<timestamp>; the store names each
    // trial's run directory after its id in it (trial-<id>).
    const std::string stamp = std::to_string(static_cast<int64_t>(exp.created_at * 1000));
    exp.run_root = make_experiment_root(fs::absolute(run_root) / (sanitize(exp.name) + "-" + stamp)).string();
    std::vector<TrialRow> rows;
    for (const TrialSpec& s : specs) {
      TrialRow t;
      t.index = s.index;
      t.params_json = s.params.dump();
      t.config_toml = s.config_toml;
      t.created_at = exp.created_at;
      rows.push_back(t);
    }
    const int64_t id = store_.create_experiment(exp, rows);
    {
      // Its trials get their tokens at launch (issue_token); until then none can report.
      std::lock_guard lock(shared_mu_);
      objective_metric_[id] = exp.objective_metric;
    }
    // TPE stores its first trial now and proposes the others as slots free up (scheduler_tpe.cpp).
    const bool tpe = !recipe.study.present && (!recipe.sweep.parameters.empty() || !recipe.sweep.grids.empty()) &&
                     proposes_trials(recipe.sweep);
    const std::string count = tpe ? std::to_string(recipe.sweep.samples) + " trial(s), proposed by " + std::string(recipe.sweep.method == "nsga2" ? "nsga2" : "tpe") + " as they run"
                                  : std::to_string(specs.size()) + " trial(s)";
    event(id, 0, "experiment_submitted", "experiment " + exp.name + " with " + count);
    log("experiment " + std::to_string(id) + " (" + exp.name + "): " + count);
    return id;
  });
}

bool Scheduler::experiment_done(int64_t experiment_id) {
  auto exp = store_.experiment(experiment_id);
  return exp && exp->state != ExperimentState::running;
}

ReportAnswer Scheduler::report(int64_t trial_id, const std::string& token, const std::vector<MetricPoint>& points,
                               WriteWait wait) {
  int64_t experiment_id = 0;
  std::string objective;
  {
    std::lock_guard lock(shared_mu_);
    auto it = tokens_.find(trial_id);
    // The same work and the same answer whether the trial exists or not.
    const TrialAuth* auth = it == tokens_.end() ? nullptr : &it->second;
    if (!token_matches(token, auth ? auth->token_hash : std::string_view()) || !auth)
      throw ReportRefused(ReportRefused::kUnauthorized, "unknown trial or wrong token for it");
    if (auth->finished)
      throw ReportRefused(ReportRefused::kFinished,
                          "trial " + std::to_string(trial_id) + " has ended; its metrics are final");
    experiment_id = auth->experiment_id;
    objective = objective_metric_[experiment_id];
  }
  store_.insert_metrics(trial_id, points, wait);
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

}  // namespace precon::orch
