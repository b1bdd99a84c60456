// Which dashboard `precon run` and `precon serve` serve, decided before they advertise one: the
// directory given with --web-dir, else the `web` target's output at ../share/precon/web from
// this program (orch::default_web_dir_location()).
#pragma once

#include <filesystem>
#include <string>

namespace precon::cli {

struct WebAssets {
  std::filesystem::path dir;  // what to serve at /; empty = no dashboard
  std::string missing;        // when dir is empty: where it looked and how to build the files
};

// An explicit --web-dir without index.html is a mistake (std::invalid_argument, exit 2); a
// missing default is not: the API still runs, and `missing` says why there is no dashboard.
WebAssets find_web_assets(const std::string& web_dir_option);

}  // namespace precon::cli
