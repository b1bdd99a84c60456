// The objective a checkpoint was ranked by, as the trainer recorded it in the checkpoint's
// trainer.json ("objective": {"value": ...}): keep_best ranks checkpoints by it, a resumed run
// starts from it, and the controller records it beside each checkpoint it lists.
// Thread-safety: a free function reading one file; reentrant.
#pragma once

#include <filesystem>
#include <optional>

namespace precon::worker {

// The objective value recorded in a checkpoint's trainer.json; nullopt when absent or unreadable.
std::optional<double> checkpoint_objective(const std::filesystem::path& dir);

}  // namespace precon::worker
