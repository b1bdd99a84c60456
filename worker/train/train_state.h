// What a checkpoint holds for one run and how it is restored: model weights (HF safetensors),
// every optimizer state tensor, and trainer.json (step, data position, optimizer counters,
// config hash, parallel layout). Resume continues the run exactly (bitwise on CPU).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "worker/config/config.h"
#include "worker/data/loader.h"
#include "worker/model/gpt.h"
#include "worker/optim/optimizer.h"

namespace precon::worker {

// Identifies what a checkpoint can be resumed into: model shape, optimizer and parallel layout.
std::string config_hash(const TrialConfig& config);

struct RunState {
  TrialConfig* config = nullptr;
  Gpt* model = nullptr;
  Optimizer* optimizer = nullptr;
  DataLoader* loader = nullptr;
  std::optional<double> objective;  // latest objective.metric value at this step, if reported
};

// The objective value recorded in a checkpoint's trainer.json; nullopt when absent or unreadable.
std::optional<double> checkpoint_objective(const std::filesystem::path& dir);

// Writes RUN_DIR/checkpoints/step_NNNNNNNN (model.safetensors, optimizer.safetensors,
// trainer.json, config.json (HF's), config.toml (the run's), manifest.json) and applies
// keep_checkpoints/keep_best.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step, const RunState& state);

// Restores a checkpoint directory into the state; returns its step. Throws CheckpointError (with
// the directory and what did not match) when it belongs to another model or optimizer.
int64_t load_checkpoint(const std::filesystem::path& dir, const RunState& state);

}  // namespace precon::worker
