// The trainer's memory pre-check (train.memory_check): before it allocates anything, precon-train
// compares the memory estimate (worker/model/memory_estimate.h: parameters, gradients, optimizer
// state, activations) with the memory it may have, and refuses to start a run that cannot fit,
// where it would otherwise be killed by the out-of-memory killer minutes later, or thrash.
#pragma once

#include <string>

#include "kernels/tensor.h"
#include "worker/config/config.h"

namespace precon::worker {

// The memory this process may still allocate, and where that bound comes from.
struct MemoryRoom {
  double bytes = -1;   // -1: nothing says (no /proc/meminfo, no limit)
  std::string source;  // "MemAvailable in /proc/meminfo", "cgroup /a/b: memory.max 512.0 MiB, 3.1 MiB in use"
};

// The least of MemAvailable and, for this process's cgroup and each cgroup above it, its limit less
// its usage (cgroup v2 memory.max − memory.current; v1 memory.limit_in_bytes − memory.usage_in_bytes).
// root: a directory standing for "/" (tests); empty: the real one.
MemoryRoom host_memory_room(const std::string& root = "");

// Why the run cannot fit, naming the estimate by component and the room: the rank's share, times
// the ranks on this node (CPU), against the host's room, or a GPU rank's share against the
// device's free memory. Empty when it fits, when nothing bounds it, or when
// config.train.memory_check is false.
std::string memory_problem(const TrialConfig& config, kernels::Device device);

}  // namespace precon::worker
