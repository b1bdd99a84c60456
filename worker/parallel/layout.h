// Where this process sits in a job and the communicators of its layout. A layout is
// tensor × data × pipeline = world size; rank = (pp_rank · data + dp_rank) · tensor + tp_rank:
// tensor-parallel ranks are adjacent (on one node) and pipeline stages the slowest, Megatron's order.
// The expert-parallel groups split each data-parallel group into runs of parallel.expert ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/config/config.h"
#include "worker/model/params.h"
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

// A group of the ranks that hold the same rows (a stage's tensor × data ranks, the ranks of one
// expert-parallel rank: ParallelContext::stage, expert_stage) orders them as member = data index ·
// tensor + tensor rank; the distributed optimizer plans over that order.
inline int group_member(int data_index, int tensor_rank, int tensor) { return data_index * tensor + tensor_rank; }
inline int member_data_index(int member, int tensor) { return member / tensor; }
inline int member_tensor_rank(int member, int tensor) { return member % tensor; }

struct ParallelContext {
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> tp;  // the ranks that share one data slice
  std::unique_ptr<Communicator> dp;  // the ranks that hold the same part of the same stage
  std::unique_ptr<Communicator> pp;  // one rank of every stage (same dp and tp rank), in stage order
  std::unique_ptr<Communicator> stage;  // every rank of this stage (tensor × data ranks)
  // parallel.expert consecutive ranks of the data-parallel group (Megatron's expert-model-parallel
  // group): each holds 1/expert of every MoE layer's experts and they exchange tokens by all-to-all.
  std::unique_ptr<Communicator> ep;
  // With several expert-parallel ranks (null otherwise): the ranks of this stage that hold the same
  // experts, whose expert gradients are summed together and whose optimizer shares out their work
  // (Megatron's expert-data-parallel group, with its tensor-parallel ranks): the ranks of the same
  // expert-parallel rank, group rank = data index / expert · tensor + tensor rank (the order
  // OptimizerHooks::group asks for).
  std::unique_ptr<Communicator> expert_stage;
  // With several expert-parallel ranks: the ranks of expert_stage with this tensor-parallel rank,
  // which hold the same parts of the same experts (their gradients are summed over it), in data
  // order; null otherwise.
  std::unique_ptr<Communicator> expert_dp;
  // The first and the last stage's ranks of one pipeline (they both hold the tied embedding);
  // null on the other stages and with one stage.
  std::unique_ptr<Communicator> embedding;
  int tensor = 1;
  int data = 1;
  int pipeline = 1;
  int expert = 1;
  // Model chunks a pipeline rank holds (interleaved 1F1B): virtual stage v·pipeline + p, for v in
  // [0, virtual_stages), lies on pipeline rank p. 1: one contiguous stage a rank.
  int virtual_stages = 1;
  std::vector<int64_t> stage_layers;  // transformer blocks of each virtual stage, first to last
  // Bytes this rank sent over each kind of group since set-up (the groups count them:
  // counting_communicator.h): tensor-parallel (the layers' activation sums), data-parallel (the
  // gradient sums and the optimizers' all-gathers, over the stage's tensor × data ranks when
  // tensor parallelism sums the gradients there), pipeline (activations between stages and the
  // tied embedding's sum) and expert-parallel (the token all-to-alls and the experts' gradients).
  struct GroupBytes {
    int64_t tp = 0, dp = 0, pp = 0, ep = 0;
  };
  GroupBytes bytes_sent() const;
  int tp_rank() const { return tp->rank(); }
  int dp_rank() const { return dp->rank(); }
  int pp_rank() const { return pp->rank(); }
  int ep_rank() const { return ep->rank(); }
  bool first_stage() const { return pp_rank() == 0; }
  bool last_stage() const { return pp_rank() == pipeline - 1; }
  // The world rank of tensor rank t of data index d of stage s: the layout's one formula.
  int world_rank(int s, int d, int t = 0) const { return (s * data + d) * tensor + t; }
  // The world rank of stage s's first rank (data and tensor rank 0), which speaks for the stage.
  int stage_leader(int s) const { return world_rank(s, 0); }
  // The world rank of stage s's first rank that holds expert-parallel rank e's experts (data index e).
  int expert_leader(int s, int e) const { return world_rank(s, e); }
  // The first row of the global batch of micro-batch j of this rank's slice (`slice` sequences per
  // data-parallel rank, `micro` per micro-batch).
  int64_t batch_row(int64_t slice, int64_t micro, int64_t j) const { return dp_rank() * slice + j * micro; }
  // The virtual stage of chunk v of pipeline rank p (interleaving).
  int virtual_stage(int v, int p) const { return v * pipeline + p; }
  // Expert parallelism: the routed experts [first, end) of each MoE layer of `experts` this rank holds.
  int64_t first_expert(int64_t experts) const { return ep_rank() * (experts / expert); }
  int64_t end_expert(int64_t experts) const { return (ep_rank() + 1) * (experts / expert); }
  bool first() const { return world->rank() == 0; }  // writes metrics, reports, checkpoints
  // The world rank that holds tensor-parallel part `tp_rank` of table row `spec` of stage s for a
  // checkpoint: of the stage's first data-parallel rank, or for a routed expert of the first with
  // that expert's expert-parallel rank.
  int row_holder(const ParamSpec& spec, int s, int tp_rank = 0) const;
  // The group that sums the gradient of table row `spec`: the data-parallel ranks holding the same
  // part (expert_dp for a routed expert under expert parallelism, else dp).
  Communicator& replicas_of(const ParamSpec& spec) const;
};


// Checks the config's layout against the world's size and splits the groups (a collective: every
// rank calls it). Throws ConfigError naming both numbers when they differ.
ParallelContext make_parallel_context(std::unique_ptr<Communicator> world, const ParallelConfig& layout,
                                      int64_t n_layer);

}  // namespace precon::worker
