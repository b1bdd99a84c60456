#include "worker/parallel/pipeline_state.h"

#include <algorithm>
#include <cmath>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/common/error.h"
#include "worker/parallel/pipeline_schedule.h"

namespace precon::worker {

namespace k = kernels;

namespace {

// Virtual stage s's blocks and ends, with one slot; with own_experts only this rank's routed
// experts (expert parallelism), else all of them.
ModelStage virtual_stage(const ParallelContext& par, int s, bool own_experts = true) {
  ModelStage stage = pipeline_stage(par.stage_layers, static_cast<size_t>(s));
  if (own_experts && par.expert > 1) {
    stage.expert_rank = par.ep_rank();
    stage.expert_ranks = par.expert;
  }
  return stage;
}
}  // namespace

std::vector<ModelStage> pipeline_chunks(const ParallelContext& par, int p, int64_t micro_batches) {
  const std::vector<int> slots = pipeline_slots(p, par.pipeline, par.virtual_stages, micro_batches);
  std::vector<ModelStage> chunks;
  for (int v = 0; v < par.virtual_stages; ++v) {
    chunks.push_back(virtual_stage(par, par.virtual_stage(v, p)));
    chunks.back().slots = slots[static_cast<size_t>(v)];
  }
  return chunks;
}

std::vector<size_t> pipeline_rank_rows(const ParallelContext& par, const std::vector<ParamSpec>& table, int p) {
  std::vector<size_t> rows;
  for (int v = 0; v < par.virtual_stages; ++v)
    for (size_t row : stage_rows(table, virtual_stage(par, par.virtual_stage(v, p)))) rows.push_back(row);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

std::string pipeline_blocks_text(const std::vector<ModelStage>& chunks) {
  std::string text = "blocks ";
  for (size_t i = 0; i < chunks.size(); ++i)
    text += (i ? ", " : "") + std::to_string(chunks[i].first_layer) + " to " + std::to_string(chunks[i].end_layer - 1);
  return text;
}

ModelGather::ModelGather(Communicator& world, const ParallelContext& par, const ParamStore& params)
    : world_(world), par_(par), params_(params), from_(params.size(), -1) {
  // Each row once, from the first stage that holds it (a routed expert from the rank of that stage
  // that holds it), in table order on every side.
  for (int s = par.pipeline - 1; s >= 0; --s)
    for (int v = 0; v < par.virtual_stages; ++v)
      for (size_t row : stage_rows(params.table(), virtual_stage(par, par.virtual_stage(v, s), false))) from_[row] = s;
}

int ModelGather::parts(size_t row) const { return params_.split(row) ? par_.tensor : 1; }

void ModelGather::fetch(size_t row, std::vector<float>& whole) {
  // A split row comes as every tensor-parallel rank's part, each placed into the whole tensor.
  const ParamSpec& spec = params_.spec(row);
  whole.resize(static_cast<size_t>(spec.storage_numel()));
  const int n_parts = parts(row);
  for (int t = 0; t < n_parts; ++t) {
    const int holder = par_.row_holder(spec, from_[row], t);
    if (n_parts == 1) {
      const int64_t n = spec.storage_numel();
      if (holder == 0) k::copy(k::Tensor::view(whole.data(), {n}), params_.param(row).reshape({n}));
      else world_.recv(whole.data(), n, holder);
      continue;
    }
    const int64_t n = tp_part_spec(spec, n_parts, t).storage_numel();
    part_.resize(static_cast<size_t>(n));
    const k::Tensor packed = k::Tensor::view(part_.data(), {n});
    if (holder == 0) k::copy(packed, params_.param(row).reshape({n}));
    else world_.recv(part_.data(), n, holder);
    copy_part_to_full(spec, whole.data(), packed, TpPlace{t, n_parts});
  }
}

void ModelGather::send_rows() {
  const int me = world_.rank();
  for (size_t row = 0; row < params_.size(); ++row)
    for (int t = 0; t < parts(row); ++t) {
      if (par_.row_holder(params_.spec(row), from_[row], t) != me) continue;
      const k::Tensor src = params_.param(row);
      if (src.device != k::Device::cpu || !src.contiguous())
        throw WorkerError("checkpoint: " + params_.spec(row).name + " is not a contiguous host tensor");
      world_.start_send(src.f32(), src.numel(), 0)->wait();
    }
}

}  // namespace precon::worker
