#include "orchestrator/cli/common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include "orchestrator/http/client.h"
#include "orchestrator/http/printable.h"
#include "orchestrator/service/queries.h"
#include "worker/common/file_io.h"
#include "worker/config/parse.h"

namespace precon::cli {

namespace fs = std::filesystem;
using nlohmann::json;

Global& global() {
  static Global g;
  return g;
}

int& exit_code() {
  static int code = 0;
  return code;
}

void add_db_option(CLI::App* cmd) {
  cmd->add_option("--db", global().db, "the controller's database")->capture_default_str();
}

void add_remote_options(CLI::App* cmd) {
  add_db_option(cmd);
  cmd->add_option("--url", global().url, "controller URL (default: the one `precon serve`/`run` wrote next to --db)");
  cmd->add_option("--token", global().token, "admin token (default: $PRECON_TOKEN or the file next to --db)");
}

void add_json_option(CLI::App* cmd) { cmd->add_flag("--json", global().json, "print JSON for scripts"); }

void guarded(const std::function<void()>& body) {
  try {
    body();
  } catch (const worker::ConfigError& e) {
    // One line per problem, so every one of them is seen at once.
    std::istringstream lines(e.what());
    for (std::string line; std::getline(lines, line);) std::cerr << "precon: " << line << "\n";
    exit_code() = 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "precon: " << e.what() << "\n";
    exit_code() = 2;
  } catch (const std::exception& e) {
    std::cerr << "precon: " << e.what() << "\n";
    exit_code() = 1;
  }
}

orch::Store open_store() {
  if (!fs::exists(global().db))
    throw std::runtime_error("no database at " + global().db + " (run `precon run RECIPE` or `precon serve` first, or pass --db)");
  return orch::Store(global().db);
}

fs::path url_file() { return global().db + ".url"; }
fs::path token_file() { return global().db + ".token"; }

void write_connection_files(const std::string& url, const std::string& token) {
  // The token first, then the URL: a client that finds the URL (the sign that the controller
  // listens) finds the token beside it, never an older or half-written one. Both written whole
  // to a 0600 temporary file and renamed into place, as the database is private: the URL says
  // where a controller of this user listens, the token what it lets change.
  try {
    worker::write_file_atomic(token_file(), token + "\n", worker::kPrivateFileMode);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write the admin token: " + std::string(e.what()));
  }
  try {
    worker::write_file_atomic(url_file(), url + "\n", worker::kPrivateFileMode);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("cannot write the controller's URL: ") + e.what());
  }
}

namespace {
std::string first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}
}  // namespace

std::string controller_url() {
  if (!global().url.empty()) return global().url;
  std::string u = first_line(url_file());
  if (u.empty())
    throw std::runtime_error("no running controller known for " + global().db + " (start `precon serve` or pass --url)");
  return u;
}

std::string admin_token() {
  if (!global().token.empty()) return global().token;
  if (const char* t = std::getenv("PRECON_TOKEN")) return t;
  return first_line(token_file());
}

namespace {
// Where admin_token() found the token, for an error message about it.
std::string token_source() {
  if (!global().token.empty()) return "--token";
  if (std::getenv("PRECON_TOKEN")) return "$PRECON_TOKEN";
  if (first_line(token_file()).empty()) return "none: no --token, no $PRECON_TOKEN and nothing in " + token_file().string();
  return token_file().string();
}
}  // namespace

json call_controller(const std::string& method, const std::string& target, const json& body,
                     std::chrono::milliseconds timeout) {
  std::map<std::string, std::string> headers{{"Authorization", "Bearer " + admin_token()},
                                             {"Content-Type", "application/json"}};
  const std::string url = controller_url();
  orch::ClientResponse r = orch::http_request(url, method, target, body.is_null() ? "" : body.dump(), headers, timeout);
  json j = json::parse(r.body, nullptr, false);
  if (r.status >= 400) {
    std::string msg = !j.is_discarded() && j.contains("error") ? j["error"].value("message", r.body) : r.body;
    if (r.status == 400) throw std::invalid_argument(msg);
    if (r.status == 401) msg += " (token from " + token_source() + ")";
    throw std::runtime_error("the controller at " + url + " answered " + std::to_string(r.status) + ": " + msg);
  }
  return j.is_discarded() ? json::object() : j;
}

orch::ExperimentRow lookup_experiment(const orch::Store& store, const std::string& id_or_name) {
  try {
    return orch::find_experiment(store, id_or_name);
  } catch (const std::out_of_range&) {
    throw std::out_of_range("no experiment \"" + id_or_name + "\" in " + global().db + " (`precon ls` lists them)");
  }
}

orch::TrialRow lookup_trial(const orch::Store& store, int64_t id) {
  std::optional<orch::TrialRow> t = store.trial(id);
  if (!t) throw std::out_of_range("no trial " + std::to_string(id) + " in " + global().db + " (`precon show EXP` lists them)");
  return *t;
}

void print_table(const std::vector<std::vector<std::string>>& raw_rows) {
  // Cells may hold names from recipes: control characters must not reach the terminal.
  std::vector<std::vector<std::string>> rows;
  for (const auto& raw : raw_rows) {
    auto& row = rows.emplace_back();
    for (const std::string& cell : raw) row.push_back(orch::printable(cell));
  }
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

std::string fmt_number(const json& v, int precision) {
  if (v.is_null()) return "-";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (!v.is_number()) return v.dump();
  std::ostringstream s;
  s.precision(precision);
  s << v.get<double>();
  return s.str();
}

std::string fmt_time(double t) {
  if (t <= 0) return "-";
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm local{};
  ::localtime_r(&tt, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

std::string shell_word(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-+:=,@") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace precon::cli
