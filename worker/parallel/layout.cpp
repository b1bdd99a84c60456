#include "worker/parallel/layout.h"

#include <cstdlib>

#include "worker/config/parse.h"

namespace precon::worker {

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
}  // namespace

LaunchInfo launch_info_from_env() {
  LaunchInfo info;
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    info.launcher = "mpirun";
    info.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    info.world_rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    info.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  } else if (std::getenv("SLURM_PROCID") && std::getenv("SLURM_STEP_ID")) {
    // Inside an srun step (a batch script's own shell has no step id).
    info.launcher = "srun";
    info.world_size = env_int("SLURM_NTASKS", env_int("SLURM_NPROCS", 1));
    info.world_rank = env_int("SLURM_PROCID", 0);
    info.local_rank = env_int("SLURM_LOCALID", 0);
  } else if (std::getenv("PMIX_RANK")) {
    info.launcher = "pmix";
    info.world_rank = env_int("PMIX_RANK", 0);
    info.world_size = env_int("PMIX_SIZE", 1);
  }
  return info;
}

ParallelContext make_parallel_context(std::unique_ptr<Communicator> world, const ParallelConfig& layout) {
  const int64_t needed = layout.tensor * layout.data;
  if (needed != world->size()) {
    throw ConfigError("config", 0, "parallel",
                      "the layout parallel.tensor × parallel.data = " + std::to_string(layout.tensor) + " × " +
                          std::to_string(layout.data) + " needs " + std::to_string(needed) +
                          " rank(s), but the launcher started " + std::to_string(world->size()) +
                          " (mpirun -np " + std::to_string(needed) + ", or srun with that many tasks)");
  }
  ParallelContext ctx;
  ctx.tensor = static_cast<int>(layout.tensor);
  ctx.data = static_cast<int>(layout.data);
  const int rank = world->rank();
  ctx.tp = world->split(rank / ctx.tensor, rank % ctx.tensor);
  ctx.dp = world->split(rank % ctx.tensor, rank / ctx.tensor);
  ctx.world = std::move(world);
  return ctx;
}

}  // namespace precon::worker
