// precon run RECIPE: the embedded default. Starts a controller in this process (SQLite file in
// the working directory, local executor, dashboard on a loopback port), runs the whole sweep
// with a progress display, and prints the leaderboard. Ctrl-C cancels the sweep cleanly.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "orchestrator/cli/common.h"
#include "orchestrator/recipe/recipe.h"
#include "orchestrator/service/controller.h"
#include "orchestrator/service/queries.h"

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
  bool quiet = false;
};

std::string progress_line(const orch::Store& store, const orch::TrialRow& t, const orch::ExperimentRow& e) {
  nlohmann::json s = orch::trial_summary_json(store, t, e);
  const int64_t cfg_steps = orch::stored_trial_config(t.config_toml, "trial " + std::to_string(t.id)).train.steps;
  std::ostringstream line;
  line << "  trial " << t.id << "  " << s["label"].get<std::string>() << "  " << s["state"].get<std::string>()
       << "  step " << t.last_step << "/" << cfg_steps << "  " << e.objective_metric << " "
       << fmt_number(s["objective"]) << "  train_loss " << fmt_number(s["train_loss"]);
  return line.str();
}

void run_command(const RunOptions& o) {
  std::ifstream in(o.recipe);
  if (!in) throw std::invalid_argument("cannot open recipe " + o.recipe);
  std::stringstream text;
  text << in.rdbuf();

  orch::ControllerOptions co;
  co.db = global().db;
  co.run_root = o.runs;
  co.bind = o.bind;
  co.port = o.port;
  co.cpu_slots = o.cpu_slots;
  co.web_dir = o.web_dir;
  const bool tty = ::isatty(STDOUT_FILENO) && !o.quiet;
  co.log = [tty](const std::string& line) {
    if (!tty) std::cerr << line << "\n";
  };
  orch::Controller controller(co);
  controller.start();
  write_connection_files(controller.url(), controller.admin_token());
  const int64_t id = controller.submit_recipe(text.str(), o.recipe, o.overrides);
  orch::Store& store = controller.store();
  const orch::ExperimentRow exp = *store.experiment(id);
  std::cout << "experiment " << id << " (" << exp.name << "): " << store.trials(id).size() << " trial(s); runs in "
            << exp.run_root << "\ndashboard " << controller.url() << "/  (admin token in " << token_file().string()
            << ")\n" << std::flush;

  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  bool cancel_sent = false;
  size_t drawn = 0;
  auto last_plain = std::chrono::steady_clock::now();
  while (!controller.scheduler().experiment_done(id)) {
    if (g_interrupts.load() > 0 && !cancel_sent) {
      std::cout << "\ninterrupted: stopping the trials (Ctrl-C again to leave them running)\n" << std::flush;
      controller.scheduler().cancel_experiment(id, "interrupted from the terminal");
      cancel_sent = true;
    }
    if (g_interrupts.load() > 1) {
      std::cout << "leaving; running workers continue and a restarted controller adopts them\n";
      controller.stop();
      exit_code() = 130;
      return;
    }
    std::vector<orch::TrialRow> trials = store.trials(id);
    if (tty) {
      std::string frame;
      for (const orch::TrialRow& t : trials) frame += "\x1b[2K" + progress_line(store, t, exp) + "\n";
      if (drawn) std::cout << "\x1b[" << drawn << "A";
      std::cout << frame << std::flush;
      drawn = trials.size();
    } else if (std::chrono::steady_clock::now() - last_plain > std::chrono::seconds(30) && !o.quiet) {
      for (const orch::TrialRow& t : trials)
        if (t.state == orch::TrialState::running) std::cout << progress_line(store, t, exp) << "\n";
      std::cout << std::flush;
      last_plain = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(tty ? 500 : 250));
  }
  const orch::ExperimentRow done = *store.experiment(id);
  std::cout << "\nexperiment " << id << " " << orch::experiment_state_name(done.state) << "\n\n";
  if (global().json) std::cout << orch::best_to_json(orch::best_report(store, done)).dump(2) << "\n";
  else std::cout << orch::format_best_table(orch::best_report(store, done));
  controller.stop();
  for (const orch::TrialRow& t : store.trials(id))
    if (t.state == orch::TrialState::failed) exit_code() = 1;
}

}  // namespace

void add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "run a recipe's whole sweep here (embedded controller) and print the leaderboard");
  cmd->add_option("recipe", o->recipe, "recipe TOML file")->required();
  cmd->add_option("--set", o->overrides, "override a recipe key: key=value (repeatable)");
  cmd->add_option("--runs", o->runs, "directory for the trials' run directories")->capture_default_str();
  cmd->add_option("--bind", o->bind, "dashboard/API address")->capture_default_str();
  cmd->add_option("--port", o->port, "dashboard/API port (0 = any free port)")->capture_default_str();
  cmd->add_option("--web-dir,--web", o->web_dir, "dashboard files to serve (default: ../share/precon/web from this program)");
  cmd->add_option("--cpus", o->cpu_slots, "CPU slots for trials (0 = all cores)");
  cmd->add_flag("--quiet", o->quiet, "no progress display");
  add_db_option(cmd);
  add_json_option(cmd);
  cmd->callback([o] { guarded([&] { run_command(*o); }); });
}

}  // namespace precon::cli
