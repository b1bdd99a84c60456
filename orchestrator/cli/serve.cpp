// precon serve: the long-running controller (e.g. on a Slurm login node). Other subcommands
// find it through the address and admin token it leaves next to its database.
#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "orchestrator/cli/admin_token.h"
#include "orchestrator/cli/common.h"
#include "orchestrator/cli/web_assets.h"
#include "orchestrator/service/controller.h"

namespace precon::cli {

namespace {
std::atomic<bool> g_stop{false};
extern "C" void on_stop(int) { g_stop.store(true); }

struct ServeOptions {
  std::string runs = "runs";
  std::string bind = "127.0.0.1";
  uint16_t port = 8080;
  std::string web_dir;
  AdminTokenOptions token;
  std::string reads = "auto";    // --public-reads / --no-public-reads
  std::string read_token_file;   // --read-token-file
  int cpu_slots = 0;
  size_t metric_cache_points = 0;
  std::string advertise;
  std::vector<std::string> allowed_hosts;  // --allowed-host, repeatable
  std::string slurm = "auto";
  double slurm_poll_s = 2.0;
  int slurm_signal_lead_s = 120;
};
}  // namespace

void add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "run the controller: HTTP API, dashboard, scheduler");
  cmd->add_option("--runs", o->runs, "directory for the trials' run directories")->capture_default_str();
  cmd->add_option("--bind", o->bind, "listen address (loopback by default; any other needs a configured admin token)")
      ->capture_default_str();
  cmd->add_option("--port", o->port, "listen port")->capture_default_str();
  cmd->add_option("--web-dir,--web", o->web_dir, "dashboard files to serve (default: ../share/precon/web from this program)");
  add_admin_token_options(cmd, o->token);
  CLI::Option* public_reads = cmd->add_flag_callback("--public-reads", [o] { o->reads = "public"; },
                         "anyone who can connect may read the API (experiments, trials, metrics, logs); the default "
                         "on a loopback --bind");
  cmd->add_flag_callback("--no-public-reads", [o] { o->reads = "token"; },
                         "reads need the read token (--read-token-file) or the admin token; the default on any "
                         "other --bind")
      ->excludes(public_reads);
  cmd->add_option("--read-token-file", o->read_token_file,
                  "a file whose first line is a token for reads only (mode 0600 or stricter), e.g. for a shared "
                  "dashboard");
  cmd->add_option("--advertise-url", o->advertise,
                  "the controller's URL as workers (Slurm compute nodes) reach it, e.g. http://login01:8080; "
                  "default: http://<bind>:<port>, this host's name when bound to 0.0.0.0");
  cmd->add_option("--allowed-host", o->allowed_hosts,
                  "a name (or name:port) browsers use to reach this controller, e.g. precon.example.org; other "
                  "Host headers than its address and localhost are answered 421 (repeatable)");
  cmd->add_option("--cpus", o->cpu_slots, "CPU slots for local trials (0 = all cores)");
  cmd->add_option("--metric-cache-points", o->metric_cache_points,
                  "metric points kept in memory for queries (0 = the default, about 4M points or 100 MB)");
  cmd->add_option("--slurm", o->slurm, "Slurm executor: auto (when sbatch is on PATH), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--slurm-poll-interval", o->slurm_poll_s, "seconds between squeue calls")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--slurm-signal-lead", o->slurm_signal_lead_s,
                  "seconds before a job's time limit when it is told to checkpoint and requeue")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  add_db_option(cmd);
  cmd->callback([o] {
    guarded([&] {
      const std::string token = configured_admin_token(o->token);
      require_configured_token(o->bind, token);
      const WebAssets web = find_web_assets(o->web_dir);
      orch::ControllerOptions co;
      co.db = global().db;
      co.run_root = o->runs;
      co.bind = o->bind;
      co.port = o->port;
      co.web_dir = web.dir;
      co.admin_token = token;
      co.reads = o->reads;
      if (!o->read_token_file.empty()) {
        try {
          co.read_token = configured_admin_token({"", o->read_token_file});
        } catch (const std::invalid_argument& e) {  // its messages name the admin token's flag
          const std::string message = e.what(), flag = "--admin-token-file";
          throw std::invalid_argument(message.starts_with(flag) ? "--read-token-file" + message.substr(flag.size()) : message);
        }
        if (co.read_token == token) throw std::invalid_argument("--read-token-file: the read token must differ from the admin token");
      }
      co.cpu_slots = o->cpu_slots;
      co.metric_cache_points = o->metric_cache_points;
      co.advertise_url = o->advertise;
      co.allowed_hosts = o->allowed_hosts;
      co.slurm = o->slurm;
      co.slurm_poll_interval = std::chrono::milliseconds(static_cast<int64_t>(o->slurm_poll_s * 1000));
      co.slurm_signal_lead_s = o->slurm_signal_lead_s;
      co.log = [](const std::string& line) { std::cerr << line << "\n"; };
      orch::Controller controller(co);
      std::signal(SIGINT, on_stop);
      std::signal(SIGTERM, on_stop);
      // A closed terminal or ssh session (SIGHUP) is a stop like SIGTERM, not a silent death.
      std::signal(SIGHUP, on_stop);
      controller.start();
      write_connection_files(controller.url(), controller.admin_token());
      std::cerr << "precon serve: " << controller.url() << " (database " << global().db << ", admin token in "
                << token_file().string() << ")\n";
      std::cerr << "precon serve: reads "
                << (controller.public_reads() ? "public (anyone who can connect to " + o->bind + ")"
                                               : std::string("need the read token or the admin token"))
                << "\n";
      if (web.dir.empty()) std::cerr << "precon serve: " << web.missing << "\n";
      else std::cerr << "precon serve: dashboard " << controller.url() << "/ (files in " << web.dir.string() << ")\n";
      while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::cerr << "precon serve: stopping; running trials keep running and are adopted on restart\n";
      controller.stop();
    });
  });
}

}  // namespace precon::cli
