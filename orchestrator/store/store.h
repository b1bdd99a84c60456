// The controller's SQLite store (WAL mode, versioned migrations). The controller is the only
// writer; workers never open the database. Thread-safety: every method may be called from any
// thread; writes are serialised on one connection, reads use per-thread connections (WAL lets
// them run beside the writer).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace precon::orch {

class StoreError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A write that could not have the database for as long as it might wait: another connection held
// its lock (another process in a write transaction, `sqlite3 precon.db "BEGIN EXCLUSIVE"`). Nothing
// of it was written.
class StoreBusyError : public StoreError {
  using StoreError::StoreError;
};

// How long a write may wait for the database while another connection holds its lock.
enum class WriteWait {
  kPatient,  // up to 10 s (the scheduler's writes, which it retries)
  kBrief,    // up to 1 s, not at all while writes are known to be blocked (a worker's report: the
             // caller answers 503 at once and the worker sends it again); its turn among the
             // controller's own writes it waits for as long as it takes
};

// Trial lifecycle. A trial ends exactly once, in one of the terminal states.
enum class TrialState { pending, running, completed, failed, cancelled, pruned };
const char* trial_state_name(TrialState s);
std::optional<TrialState> parse_trial_state(const std::string& s);
bool is_terminal(TrialState s);

// A trial is known everywhere by its id (trials.id): "trial <id>" in text, this as the name of
// its run directory, "<experiment>/trial-<id>" as its Slurm job name. Its sweep index is only the
// order of the sweep, never shown as a name.
std::string trial_dir_name(int64_t trial_id);

enum class ExperimentState { running, completed, cancelled };
const char* experiment_state_name(ExperimentState s);

// Attempt = one launch of a trial's worker. `open` until its end is recorded.
enum class AttemptState { open, succeeded, failed, requeue, killed, lost, stopped };
const char* attempt_state_name(AttemptState s);

struct ExperimentRow {
  int64_t id = 0;
  std::string name;
  std::string description;
  std::string recipe_path;      // where the recipe came from ("" when submitted over HTTP)
  std::string recipe_text;      // the recipe as submitted
  std::string overrides_json;   // JSON array of --set strings
  ExperimentState state = ExperimentState::running;
  std::string objective_metric = "val_loss";
  std::string objective_mode = "min";
  int64_t max_concurrent = 1;
  int64_t max_attempts = 1;
  std::string early_stop_json = "{}";  // the [sweep.early_stop] settings as JSON
  std::string run_root;                // directory holding the trials' run dirs
  double created_at = 0;               // unix seconds
  double ended_at = 0;                 // 0 while running
};

struct TrialRow {
  int64_t id = 0;
  int64_t experiment_id = 0;
  int64_t index = 0;            // position in the expanded sweep, 0-based: an order, not a name
  std::string params_json;      // the swept keys and values, e.g. {"optimizer.name": "muon"}
  std::string config_toml;      // the resolved trial config (every key)
  TrialState state = TrialState::pending;
  std::string reason;           // why it ended (exit code meaning, early-stop rule, cancel)
  std::string run_dir;          // "" at creation: <run_root>/trial-<id> (see create_experiment)
  std::string token_hash;       // hash_token() of the bearer token its current attempt reports
                                // with (token_hash.h); "" before its first launch
  int64_t attempts = 0;         // launches so far
  int64_t last_step = 0;        // highest step reported
  double created_at = 0, started_at = 0, ended_at = 0;
};

// What report authentication needs of a trial (store.trials_with_tokens()).
struct TrialBrief {
  int64_t id = 0;
  int64_t experiment_id = 0;
  TrialState state = TrialState::pending;
  std::string token_hash;
};

struct AttemptRow {
  int64_t id = 0;
  int64_t trial_id = 0;
  int64_t number = 0;           // 1-based per trial
  std::string executor;         // "local" | "slurm"
  std::string external_id;      // pid (local) or Slurm job id
  std::string nodes;            // node list
  AttemptState state = AttemptState::open;
  int64_t exit_code = -1;       // -1 while open or unknown
  std::string detail;           // free text: signal, Slurm state, ...
  double started_at = 0, ended_at = 0;
};

struct MetricPoint {
  std::string name;
  int64_t step = 0;
  double value = 0;  // NaN stored as NULL and returned as NaN
  double time = 0;
};

// A metric point with the trial it belongs to (Store::best_metric).
struct TrialMetricPoint {
  int64_t trial_id = 0;
  MetricPoint point;
};

struct CheckpointRow {
  int64_t id = 0;
  int64_t trial_id = 0;
  int64_t step = 0;
  std::string path;
  double objective = 0;  // the objective metric at that step (NaN if unknown)
  double created_at = 0;
  double deleted_at = 0;  // 0 while on disk
};

struct EventRow {
  int64_t id = 0;               // monotonically increasing: the cursor
  double time = 0;
  int64_t experiment_id = 0;    // 0 = controller-wide
  int64_t trial_id = 0;         // 0 = experiment-wide
  std::string kind;             // "trial_started", "early_stop", "attempt_failed", ...
  std::string message;          // for humans
  std::string data_json = "{}"; // structured details (e.g. the early-stop rule and values)
};

class Store {
 public:
  // Opens (creating if needed) and migrates to the current schema version. Throws StoreError
  // naming the file for an unreadable file or a database written by a newer precon.
  explicit Store(const std::filesystem::path& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Called after every write with its operation ("insert_metrics", "update_trial", ...) and the
  // seconds it held the writer, not counting the wait for it (the /metrics write histogram). Set
  // it before other threads use the store; it must be thread-safe and must not call the store.
  void set_write_observer(std::function<void(const char* op, double seconds)> observer);

  int schema_version() const;
  const std::filesystem::path& path() const;

  // Since when writes have found the database locked by another connection with none going
  // through (steady clock); nullopt while they go through. When no write is under way it tries
  // the lock itself, without waiting, so the answer stays current when nothing else writes.
  std::optional<std::chrono::steady_clock::time_point> write_blocked_since() const;

  // Experiments and their trials are created in one transaction. A trial given no run_dir gets
  // <run_root>/trial-<id>.
  int64_t create_experiment(ExperimentRow experiment, std::vector<TrialRow> trials);
  // One more trial of a running experiment (sweeps that make their trials as they go: TPE), its
  // run_dir <run_root>/trial-<id> unless given. Returns its id.
  int64_t add_trial(const ExperimentRow& experiment, TrialRow trial);
  std::optional<ExperimentRow> experiment(int64_t id) const;
  std::optional<ExperimentRow> experiment_by_name(const std::string& name) const;  // newest with that name
  std::vector<ExperimentRow> experiments() const;  // newest first
  std::vector<ExperimentRow> experiments_in_state(ExperimentState state) const;  // oldest first
  void set_experiment_state(int64_t id, ExperimentState state, double ended_at);

  std::optional<TrialRow> trial(int64_t id) const;
  std::vector<TrialRow> trials(int64_t experiment_id) const;  // by index
  std::vector<TrialRow> trials_in_state(TrialState state) const;
  std::map<TrialState, int64_t> trial_state_counts() const;  // over every experiment; absent = 0
  // The experiment's trials by state (absent = 0), and when its first trial started (0 = none),
  // from indexes: no trial row is read.
  std::map<TrialState, int64_t> trial_state_counts(int64_t experiment_id) const;
  double first_trial_start(int64_t experiment_id) const;
  // At most `limit` pending trials of the experiment, in sweep order.
  std::vector<TrialRow> pending_trials(int64_t experiment_id, size_t limit) const;
  // Ids of the experiment's trials in `state`, from the index.
  std::vector<int64_t> trial_ids(int64_t experiment_id, TrialState state) const;
  // The experiment's trials that have stored metrics, by id (one index probe each).
  std::vector<int64_t> trials_with_metrics(int64_t experiment_id) const;
  // Trials that were given a report token (the others cannot have reported), any experiment.
  std::vector<TrialBrief> trials_with_tokens() const;
  // Ends every pending trial of the experiment as cancelled with `reason`, each with a
  // trial_cancelled event, in one transaction of two statements. Returns their ids.
  std::vector<int64_t> cancel_pending_trials(int64_t experiment_id, const std::string& reason, double when);
  // A pruned trial goes on (early stopping promoted it): pending again with `reason`, its ended_at
  // cleared, and `event` recorded, in one transaction. False, with nothing written, when the trial
  // is not pruned (already promoted, or still stopping).
  bool promote_trial(int64_t trial_id, const std::string& reason, const EventRow& event);
  // Writes every mutable field of the row (state, reason, attempts, last_step, times, run_dir).
  // last_step only rises (insert_metrics may have raised it since the row was read).
  void update_trial(const TrialRow& trial);
  // The token of the trial's next attempt, as hash_token() (update_trial leaves it alone).
  void set_trial_token_hash(int64_t trial_id, const std::string& token_hash);

  int64_t add_attempt(AttemptRow attempt);  // returns its id
  void update_attempt(const AttemptRow& attempt);
  std::vector<AttemptRow> attempts(int64_t trial_id) const;
  std::vector<AttemptRow> open_attempts() const;  // ended_at == 0, any trial

  // Idempotent on (trial, name, step): a resent point replaces the stored one. One transaction.
  // Returns the number of points written. Also raises the trial's last_step. StoreBusyError when
  // the database stays locked past `wait`.
  size_t insert_metrics(int64_t trial_id, const std::vector<MetricPoint>& points,
                        WriteWait wait = WriteWait::kPatient);
  std::vector<std::string> metric_names(int64_t trial_id) const;
  // The series in step order. With max_points > 0 and more points stored, it is downsampled
  // into buckets of consecutive steps keeping each bucket's first, last, min and max points
  // (so spikes survive), at most max_points in all.
  std::vector<MetricPoint> metrics(int64_t trial_id, const std::string& name, size_t max_points = 0) const;
  // Loads every series of the trial into the query cache (a restarted controller warms its
  // running trials so that their first query does not read SQLite). Stops early once *cancel.
  void warm_series(int64_t trial_id, const std::atomic<bool>* cancel = nullptr) const;
  // Value at exactly `step`, or the last one at or before it.
  std::optional<MetricPoint> metric_at_or_before(int64_t trial_id, const std::string& name, int64_t step) const;
  std::optional<MetricPoint> last_metric(int64_t trial_id, const std::string& name) const;
  // The best finite point of the metric over every trial of the experiment: the lowest, or the
  // highest when `highest`; among equal values the first trial by id, then its first step. One SQL
  // query over that metric's stored points (nothing is read into the series cache); none when no
  // trial has a finite point of it.
  std::optional<TrialMetricPoint> best_metric(int64_t experiment_id, const std::string& name, bool highest) const;
  // Queries of metric points answered so far (metrics, metric_at_or_before, last_metric,
  // best_metric): what a route reads (tests).
  uint64_t metric_reads() const;
  int64_t metric_count(int64_t trial_id) const;
  // metrics() serves series from an in-memory cache, loaded on a series' first query and kept
  // current by insert_metrics. It holds at most about `points` points (default 4M, ~100 MB);
  // the least recently queried series are dropped first.
  void set_metric_cache_limit(size_t points);
  size_t metric_cache_points() const;  // points cached now (tests, the /metrics page)

  int64_t add_checkpoint(CheckpointRow checkpoint);  // idempotent on (trial, step)
  void mark_checkpoint_deleted(int64_t checkpoint_id, double when);
  std::vector<CheckpointRow> checkpoints(int64_t trial_id) const;  // by step

  int64_t add_event(EventRow event);  // returns the new cursor
  // Events with id > cursor, oldest first; experiment_id 0 = all experiments.
  std::vector<EventRow> events_since(int64_t cursor, size_t limit, int64_t experiment_id = 0) const;
  // The experiment's events of one kind ("early_stop", "trial_promoted"), oldest first.
  std::vector<EventRow> events_of_kind(int64_t experiment_id, const std::string& kind) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace precon::orch
