// What a checkpoint holds for one run and how it is restored: model weights (HF safetensors),
// every optimizer state tensor, and trainer.json (step, data position, optimizer counters,
// config hash, parallel layout). Resume continues the run exactly (bitwise on CPU).
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "worker/ckpt/objective.h"
#include "worker/config/config.h"
#include "worker/data/loader.h"
#include "worker/model/model.h"
#include "worker/optim/optimizer.h"

namespace precon::worker {

// Identifies what a checkpoint can be resumed into: model shape, optimizer and parallel layout.
std::string config_hash(const TrialConfig& config);

struct RunState {
  TrialConfig* config = nullptr;
  Model* model = nullptr;
  Optimizer* optimizer = nullptr;
  DataLoader* loader = nullptr;
  std::optional<double> objective;  // latest objective.metric value at this step, if reported
  // Every rank of the job (null: one process). Saving and loading are collectives over it: each
  // rank writes the optimizer state it holds and reads what it holds now, whatever layout wrote it.
  Communicator* group = nullptr;
  // The ranks that hold the same parameters (a pipeline stage's; null: the whole group): a load
  // compares their checksums.
  Communicator* replicas = nullptr;
  // This rank's tensor-parallel group (null: none): its ranks hold the replicated rows alike.
  Communicator* tp = nullptr;
  // Where this rank does not hold the whole model (pipeline stages, tensor-parallel parts, experts):
  // on the first rank, each row's whole tensor as model.safetensors reaches it; on the others, the
  // sends that feed those (called while the first rank writes). Both unset: the model's own store.
  std::function<void(size_t row, std::vector<float>& whole)> fetch_model_row;
  std::function<void()> send_model_rows;
};

// Writes RUN_DIR/checkpoints/step_NNNNNNNN (model.safetensors, the optimizer state in files:
// optimizer.safetensors for one rank, optimizer-RRRRR-of-NNNNN.safetensors for several, each
// rank's holding the entries it writes, and optimizer.json listing every entry's name, file,
// global shape and offset; trainer.json, config.json (HF's), config.toml (the run's),
// manifest.json) and applies keep_checkpoints/keep_best. A collective over state.group: the
// checkpoint counts only once every rank has written its file (barrier, manifest, rename), and
// every rank returns after that.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step, const RunState& state);

// Restores a checkpoint directory into the state; returns its step. Throws CheckpointError (with
// the directory and what did not match) when it belongs to another model or optimizer. Every
// rank of state.group calls it; afterwards the ranks of state.replicas compare a checksum of
// their parameters and throw CheckpointError naming the ranks that differ.
// Test-only: PRECON_FAULT_PERTURB_REPLICA=RANK changes one parameter on that rank first.
int64_t load_checkpoint(const std::filesystem::path& dir, const RunState& state);

// Why the checkpoint in `dir`, though its checksums pass, cannot be resumed by this run, read
// without touching `state`: trainer.json's step is not an integer in [0, train.steps], or a
// tensor of model.safetensors is missing, of another shape or size than the parameter table
// says, or holds a NaN or infinity. nullopt when it can.
std::optional<std::string> checkpoint_unusable(const std::filesystem::path& dir, const RunState& state);

}  // namespace precon::worker
