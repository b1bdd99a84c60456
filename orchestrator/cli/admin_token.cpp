#include "orchestrator/cli/admin_token.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "orchestrator/http/server.h"

namespace precon::cli {

void add_admin_token_options(CLI::App* cmd, AdminTokenOptions& options) {
  cmd->add_option("--admin-token", options.token,
                  "admin token for the routes that change state (default: a new random one, written next to --db)")
      ->envname("PRECON_TOKEN");
  cmd->add_option("--admin-token-file", options.file,
                  "read the admin token from this file's first line (must not be readable by group or others)");
}

std::string configured_admin_token(const AdminTokenOptions& options) {
  if (options.file.empty()) return options.token;
  if (!options.token.empty()) {
    throw std::invalid_argument("--admin-token-file " + options.file +
                                " and --admin-token (or $PRECON_TOKEN) both give the admin token; keep one");
  }
  struct stat st {};
  if (::stat(options.file.c_str(), &st) != 0) {
    throw std::invalid_argument("--admin-token-file " + options.file + ": " + std::strerror(errno));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw std::invalid_argument("--admin-token-file " + options.file +
                                " is readable by group or others; run `chmod 600 " + options.file + "`");
  }
  std::ifstream in(options.file);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) token.pop_back();
  if (!in && !in.eof()) throw std::invalid_argument("--admin-token-file " + options.file + ": cannot be read");
  if (token.empty()) throw std::invalid_argument("--admin-token-file " + options.file + ": the first line is empty");
  return token;
}

void require_configured_token(const std::string& bind, const std::string& configured_token) {
  if (!configured_token.empty() || !orch::reachable_from_other_machines(bind)) return;
  throw std::invalid_argument(
      "listening on " + bind +
      " makes the controller reachable from other machines, which needs an admin token you chose: pass "
      "--admin-token-file FILE (a file only you can read), --admin-token TOKEN or set $PRECON_TOKEN; or keep the "
      "default --bind 127.0.0.1");
}

}  // namespace precon::cli
