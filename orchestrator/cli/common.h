// Shared pieces of the `precon` subcommands: where the controller and its database are, how to
// print tables, how errors become exit codes.
#pragma once

#include <chrono>

#include <CLI/CLI.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/store/store.h"

namespace precon::cli {

// Options every subcommand may take.
struct Global {
  std::string db = "precon.db";  // the controller's SQLite file (read-only use by the CLI)
  std::string url;               // a running controller; default: from <db>.url
  std::string token;             // admin token; default: $PRECON_TOKEN or <db>.token
  bool json = false;             // machine-readable output
  std::string program = "precon";  // this program as it was invoked (argv[0]), for commands it suggests
};

Global& global();
void add_db_option(CLI::App* cmd);
void add_remote_options(CLI::App* cmd);
void add_json_option(CLI::App* cmd);

// The exit code a subcommand callback sets (CLI11 callbacks return void).
int& exit_code();

// Runs `body`, mapping exceptions to a message on stderr and exit code 1 (2 for bad input).
void guarded(const std::function<void()>& body);

// Opens the database for reading; a clear error when it does not exist.
orch::Store open_store();

// Where `serve`/`run` leave their address and admin token for the other subcommands.
std::filesystem::path url_file();
std::filesystem::path token_file();
void write_connection_files(const std::string& url, const std::string& token);
std::string controller_url();
std::string admin_token();

// HTTP call to the controller with the admin token; throws with the server's error message
// (invalid_argument for a 400, which exits 2) and the controller's address.
nlohmann::json call_controller(const std::string& method, const std::string& target, const nlohmann::json& body = {},
                               std::chrono::milliseconds timeout = std::chrono::seconds(10));

// An experiment by id or name, a trial by id; not found: an error naming the database.
orch::ExperimentRow lookup_experiment(const orch::Store& store, const std::string& id_or_name);
orch::TrialRow lookup_trial(const orch::Store& store, int64_t id);

// Prints rows as an aligned table (first row = header).
void print_table(const std::vector<std::vector<std::string>>& rows);
std::string fmt_number(const nlohmann::json& v, int precision = 4);
std::string fmt_time(double unix_seconds);
// A word a shell reads as it is written: quoted when it holds anything else.
std::string shell_word(const std::string& s);

void add_run(CLI::App& app);
void add_serve(CLI::App& app);
void add_submit(CLI::App& app);
void add_ls(CLI::App& app);
void add_show(CLI::App& app);
void add_best(CLI::App& app);
void add_compare(CLI::App& app);
void add_cancel(CLI::App& app);
void add_logs(CLI::App& app);
void add_recipe(CLI::App& app);
void add_data(CLI::App& app);
void add_study(CLI::App& app);
void add_importance(CLI::App& app);

}  // namespace precon::cli
