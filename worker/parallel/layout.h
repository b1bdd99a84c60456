// Where this process sits in a job and the communicators of its layout. A layout is
// tensor × data = world size; rank = dp_rank · tensor + tp_rank, so the ranks of one tensor-
// parallel group are adjacent (on one node), as Megatron orders them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "worker/config/config.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

// The launcher's view of this process, from its environment: mpirun (OMPI_COMM_WORLD_*), srun
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) or PMIx (PMIX_RANK). Size 1 when none of them.
struct LaunchInfo {
  int world_size = 1;
  int world_rank = 0;
  int local_rank = 0;
  std::string launcher;  // "mpirun", "srun", "pmix" or "" (started directly)
};
LaunchInfo launch_info_from_env();

struct ParallelContext {
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> tp;  // the ranks that share one data slice
  std::unique_ptr<Communicator> dp;  // the ranks that hold the same shard of the model
  int tensor = 1;
  int data = 1;
  int tp_rank() const { return tp->rank(); }
  int dp_rank() const { return dp->rank(); }
  bool first() const { return world->rank() == 0; }  // writes metrics, reports, checkpoints
};

// Checks the config's layout against the world's size and splits the groups (a collective: every
// rank calls it). Throws ConfigError naming both numbers when they differ.
ParallelContext make_parallel_context(std::unique_ptr<Communicator> world, const ParallelConfig& layout);

}  // namespace precon::worker
