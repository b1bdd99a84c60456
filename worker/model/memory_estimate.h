// What a trial's model needs in memory before it trains, from its config alone: the parameters, their
// gradients, the optimizer's state, the bf16 weight copies and the activations of one micro-batch per
// activation slot (activations.h: the same plan the trainer allocates its activations from). The
// controller refuses at recipe check and at submit a trial whose estimate does not fit in
// resources.mem (or, for the local executor, in this machine's memory), and precon-train refuses to
// start one that does not fit in the memory it can have (train.memory_check), instead of being
// killed by the out-of-memory killer. The data loader, the communication buffers and the optimizer's
// scratch are not counted. Part of the worker's interface to the controller
// (tests/structure/check_includes.py).
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
  // moments under parallel.distributed_optimizer), and its activations; by component, then in all.
  double parameter_bytes = 0;   // fp32 parameters (this rank's parts) and their bf16 copies
  double gradient_bytes = 0;
  double optimizer_bytes = 0;
  double activation_bytes = 0;  // every chunk's slots, one micro-batch each (activations.h)
  double bytes_per_rank = 0;
  double bytes_per_node = 0;  // the ranks that share one node
};

MemoryEstimate estimate_memory(const TrialConfig& config);
// "parameters 1.2 GiB, gradients 1.2 GiB, optimizer state 2.4 GiB, activations 11.0 GiB" (a rank's).
std::string estimate_text(const MemoryEstimate& e);

// resources.mem ("16G", "500M", a plain number of megabytes as sbatch reads it) in bytes; 0 when unset.
double memory_limit_bytes(const std::string& mem);

// "48.0 TiB", "1.2 GiB", "640 MiB": bytes for messages (binary units, as resources.mem reads them).
std::string bytes_text(double bytes);

}  // namespace precon::worker
