// Finding and loading the CUDA backend's plugin (libprecon_cuda.so) on first use. Nothing here
// touches a GPU: loading maps the CUDA libraries, and a device is initialised by the first op.
// Thread-safety: loading happens once (a static local); the other calls are read-only after it.
#pragma once

#include <string>
#include <vector>

#include "kernels/backend_table.h"

namespace precon::kernels {

// The plugin's file name, and the environment variable that names another path for it.
constexpr const char* kCudaPluginName = "libprecon_cuda.so";
constexpr const char* kCudaPluginEnv = "PRECON_CUDA_PLUGIN";

// Where the plugin is looked for, in order: $PRECON_CUDA_PLUGIN alone when it is set; else the
// library directory beside this program's (<bin>/../lib: an installed tree and the build tree,
// where precon-train and the tests sit one level below <build>/lib), then the build tree's own
// copy. Empty in a build without the CUDA backend.
std::vector<std::string> cuda_plugin_candidates();

// The loaded plugin's table. Throws PluginError (the plugin is absent or cannot be loaded: the
// message names the path and the loader's reason) or, in a build without CUDA, UnsupportedError.
const BackendTable& cuda_backend();

// A further symbol of the plugin (the NCCL communicator's entry), loading it first; nullptr
// when this plugin does not define it. Throws as cuda_backend() does.
void* cuda_plugin_symbol(const char* name);

// Whether the plugin loads, without initialising a device: "cuda (plugin PATH)", "cuda: not
// built", or "cuda: unavailable (REASON)". For --version.
std::string cuda_backend_summary();

// The GPU of this rank on a node, applied when (if) the plugin loads: ranks share the node's
// GPUs one each. A process that never uses CUDA never loads the plugin for it.
void set_cuda_local_rank(int local_rank);

}  // namespace precon::kernels
