#include "orchestrator/service/controller.h"

#include <unistd.h>


#include "orchestrator/exec/local_executor.h"
#include "orchestrator/exec/slurm_executor.h"
#include "orchestrator/http/host_check.h"
#include "orchestrator/http/printable.h"
#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/recipe/recipe.h"
#include "orchestrator/recipe/sweep.h"
#include "orchestrator/service/api.h"
#include "orchestrator/service/queries.h"
#include "orchestrator/service/report_limits.h"
#include "worker/config/parse.h"

namespace precon::orch {

namespace fs = std::filesystem;

namespace {
fs::path default_trainer() {
  // precon-train next to this program (build tree: ../worker/precon-train; installed: same dir).
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& candidate : {self.parent_path() / "precon-train",
                                      self.parent_path().parent_path() / "worker" / "precon-train"})
      if (fs::exists(candidate)) return candidate;
  }
  return "precon-train";
}

}  // namespace

fs::path default_web_dir_location() {
  // <build>/orchestrator/precon finds <build>/share/precon/web (the `web` target),
  // <prefix>/bin/precon finds <prefix>/share/precon/web.
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return self.parent_path().parent_path() / "share" / "precon" / "web";
}

bool has_dashboard(const fs::path& dir) {
  std::error_code ec;
  return !dir.empty() && fs::is_regular_file(dir / "index.html", ec);
}

std::string worker_facing_url(const std::string& bind, uint16_t port, const std::string& advertise) {
  if (!advertise.empty()) {
    std::string url = advertise;
    while (!url.empty() && url.back() == '/') url.pop_back();
    const bool ok = url.starts_with("http://") && url.size() > 7 &&
                    url.find_first_of(" \t\n\"'\\`$;") == std::string::npos;
    if (!ok) {
      throw std::invalid_argument("advertise URL \"" + advertise +
                                  "\" is not an http:// URL (e.g. http://login01.cluster:8080)");
    }
    return url;
  }
  std::string host = bind;
  if (bind == "0.0.0.0" || bind == "::" || bind.empty()) {
    char name[256] = {};
    host = ::gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "127.0.0.1";
  }
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Controller::Controller(ControllerOptions options) : options_(std::move(options)) {
  // Every line the controller logs passes here: names and messages from users are escaped.
  if (options_.log) options_.log = [log = options_.log](const std::string& line) { log(printable(line)); };
  worker_facing_url(options_.bind, 0, options_.advertise_url);  // a bad advertise URL fails here, not at launch
  if (options_.trainer.empty()) options_.trainer = default_trainer();
  if (options_.web_dir.empty() && has_dashboard(default_web_dir_location())) options_.web_dir = default_web_dir_location();
  if (options_.admin_token.empty()) options_.admin_token = random_hex_token();
  if (options_.reads != "auto" && options_.reads != "public" && options_.reads != "token") {
    throw std::invalid_argument("reads must be auto, public or token, got \"" + options_.reads + "\"");
  }
  public_reads_ = options_.reads == "public" || (options_.reads == "auto" && !reachable_from_other_machines(options_.bind));
  metrics_ = std::make_unique<ControllerMetrics>();
  best_cache_ = std::make_unique<BestCache>();
  store_ = std::make_unique<Store>(options_.db);
  if (options_.metric_cache_points > 0) store_->set_metric_cache_limit(options_.metric_cache_points);
  store_->set_write_observer([m = metrics_.get(), best = best_cache_.get()](const char* op, double seconds) {
    m->store_write(op, seconds);
    best->store_written(op);
  });
  report_limits_ = std::make_unique<ReportLimits>(*store_);
  LocalExecutorOptions lo;
  lo.cpu_slots = options_.cpu_slots;
  lo.gpu_ids = options_.gpu_ids;
  local_ = std::make_unique<LocalExecutor>(lo);
  if (options_.slurm != "auto" && options_.slurm != "on" && options_.slurm != "off") {
    throw std::invalid_argument("slurm must be auto, on or off, got \"" + options_.slurm + "\"");
  }
  if (options_.slurm == "on" || (options_.slurm == "auto" && SlurmExecutor::available())) {
    SlurmExecutorOptions so;
    so.poll_interval = options_.slurm_poll_interval;
    so.script.signal_lead_s = options_.slurm_signal_lead_s;
    slurm_ = std::make_unique<SlurmExecutor>(so);
  }
  RouterOptions ro;
  ro.admin_token = options_.admin_token;
  ro.read_token = options_.read_token;
  ro.public_reads = public_reads_;
  ro.log = options_.log;
  router_ = std::make_unique<Router>(ro);
  add_routes();
  ServerOptions so;
  so.bind = options_.bind;
  so.port = options_.port;
  so.log = options_.log;
  so.threads = 4;  // a slow page (a big sweep's dashboard) leaves others, /healthz included, answered
  so.host_check = host_check();
  so.on_request = [m = metrics_.get()](const Request& req, const Response& resp, double seconds) {
    m->http_request(req.route, resp.status, seconds);
  };
  server_ = std::make_unique<HttpServer>(*router_, so);
}

Controller::~Controller() { stop(); }

// The names a browser or a worker may use for this controller; each without a port means the
// bound one. A wildcard bind is reached at any of this machine's addresses.
HostCheck Controller::host_check() const {
  const std::string& bind = options_.bind;
  const bool wildcard = bind.empty() || bind == "0.0.0.0" || bind == "::";
  std::vector<std::string> names{"localhost", "127.0.0.1", "[::1]"};
  if (!wildcard) names.push_back(bind.find(':') != std::string::npos ? "[" + bind + "]" : bind);
  // Workers send the host of the URL they were handed (this host's name for a wildcard bind).
  const std::string workers = worker_facing_url(bind, 0, options_.advertise_url);
  const std::string authority = url_authority(workers);
  if (!options_.advertise_url.empty()) names.push_back(authority);
  else if (!authority.empty()) names.push_back(authority.substr(0, authority.rfind(':')));
  for (const std::string& n : options_.allowed_hosts) names.push_back(n);
  return HostCheck(names, wildcard);
}

void Controller::start() {
  // Listening first, so the report URL handed to workers has the real port; answering only once
  // the scheduler the handlers call exists (an adopted worker reports at once after a restart).
  server_->listen();
  SchedulerOptions so;
  so.report_url = worker_facing_url(options_.bind, server_->port(), options_.advertise_url) + "/api/v1/report";
  so.trainer = options_.trainer;
  so.poll_interval = options_.poll_interval;
  so.stop_grace = options_.stop_grace;
  so.log = options_.log;
  so.metrics = metrics_.get();
  std::map<std::string, Executor*> executors{{"local", local_.get()}};
  if (slurm_) executors["slurm"] = slurm_.get();
  scheduler_ = std::make_unique<Scheduler>(*store_, executors, so);
  scheduler_->start();
  server_->start();
  // After a restart, the dashboard's first look at a running trial should not wait for SQLite.
  stopping_ = false;
  warmer_ = std::thread([this] {
    try {
      for (const TrialRow& t : store_->trials_in_state(TrialState::running)) {
        if (stopping_) return;
        store_->warm_series(t.id, &stopping_);
      }
    } catch (const std::exception& e) {
      if (options_.log) options_.log(std::string("warming the metric cache failed: ") + e.what());
    }
  });
}

void Controller::stop() {
  stopping_ = true;
  if (warmer_.joinable()) warmer_.join();
  if (server_) server_->stop();
  if (scheduler_) scheduler_->stop();
}

std::string Controller::url() const { return server_->url(); }
uint16_t Controller::port() const { return server_->port(); }

int64_t Controller::submit_recipe(const std::string& text, const std::string& source,
                                  const std::vector<std::string>& overrides) {
  Recipe recipe = parse_recipe_text(text, source, overrides);
  std::vector<TrialSpec> trials = expand_sweep(recipe);
  std::vector<std::string> missing = check_recipe_data(trials);
  if (!missing.empty()) {
    std::string msg = source + ": data files are missing or unusable:";
    for (const std::string& m : missing) msg += "\n  " + m;
    throw std::invalid_argument(msg + "\n(prepare them first, e.g. deploy/prepare-quickstart-data.sh)");
  }
  std::vector<std::string> memory = check_recipe_memory(trials, machine_memory_bytes());
  if (!memory.empty()) {
    std::string msg = source + ": trials that cannot fit in memory:";
    for (const std::string& m : memory) msg += "\n  " + m;
    throw std::invalid_argument(msg);
  }
  return scheduler_->submit(recipe, trials, options_.run_root);
}

}  // namespace precon::orch
