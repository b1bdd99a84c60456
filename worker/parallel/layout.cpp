#include "worker/parallel/layout.h"

#include <cstdlib>

#include "worker/config/parse.h"
#include "worker/parallel/counting_communicator.h"

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

namespace {
std::unique_ptr<Communicator> counted(std::unique_ptr<Communicator> group) {
  return std::make_unique<CountingCommunicator>(std::move(group));
}
int64_t sent(const std::unique_ptr<Communicator>& group) {
  const auto* counting = dynamic_cast<const CountingCommunicator*>(group.get());
  return counting ? counting->bytes_sent() : 0;
}
}  // namespace

ParallelContext::GroupBytes ParallelContext::bytes_sent() const {
  return {sent(tp), sent(dp) + sent(stage), sent(pp) + sent(embedding),
          sent(ep) + sent(expert_stage) + sent(expert_dp)};
}

int ParallelContext::row_holder(const ParamSpec& spec, int s, int tp_rank) const {
  return world_rank(s, expert_holder(spec, expert), tp_rank);
}

Communicator& ParallelContext::replicas_of(const ParamSpec& spec) const {
  return spec.expert >= 0 && expert_dp ? *expert_dp : *dp;
}

ParallelContext make_parallel_context(std::unique_ptr<Communicator> world, const ParallelConfig& layout,
                                      int64_t n_layer) {
  const int64_t needed = layout.tensor * layout.data * layout.pipeline;
  if (needed != world->size()) {
    throw ConfigError("config", 0, "parallel",
                      "the layout parallel.tensor × parallel.data × parallel.pipeline = " + std::to_string(layout.tensor) +
                          " × " + std::to_string(layout.data) + " × " + std::to_string(layout.pipeline) + " needs " +
                          std::to_string(needed) + " rank(s), but the launcher started " +
                          std::to_string(world->size()) + " (mpirun -np " + std::to_string(needed) +
                          ", or srun with that many tasks)");
  }
  ParallelContext ctx;
  ctx.tensor = static_cast<int>(layout.tensor);
  ctx.data = static_cast<int>(layout.data);
  ctx.pipeline = static_cast<int>(layout.pipeline);
  const int rank = world->rank(), per_stage = ctx.tensor * ctx.data;
  const int tp = rank % ctx.tensor, dp = rank / ctx.tensor % ctx.data, pp = rank / per_stage;
  ctx.tp = counted(world->split(rank / ctx.tensor, tp));
  ctx.dp = counted(world->split(pp * ctx.tensor + tp, dp));
  ctx.pp = counted(world->split(dp * ctx.tensor + tp, pp));
  ctx.stage = counted(world->split(pp, group_member(dp, tp, ctx.tensor)));
  ctx.expert = static_cast<int>(layout.expert);
  if (ctx.data % ctx.expert != 0)
    throw ConfigError("config", 0, "parallel.expert",
                      "expert = " + std::to_string(ctx.expert) + " ranks must divide parallel.data = " + std::to_string(ctx.data));
  ctx.ep = counted(ctx.dp->split(dp / ctx.expert, dp));
  if (ctx.expert > 1) {
    ctx.expert_stage = counted(world->split(pp * ctx.expert + dp % ctx.expert, group_member(dp / ctx.expert, tp, ctx.tensor)));
    ctx.expert_dp = counted(world->split((pp * ctx.expert + dp % ctx.expert) * ctx.tensor + tp, dp / ctx.expert));
  }
  const bool ends = ctx.pipeline > 1 && (pp == 0 || pp == ctx.pipeline - 1);
  // Every rank takes part in the split; the middle stages each get a group of their own and drop it.
  std::unique_ptr<Communicator> embedding = world->split(ends ? dp * ctx.tensor + tp : per_stage + rank, pp);
  if (ends) ctx.embedding = counted(std::move(embedding));
  ctx.virtual_stages = static_cast<int>(layout.virtual_stages);
  ctx.stage_layers = stage_layer_counts(layout, n_layer);
  ctx.world = std::move(world);
  return ctx;
}

}  // namespace precon::worker
