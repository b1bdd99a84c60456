// The controller: store + executors + scheduler + HTTP API, as `precon serve` runs it and
// `precon run` embeds it. Thread-safety: public methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "orchestrator/http/host_check.h"
#include "orchestrator/http/router.h"
#include "orchestrator/http/server.h"
#include "orchestrator/sched/scheduler.h"
#include "orchestrator/store/store.h"

namespace precon::orch {

struct Api;
class BestCache;
class ControllerMetrics;
class LocalExecutor;
class ReportLimits;
class SlurmExecutor;

struct ControllerOptions {
  std::filesystem::path db = "precon.db";      // SQLite file
  std::filesystem::path run_root = "runs";     // trials' run directories go under it
  std::filesystem::path trainer;               // precon-train; default: next to this program
  std::filesystem::path web_dir;               // dashboard files; empty = ../share/precon/web from
                                               // this program when present, else none
  std::string bind = "127.0.0.1";              // loopback unless asked otherwise
  uint16_t port = 0;                           // 0 = ephemeral
  std::string admin_token;                     // required by routes that change state
  // Who may read the API (experiments, trials, metrics, logs, the dashboard's data): "public"
  // (anyone who can connect), "token" (the read or the admin token), or "auto": public when bound
  // to a loopback address, token otherwise. /healthz, /metrics and the dashboard's files are
  // public either way.
  std::string reads = "auto";
  std::string read_token;                      // accepted for reads besides the admin token; "" = none
  int cpu_slots = 0;                           // local executor CPU slots; 0 = all cores
  std::vector<int> gpu_ids;                    // local executor GPUs
  size_t metric_cache_points = 0;              // metric series cache budget; 0 = the store's default
  std::chrono::milliseconds poll_interval{250};
  std::chrono::milliseconds stop_grace{20000};
  std::string advertise_url;                   // how workers reach this controller (Slurm compute
                                               // nodes); empty = see worker_facing_url()
  // Host names (or name:port) the API answers besides its address, localhost, 127.0.0.1, [::1]
  // and the workers' URL: the public name of a controller behind a DNS name (DNS rebinding guard).
  std::vector<std::string> allowed_hosts;
  std::string slurm = "auto";                  // slurm executor: "auto" (when sbatch is on PATH), "on", "off"
  std::chrono::milliseconds slurm_poll_interval{2000};  // at most one squeue per interval
  int slurm_signal_lead_s = 120;               // --signal=B:USR1@N before a job's time limit
  std::function<void(const std::string&)> log;
};

// The base URL handed to workers for their reports: `advertise` when given (an http:// URL,
// trailing slash dropped; std::invalid_argument otherwise), else http://<bind>:<port>, with this
// host's name in place of a wildcard bind (0.0.0.0 or ::), which no worker can connect to.
std::string worker_facing_url(const std::string& bind, uint16_t port, const std::string& advertise);

// Where the dashboard's files are looked for when ControllerOptions::web_dir is empty:
// ../share/precon/web from this program (empty when /proc/self/exe cannot be read), and whether a
// directory holds them (index.html).
std::filesystem::path default_web_dir_location();
bool has_dashboard(const std::filesystem::path& dir);

class Controller {
 public:
  explicit Controller(ControllerOptions options);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  void start();  // reconciles, starts the scheduler and the HTTP server
  void stop();   // stops both; running workers keep running (a restart adopts them)

  std::string url() const;  // http://127.0.0.1:PORT
  uint16_t port() const;
  Store& store() { return *store_; }
  Scheduler& scheduler() { return *scheduler_; }
  ControllerMetrics& metrics() { return *metrics_; }
  const std::string& admin_token() const { return options_.admin_token; }
  bool public_reads() const { return public_reads_; }
  const std::filesystem::path& web_dir() const { return options_.web_dir; }  // empty: no dashboard at /

  // Parses, expands and checks a recipe, then creates the experiment. Throws
  // worker::ConfigError (file/line/key) or std::invalid_argument (missing data files, ...).
  int64_t submit_recipe(const std::string& text, const std::string& source,
                        const std::vector<std::string>& overrides);

 private:
  void add_routes();  // the route table (routes.cpp)
  HostCheck host_check() const;

  ControllerOptions options_;
  std::unique_ptr<ControllerMetrics> metrics_;  // before the store and server, which report to it
  std::unique_ptr<BestCache> best_cache_;       // before the store, whose writes it is told of
  std::unique_ptr<Store> store_;
  std::unique_ptr<LocalExecutor> local_;
  std::unique_ptr<SlurmExecutor> slurm_;  // null when Slurm is off or absent
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ReportLimits> report_limits_;
  std::unique_ptr<Api> api_;  // what the handlers share
  bool public_reads_ = true;
  std::unique_ptr<Router> router_;
  std::unique_ptr<HttpServer> server_;
  std::thread warmer_;  // loads running trials' series into the query cache after a start
  std::atomic<bool> stopping_{false};
};

}  // namespace precon::orch
