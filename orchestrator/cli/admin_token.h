// The admin token of `precon serve` and `precon run`: configured by the operator (flag,
// $PRECON_TOKEN or a file) or generated, and the rule that a controller reachable from other
// machines must have a configured one.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace precon::cli {

struct AdminTokenOptions {
  std::string token;  // --admin-token or $PRECON_TOKEN
  std::string file;   // --admin-token-file: its first line
};

void add_admin_token_options(CLI::App* cmd, AdminTokenOptions& options);

// The token the operator configured, "" when none (the controller then generates one). Throws
// std::invalid_argument when both are given, or the file is unreadable, empty, or readable by
// group or others.
std::string configured_admin_token(const AdminTokenOptions& options);

// Throws std::invalid_argument, saying how to configure one, when `bind` is an address other
// machines can reach (anything but 127.0.0.0/8 and ::1) and no token was configured: a
// generated token sits in a file on this machine only, and a wildcard bind with it would still
// expose every read route and the report route to the network without the operator's choice.
void require_configured_token(const std::string& bind, const std::string& configured_token);

}  // namespace precon::cli
