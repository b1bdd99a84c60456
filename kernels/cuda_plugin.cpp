#include "kernels/cuda_plugin.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "kernels/error.h"

namespace precon::kernels {

namespace {

namespace fs = std::filesystem;

std::atomic<int> local_rank{-1};
std::atomic<const BackendTable*> loaded{nullptr};  // set once the plugin has loaded

struct Plugin {
  void* handle = nullptr;
  const BackendTable* table = nullptr;
  std::string path;
  std::string problem;  // why it did not load; empty when it did
};

// dlopen, then the entry point and its ABI check. RTLD_NOW: a missing symbol or library is
// reported here, with the path, and not at some later call.
Plugin open_plugin(const std::string& path) {
  Plugin p;
  p.path = path;
  p.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!p.handle) {
    const char* why = dlerror();
    p.problem = "cannot load the CUDA backend plugin " + path + ": " + (why ? why : "unknown reason");
    return p;
  }
  using Entry = const BackendTable* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(p.handle, kBackendEntryPoint));
  const BackendTable* table = entry ? entry() : nullptr;
  if (!table) {
    p.problem = "the CUDA backend plugin " + path + " has no " + kBackendEntryPoint + " (not a precon plugin)";
  } else if (table->abi_version != kBackendAbiVersion || table->table_size != sizeof(BackendTable)) {
    p.problem = "the CUDA backend plugin " + path + " is from another precon build (interface version " +
                std::to_string(table->abi_version) + " with a " + std::to_string(table->table_size) +
                "-byte table, this program's " + std::to_string(kBackendAbiVersion) + " with " +
                std::to_string(sizeof(BackendTable)) + "): use the plugin built with this program";
  } else {
    p.table = table;
  }
  return p;
}

Plugin find_and_open() {
  if (!PRECON_HAVE_CUDA) return Plugin{nullptr, nullptr, "", "not built"};
  const bool named = std::getenv(kCudaPluginEnv) != nullptr;
  std::string tried;
  for (const std::string& path : cuda_plugin_candidates()) {
    std::error_code ec;
    // A path that is not there is passed over (unless it is the one named); one that is there
    // and fails to load is the answer.
    if (!named && !fs::exists(path, ec)) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    Plugin p = open_plugin(path);
    if (p.table) {
      int rank = local_rank.load();
      if (rank >= 0) p.table->select_device(rank);
      loaded.store(p.table);
    }
    return p;
  }
  return Plugin{nullptr, nullptr, "",
                std::string("the CUDA backend plugin ") + kCudaPluginName + " was not found (looked at " +
                    (tried.empty() ? std::string("nothing: this program's path is unknown") : tried) +
                    "): build the target precon_cuda (cmake --install puts it in <prefix>/lib), or set " +
                    kCudaPluginEnv + " to its path"};
}

const Plugin& plugin() {
  static const Plugin instance = find_and_open();
  return instance;
}

}  // namespace

std::vector<std::string> cuda_plugin_candidates() {
  if (!PRECON_HAVE_CUDA) return {};
  if (const char* path = std::getenv(kCudaPluginEnv); path && *path) return {path};
  std::vector<std::string> candidates;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((self.parent_path() / PRECON_CUDA_PLUGIN_RELATIVE_DIR / kCudaPluginName).lexically_normal().string());
  if (*PRECON_CUDA_PLUGIN_BUILD_PATH && (candidates.empty() || candidates[0] != PRECON_CUDA_PLUGIN_BUILD_PATH))
    candidates.push_back(PRECON_CUDA_PLUGIN_BUILD_PATH);
  return candidates;
}

const BackendTable& cuda_backend() {
  const Plugin& p = plugin();
  if (!PRECON_HAVE_CUDA)
    PRECON_THROW(UnsupportedError, "cuda",
                 "this build has no CUDA backend (configure with -DPRECON_CUDA=ON on a machine with nvcc), "
                 "or use device = \"cpu\"");
  if (!p.table) PRECON_THROW(PluginError, "cuda", p.problem);
  return *p.table;
}

void* cuda_plugin_symbol(const char* name) {
  cuda_backend();
  return dlsym(plugin().handle, name);
}

std::string cuda_backend_summary() {
  if (!PRECON_HAVE_CUDA) return "cuda: not built";
  const Plugin& p = plugin();
  return p.table ? "cuda (plugin " + p.path + ")" : "cuda: unavailable (" + p.problem + ")";
}

void set_cuda_local_rank(int rank) {
  local_rank.store(rank);
  if (const BackendTable* table = loaded.load()) table->select_device(rank);
}

}  // namespace precon::kernels
