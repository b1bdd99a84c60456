// precon run RECIPE: the embedded default. Starts a controller in this process (SQLite file in
// the working directory, local executor, dashboard on a loopback port), runs the whole sweep
// with a progress display (live_view.h), and prints the leaderboard. Ctrl-C cancels the sweep
// cleanly.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <iostream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "orchestrator/cli/admin_token.h"
#include "orchestrator/cli/common.h"
#include "orchestrator/cli/live_view.h"
#include "orchestrator/cli/web_assets.h"
#include "orchestrator/common/clock.h"
#include "orchestrator/recipe/recipe.h"
#include "orchestrator/service/controller.h"
#include "orchestrator/service/queries.h"
#include "worker/config/parse.h"

namespace precon::cli {

namespace {

std::atomic<int> g_interrupts{0};
extern "C" void on_interrupt(int) { g_interrupts.fetch_add(1); }

struct RunOptions {
  std::string recipe;
  std::vector<std::string> overrides;
  std::string runs = "runs";
  std::string bind = "127.0.0.1";
  uint16_t port = 0;
  std::string web_dir;
  int cpu_slots = 0;
  double db_wait_s = 30;  // how long the database may keep failing the scheduler's writes
  bool quiet = false;
  std::string reads = "auto";  // --public-reads / --no-public-reads, as precon serve takes them
  AdminTokenOptions token;
};

// The controller logs from its own threads while this one draws progress. Without a terminal
// both streams often go to one file: each writes whole lines, flushed under this lock, so no
// line is cut by another.
std::mutex g_output;

void print(const std::string& text) {
  std::lock_guard lock(g_output);
  std::cout << text << std::flush;
}

// The scheduler logs "experiment N (NAME): K trial(s)" when a recipe is submitted; `precon run`
// prints that line itself (with where the runs go), on a terminal or not: once is enough.
bool is_submission_line(const std::string& line) {
  return line.rfind("experiment ", 0) == 0 && line.find("): ") != std::string::npos &&
         line.size() >= 9 && line.compare(line.size() - 9, 9, " trial(s)") == 0;
}

double last_value(const orch::Store& store, int64_t trial, const std::string& name) {
  const auto p = store.last_metric(trial, name);
  return p && std::isfinite(p->value) ? p->value : kUnknown;
}

double elapsed_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// What the progress display shows, read from the store: the running trials and the counts.
struct Snapshot {
  std::vector<TrialProgress> running;
  SweepProgress sweep;
};

Snapshot snapshot(const orch::Store& store, int64_t experiment, double elapsed_s) {
  const std::vector<orch::TrialRow> trials = store.trials(experiment);
  std::vector<nlohmann::json> params;
  for (const orch::TrialRow& t : trials) params.push_back(nlohmann::json::parse(t.params_json, nullptr, false));
  const std::vector<std::string> labels = trial_labels(params);
  const double now = orch::epoch_seconds();
  Snapshot s;
  s.sweep.elapsed_s = elapsed_s;
  // The sweep's ETA: the steps left (running trials' rest, pending trials' all) at the rate the
  // running trials make steps together, start-up and evaluations included.
  double steps_left = 0, steps_per_second = 0;
  for (size_t i = 0; i < trials.size(); ++i) {
    const orch::TrialRow& t = trials[i];
    const int64_t steps = orch::stored_trial_config(t.config_toml, "trial " + std::to_string(t.id)).train.steps;
    switch (t.state) {
      case orch::TrialState::completed:
      case orch::TrialState::pruned: ++s.sweep.done; break;
      case orch::TrialState::failed: ++s.sweep.failed; break;
      case orch::TrialState::cancelled: ++s.sweep.cancelled; break;
      case orch::TrialState::pending: ++s.sweep.pending; steps_left += static_cast<double>(steps); break;
      case orch::TrialState::running: {
        ++s.sweep.running;
        TrialProgress p;
        p.id = t.id;
        p.values = labels[i];
        p.step = t.last_step;
        p.steps = steps;
        const double ran = t.started_at > 0 ? now - t.started_at : 0;
        if (t.last_step > 0 && ran > 0) {
          const double rate = static_cast<double>(t.last_step) / ran;
          p.eta_s = static_cast<double>(std::max<int64_t>(0, steps - t.last_step)) / rate;
          steps_per_second += rate;
        }
        steps_left += static_cast<double>(std::max<int64_t>(0, steps - t.last_step));
        p.train_loss = last_value(store, t.id, "train_loss");
        p.val_loss = last_value(store, t.id, "val_loss");
        s.running.push_back(std::move(p));
        break;
      }
    }
  }
  if (steps_per_second > 0) s.sweep.eta_s = steps_left / steps_per_second;
  return s;
}

void run_command(const RunOptions& o) {
  std::string text;
  worker::read_toml_file(o.recipe, &text);

  const std::string token = configured_admin_token(o.token);
  require_configured_token(o.bind, token);
  const WebAssets web = find_web_assets(o.web_dir);
  orch::ControllerOptions co;
  co.db = global().db;
  co.run_root = o.runs;
  co.bind = o.bind;
  co.port = o.port;
  co.admin_token = token;
  co.reads = o.reads;
  co.cpu_slots = o.cpu_slots;
  co.web_dir = web.dir;
  const bool tty = ::isatty(STDOUT_FILENO) && !o.quiet;
  co.log = [tty](const std::string& line) {
    if (tty || is_submission_line(line)) return;
    std::lock_guard lock(g_output);
    std::cerr << line + "\n" << std::flush;
  };
  orch::Controller controller(co);
  controller.start();
  write_connection_files(controller.url(), controller.admin_token());
  const int64_t id = controller.submit_recipe(text, o.recipe, o.overrides);
  const auto started = std::chrono::steady_clock::now();
  orch::Store& store = controller.store();
  const orch::ExperimentRow exp = *store.experiment(id);
  {
    std::ostringstream head;
    head << "experiment " << id << " (" << exp.name << "): " << store.trials(id).size() << " trial(s); runs in "
         << exp.run_root << "\n";
    if (web.dir.empty()) head << web.missing << "\napi " << controller.url() << "/api/v1/";
    else head << "dashboard " << controller.url() << "/";
    head << "  (admin token in " << token_file().string() << ")\n";
    print(head.str());
  }

  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  // A closed terminal or ssh session (SIGHUP) is a stop like SIGTERM, not a silent death.
  std::signal(SIGHUP, on_interrupt);
  bool cancel_sent = false;
  LiveView view;
  const auto elapsed = [&] { return elapsed_since(started); };
  auto last_plain = std::chrono::steady_clock::now();
  while (!controller.scheduler().experiment_done(id)) {
    if (const auto failure = controller.scheduler().store_failure();
        failure && elapsed_since(failure->since) >= o.db_wait_s) {
      // Retrying forever would look like a run that hangs. Nothing is lost by leaving: the
      // database holds what was stored, the trials' run directories the rest.
      if (tty) std::cout << "\n" << std::flush;
      view.detach();
      controller.stop();
      std::ostringstream why;
      why << "the database " << global().db << " could not be written for " << o.db_wait_s << " s ("
          << failure->error << "); giving up. What it holds is intact and the trials still running keep running: "
          << "once it can be written again (e.g. with space freed on its disk), `precon serve --db " << global().db
          << "` records what was not stored and adopts them";
      throw std::runtime_error(why.str());
    }
    if (g_interrupts.load() > 0 && !cancel_sent) {
      std::cout << "\ninterrupted: stopping the trials (Ctrl-C again to leave them running)\n" << std::flush;
      view.detach();
      controller.scheduler().cancel_experiment(id, "interrupted from the terminal");
      cancel_sent = true;
    }
    if (g_interrupts.load() > 1) {
      std::cout << "leaving; running workers continue and a restarted controller adopts them\n";
      controller.stop();
      exit_code() = 130;
      return;
    }
    if (tty) {
      const Snapshot s = snapshot(store, id, elapsed());
      std::cout << view.redraw(frame(s.running, s.sweep, terminal_size(STDOUT_FILENO))) << std::flush;
    } else if (std::chrono::steady_clock::now() - last_plain > std::chrono::seconds(30) && !o.quiet) {
      const Snapshot s = snapshot(store, id, elapsed());
      std::string lines;
      for (const TrialProgress& t : s.running) lines += "  " + trial_line(t, 0) + "\n";
      print(lines + summary_line(s.sweep, 0) + "\n");
      last_plain = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(tty ? 500 : 250));
  }
  if (tty) {
    const Snapshot s = snapshot(store, id, elapsed());
    std::cout << view.redraw(frame(s.running, s.sweep, terminal_size(STDOUT_FILENO)));
  }
  const orch::ExperimentRow done = *store.experiment(id);
  controller.stop();
  std::ostringstream end;
  end << "\nexperiment " << id << " " << orch::experiment_state_name(done.state) << "\n\n";
  if (global().json) {
    end << orch::best_to_json(orch::best_report(store, done)).dump(2) << "\n";
  } else {
    // The dashboard this run served ends with it: say where the results stay and how to see them again.
    const std::string db = shell_word(global().db), program = shell_word(global().program);
    end << orch::format_best_table(orch::best_report(store, done)) << "\nresults: the database " << db
        << " (`" << program << " show " << id << " --db " << db << "`, `best`, `compare`, `logs`) and the run "
        << "directories under " << done.run_root << "\ndashboard again: " << program << " serve --db " << db
        << "   (it prints the address to open)\n";
  }
  print(end.str());
  for (const orch::TrialRow& t : store.trials(id))
    if (t.state == orch::TrialState::failed) exit_code() = 1;
  // A sweep that did not run to its end is not a success: 130 when stopped from this terminal
  // (as a shell reports an interrupted command), 1 when cancelled from elsewhere.
  if (done.state == orch::ExperimentState::cancelled) exit_code() = cancel_sent ? 130 : 1;
}

}  // namespace

void add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "run a recipe's whole sweep here (embedded controller) and print the leaderboard");
  cmd->add_option("recipe", o->recipe, "recipe TOML file")->required();
  cmd->add_option("--set", o->overrides, "override a recipe key: key=value (repeatable)");
  cmd->add_option("--runs", o->runs, "directory for the trials' run directories")->capture_default_str();
  cmd->add_option("--bind", o->bind, "dashboard/API address (loopback by default; any other needs a configured admin token)")
      ->capture_default_str();
  add_admin_token_options(cmd, o->token);
  CLI::Option* public_reads = cmd->add_flag_callback("--public-reads", [o] { o->reads = "public"; },
                                                     "anyone who can connect may read the API; the default on a "
                                                     "loopback --bind");
  cmd->add_flag_callback("--no-public-reads", [o] { o->reads = "token"; },
                         "reads need the admin token; the default on any other --bind")
      ->excludes(public_reads);
  cmd->add_option("--port", o->port, "dashboard/API port (0 = any free port)")->capture_default_str();
  cmd->add_option("--web-dir,--web", o->web_dir, "dashboard files to serve (default: ../share/precon/web from this program)");
  cmd->add_option("--cpus", o->cpu_slots, "CPU slots for trials (0 = all cores)");
  cmd->add_option("--db-wait", o->db_wait_s,
                  "seconds the database may stay unwritable (a full disk) before the run gives up with exit 1")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--quiet", o->quiet, "no progress display");
  add_db_option(cmd);
  add_json_option(cmd);
  cmd->callback([o] { guarded([&] { run_command(*o); }); });
}

}  // namespace precon::cli
