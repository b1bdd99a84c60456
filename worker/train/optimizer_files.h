// Optimizer state in a checkpoint: each rank writes the state it is the primary holder of into its
// own safetensors file, and optimizer.json lists every entry with its file, the global shape of
// its tensor and where in that tensor it lies, so any layout reads it back. An entry is a whole
// tensor, or a part of one (a box: offset and shape within the global shape), stored under the key
// "<name>@<offset,...>" and described in the file's metadata ("precon.parts").
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/ckpt/safetensors.h"
#include "worker/optim/optimizer.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

// optimizer.safetensors for one rank, optimizer-RRRRR-of-NNNNN.safetensors for several.
std::string optimizer_file_name(int rank, int ranks);

// The entries this rank writes (the primary holder of each), with host copies where the state is
// on the device or strided, and the file's metadata.
struct OptimizerFile {
  std::vector<std::vector<float>> host;
  std::vector<SafetensorsEntry> entries;
  SafetensorsMetadata metadata;
};
OptimizerFile optimizer_file(Optimizer& optimizer);

// One file as the index sees it: its file name, its tensors' keys and shapes, its metadata.
struct FileListing {
  std::string file;
  std::vector<SafetensorsEntry> entries;  // data unused
  SafetensorsMetadata metadata;
};
// optimizer.json: {"format": 1, "entries": [{name, file, global_shape, offset, shape[, key]}]};
// key is given where it differs from the name (a part).
nlohmann::json optimizer_index(const std::vector<FileListing>& files);

// Reads into every state tensor (or part) this rank holds the values the checkpoint in `dir` has
// for it, from whichever entries overlap it. Throws CheckpointError naming the file and the state
// when an entry is missing, of another global shape, or the entries do not cover the part exactly
// once; then, over `group` (null: one rank), when the checkpoint holds values no rank holds now.
void load_optimizer_files(const std::filesystem::path& dir, Optimizer& optimizer, Communicator* group);

}  // namespace precon::worker
