// What a trial's model needs in memory before it trains, from its config alone: a lower bound that
// counts the parameters, their gradients, the optimizer's state and the bf16 weight copies, not the
// activations. The controller refuses at recipe check and at submit a trial whose bound does not fit
// in resources.mem (or, for the local executor, in this machine's memory), instead of launching it
// to fail. Part of the worker's interface to the controller (tests/structure/check_includes.py).
#pragma once

#include <cstdint>
#include <string>

#include "worker/config/config.h"

namespace precon::worker {

struct MemoryEstimate {
  int64_t parameters = 0;     // of the whole model
  // The largest rank's share: its tensor-parallel parts of its pipeline stage's rows and of its
  // experts (norms, positions and row-parallel biases whole), their gradients, and the optimizer
  // state spread over the ranks that hold the same parts (the owners' matrix state, and AdamW's
  // moments under parallel.distributed_optimizer).
  double bytes_per_rank = 0;
  double bytes_per_node = 0;  // the ranks that share one node
};

MemoryEstimate estimate_memory(const TrialConfig& config);

// resources.mem ("16G", "500M", a plain number of megabytes as sbatch reads it) in bytes; 0 when unset.
double memory_limit_bytes(const std::string& mem);

// "48.0 TiB", "1.2 GiB", "640 MiB": bytes for messages (binary units, as resources.mem reads them).
std::string bytes_text(double bytes);

}  // namespace precon::worker
