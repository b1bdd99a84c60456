#include "orchestrator/cli/web_assets.h"

#include <stdexcept>

#include "orchestrator/service/controller.h"

namespace precon::cli {

namespace fs = std::filesystem;

WebAssets find_web_assets(const std::string& web_dir_option) {
  WebAssets w;
  if (!web_dir_option.empty()) {
    if (!orch::has_dashboard(web_dir_option))
      throw std::invalid_argument("--web-dir " + web_dir_option +
                                  " holds no dashboard (no index.html there); the `web` target builds one into "
                                  "<build>/share/precon/web");
    w.dir = web_dir_option;
    return w;
  }
  const fs::path dir = orch::default_web_dir_location();
  if (orch::has_dashboard(dir)) {
    w.dir = dir;
    return w;
  }
  // <build>/share/precon/web: a build tree names itself by its CMakeCache.txt; an installed
  // program's prefix does not, and needs `cmake --install` after the build.
  const fs::path root = dir.parent_path().parent_path().parent_path();
  std::error_code ec;
  const bool build_tree = !dir.empty() && fs::exists(root / "CMakeCache.txt", ec);
  w.missing = "no dashboard: its files are not in " + (dir.empty() ? std::string("../share/precon/web") : dir.string()) +
              " (no index.html there; precon looks at ../share/precon/web from its own path). Build them with " +
              (build_tree ? "`cmake --build " + root.string() + " --target web`"
                          : std::string("`cmake --build BUILD --target web` and `cmake --install BUILD`")) +
              " (it fetches uPlot from the npm registry once), or pass --web-dir DIR";
  return w;
}

}  // namespace precon::cli
