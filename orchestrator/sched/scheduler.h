// The one owner of trial state. Every mutation of experiments, trials and attempts happens on the
// scheduler's own thread (its strand); HTTP handlers and the CLI post work to it and wait. Metric
// ingestion writes to the store directly (the store serialises writes) and only hands the
// objective's points to the strand for early stopping.
//
// The class is one owner split by concern: scheduler.cpp (thread, submit, reports),
// scheduler_launch.cpp (launching, batches), scheduler_outcome.cpp (ended attempts: retry, requeue,
// fail; ending trials), scheduler_checkpoints.cpp, scheduler_stops.cpp (cancel, early stopping,
// stop escalation) and scheduler_reconcile.cpp (adoption after a restart); scheduler_live.h holds
// the per-trial runtime state they share.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "orchestrator/exec/executor.h"
#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/recipe/tpe_sweep.h"
#include "orchestrator/sched/early_stop.h"
#include "orchestrator/sched/metrics_follower.h"
#include "orchestrator/store/store.h"

namespace precon::orch {

class ControllerMetrics;

struct SchedulerOptions {
  std::string report_url;                         // where workers POST metrics (…/api/v1/report)
  std::filesystem::path trainer;                  // the precon-train program
  std::chrono::milliseconds poll_interval{250};   // executor polling and launching
  std::chrono::milliseconds stop_grace{20000};    // stop answer, then SIGTERM; SIGKILL after 2x this
  std::function<void(const std::string&)> log;    // progress lines
  ControllerMetrics* metrics = nullptr;           // /metrics: counters and per-trial series; may be null
};

// A random hex token (admin or per-trial).
std::string random_hex_token(size_t chars = 32);

// A report the scheduler refuses: kUnauthorized (no such trial, no token issued yet, or a wrong
// one: one answer for all, so trial ids cannot be probed) or kFinished (the trial has ended; its
// metrics are final).
class ReportRefused : public std::runtime_error {
 public:
  enum Kind { kUnauthorized, kFinished };
  ReportRefused(Kind kind, const std::string& message) : std::runtime_error(message), kind(kind) {}
  Kind kind;
};

// The answer to a worker's report.
struct ReportAnswer {
  bool stop = false;
  std::string reason;
};

class Scheduler {
 public:
  Scheduler(Store& store, std::map<std::string, Executor*> executors, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Reconciles attempts left open by a previous controller (adopting running workers), then
  // starts polling and launching on the scheduler thread.
  void start();
  void stop();  // stops the thread; running workers keep running (a restart adopts them)

  // Creates the experiment, its trials and run directories from an expanded recipe. Throws
  // worker::ConfigError / std::invalid_argument for bad input; nothing is stored then.
  int64_t submit(const Recipe& recipe, const std::vector<TrialSpec>& trials, const std::filesystem::path& run_root);
  // Cancels every unfinished trial (pending ones at once, running ones via stop/SIGTERM/SIGKILL).
  // False, with nothing done and no event, when the experiment (trial) had already ended;
  // std::out_of_range when there is none.
  bool cancel_experiment(int64_t experiment_id, const std::string& reason = "cancelled by the user");
  bool cancel_trial(int64_t trial_id, const std::string& reason = "cancelled by the user");

  // A worker's report: checks the trial's token first, in constant time (ReportRefused), then
  // that the trial has not ended (ReportRefused kFinished); stores the points idempotently
  // (waiting for a locked database as `wait` says: StoreBusyError past that), feeds early stopping.
  ReportAnswer report(int64_t trial_id, const std::string& token, const std::vector<MetricPoint>& points,
                      WriteWait wait = WriteWait::kPatient);

  // True when every trial of the experiment has ended.
  bool experiment_done(int64_t experiment_id);

  // A store that fails the scheduler's writes (a full disk under the database, a lock another
  // process holds): since when every pass of the scheduler has met an error of it, and the last
  // one. nullopt while it works. The scheduler keeps retrying (`precon serve` recovers once space
  // returns); `precon run` gives up after a bound (cli/run.cpp).
  struct StoreFailure {
    std::chrono::steady_clock::time_point since;
    std::string error;
  };
  std::optional<StoreFailure> store_failure();

  // Runs fn on the scheduler thread and waits for it.
  template <class Fn>
  auto call(Fn&& fn) -> decltype(fn()) {
    if (std::this_thread::get_id() == thread_id_.load()) return fn();
    std::packaged_task<decltype(fn())()> task(std::forward<Fn>(fn));
    auto result = task.get_future();
    post([&task] { task(); });
    return result.get();
  }

 private:
  struct Live;  // per-trial runtime state (handle, stop request, ...)
  void post(std::function<void()> fn);
  void tick();
  void reconcile();
  void collect_finished();
  void settle_ended();  // finish_attempt for each of unsettled_, in order, until one fails
  // Throws when the store fails; the trial's attempt is then still live, for another try.
  void finish_attempt(int64_t trial_id, const ExitStatus& status);
  // An executor's note on a running attempt: an event, and the attempt's nodes once known.
  void note_attempt_state(Executor* ex, const Handle& h, const std::string& note);
  void launch_ready();
  void launch(TrialRow& trial, const ExperimentRow& exp);
  // The spec for the trial's next attempt and its executor (validated), or nullptr after ending
  // the trial with the reason.
  Executor* prepare_launch(TrialRow& trial, const ExperimentRow& exp, LaunchSpec& spec);
  // Creates the trial's run directory and writes its config.toml there. False when it could not:
  // the trial has then failed with the reason when that reason will not pass (a read-only file
  // system, a regular file on the path, no permission), or its launch is deferred (a full disk).
  bool write_config(TrialRow& trial, const ExperimentRow& exp, Executor* ex, LaunchSpec& spec);
  // A fresh token for the trial's next attempt, put into spec.env: the store and the report
  // check keep only its hash, so each launch issues a new one (a retry after a restart too).
  void issue_token(const TrialRow& trial, LaunchSpec& spec);
  // A recipe's own program: its environment (PRECON_RUN_DIR, PRECON_PARAMS, ...), once its run
  // directory is made (write_config may have changed it).
  void set_program_env(const TrialRow& trial, LaunchSpec& spec);
  // All pending trials of the experiment in one launch_batch() when their executor batches;
  // false when it does not (launch one by one).
  bool launch_batched(const ExperimentRow& exp, std::vector<TrialRow>& trials);
  // The executor said it cannot be reached (ExecUnavailable): the trial stays pending with the
  // reason, and no launch goes to that executor for a few seconds.
  void defer_launch(TrialRow& trial, const ExperimentRow& exp, Executor* ex, const std::string& why);
  bool deferring(Executor* ex) const;
  int64_t add_attempt(int64_t trial_id, const Handle& handle);  // an open attempts row
  // stderr_offset: the size of the trainer's stderr log before the launch (this attempt's lines follow).
  void record_launch(TrialRow& trial, const ExperimentRow& exp, Executor* ex, const Handle& handle,
                     uintmax_t stderr_offset, bool user_program);
  void continue_attempt(TrialRow& trial, std::unique_ptr<Live> live, const ExitStatus& status);
  void escalate_stops();
  // The metrics.jsonl lines that running programs (LaunchSpec::user_program) appended, stored and
  // fed to early stopping; at_end: the attempt has ended (its last line may lack a newline).
  void follow_metrics();
  void follow(int64_t trial_id, const std::string& run_dir, bool at_end);
  // The lines of a program's metrics.jsonl skipped so far, for its trial's reason: "; ..." or "".
  std::string skipped_lines_note(int64_t trial_id) const;
  // Why a program that exited 0 cannot be ranked: the objective it never reported ("" if it did).
  std::string objective_missing(const TrialRow& trial, const ExperimentRow* exp) const;
  void scan_checkpoints();
  void record_checkpoints(const TrialRow& trial);
  void end_trial(TrialRow& trial, TrialState state, const std::string& reason);
  void maybe_finish_experiment(int64_t experiment_id);
  // sweep.method = "tpe" (scheduler_tpe.cpp): the experiment's recipe when it searches by TPE,
  // else nullptr (parsed once per experiment); its trials as the sampler's history; and new
  // trials while fewer than max_concurrent are pending or running and fewer than `samples` exist.
  const Recipe* tpe_recipe(const ExperimentRow& exp);
  std::vector<TpeHistoryTrial> tpe_history(const ExperimentRow& exp, const std::vector<TrialRow>& trials,
                                           const Recipe& recipe);
  void top_up_tpe(const ExperimentRow& exp, const Recipe& recipe);
  void request_stop(int64_t trial_id, TrialState final_state, const std::string& reason);
  void early_stop_check(int64_t trial_id, int64_t step, double value);
  // The experiment's early-stopping rule, built on first use with its history from the store: the
  // objective's points and, for asha and hyperband, the rungs its trials were stopped at
  // (scheduler_promote.cpp). nullptr when there is no such experiment.
  EarlyStopper* stopper_for(int64_t exp_id);
  TrialNumbers& trial_numbers(int64_t exp_id, const EarlyStopper& stopper);  // hyperband's brackets
  // Promotion (scheduler_promote.cpp): the experiment's pruned trials that the values recorded at
  // their rung now promote go back to pending, to resume from their checkpoints; after a restart,
  // for every running experiment whose rule promotes.
  void promote_ready(int64_t exp_id);
  void promote_after_restart();
  // The reason of an early stop decided for the trial during this attempt (a controller restarted
  // before the attempt ended), or nullopt.
  std::optional<std::string> stop_decided_for(const TrialRow& trial, const AttemptRow& attempt) const;
  void event(int64_t experiment_id, int64_t trial_id, const std::string& kind, const std::string& message,
             nlohmann::json data = nlohmann::json::object());
  void log(const std::string& line);
  // Notes `e` for store_failure() when it is the store's error (StoreError).
  void note_store_error(const std::exception& e);

  Store& store_;
  std::map<std::string, Executor*> executors_;
  SchedulerOptions options_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_;  // set by the scheduler thread, read by call() anywhere
  bool started_ = false;

  // Scheduler-thread state.
  std::map<int64_t, std::unique_ptr<Live>> live_;  // trials with an open attempt
  // Attempts the executors reported ended whose outcome the store could not take yet (a full
  // disk): the executor has forgotten them, so they are settled again at every tick until stored.
  std::vector<std::pair<int64_t, ExitStatus>> unsettled_;
  std::map<Executor*, std::chrono::steady_clock::time_point> unavailable_until_;  // see defer_launch
  std::string tick_store_error_;  // the store's last error in this tick; "" when it had none
  std::map<int64_t, std::map<int64_t, std::map<int64_t, double>>> curves_;  // exp -> trial -> step -> objective
  std::map<int64_t, std::unique_ptr<EarlyStopper>> stoppers_;               // exp -> rule
  std::map<int64_t, std::set<int64_t>> stopper_seen_;                       // trial -> steps judged
  std::map<int64_t, TrialNumbers> trial_numbers_;                           // exp -> trial -> index (hyperband)
  struct Followed {
    MetricsFollower file;
    // Steps up to this one were stored before the follower began (a restarted controller reads
    // the file from its start): stored again, but not judged again by early stopping.
    int64_t judged_through = -1;
  };
  std::map<int64_t, std::shared_ptr<Recipe>> tpe_recipes_;  // exp -> its TPE recipe (nullptr: not TPE)
  std::set<int64_t> cancelled_experiments_;  // cancelled: TPE makes no more trials, none is promoted
  // exp -> trial ASHA or Hyperband stopped (pruned, or still stopping) -> the rung it stopped at.
  std::map<int64_t, std::map<int64_t, int64_t>> stopped_rungs_;
  std::map<int64_t, Followed> followers_;  // trial -> its program's metrics.jsonl, until the trial ends

  // Shared with report handlers (any thread).
  std::mutex shared_mu_;
  struct TrialAuth {
    std::string token_hash;  // "" until the first launch: no token matches
    int64_t experiment_id = 0;
    bool finished = false;   // ended: reports are refused
  };
  std::map<int64_t, TrialAuth> tokens_;                        // trial -> its report credentials
  std::map<int64_t, std::string> stop_answers_;                // trial -> reason
  std::map<int64_t, std::string> objective_metric_;            // experiment -> metric name
  std::optional<StoreFailure> store_failure_;                  // see store_failure()
};

}  // namespace precon::orch
