#include "worker/parallel/pipeline_state.h"

#include <algorithm>
#include <cmath>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/common/error.h"
#include "worker/parallel/comm_cost.h"
#include "worker/parallel/pipeline_schedule.h"

namespace precon::worker {

namespace k = kernels;
using nlohmann::json;

namespace {

// Virtual stage s's blocks and ends, with one slot; with own_experts only this rank's routed
// experts (expert parallelism), else all of them.
ModelStage virtual_stage(const ParallelContext& par, int s, bool own_experts = true) {
  ModelStage stage = pipeline_stage(par.stage_layers, static_cast<size_t>(s));
  if (own_experts && par.expert > 1) {
    stage.expert_rank = par.ep->rank();
    stage.expert_ranks = par.expert;
  }
  return stage;
}
}  // namespace

void broadcast_json(Communicator& world, json& value, int root) {
  const bool is_root = world.rank() == root;
  std::string text = is_root ? value.dump() : std::string();
  int64_t n = static_cast<int64_t>(text.size());
  world.broadcast(&n, sizeof n, root);
  text.resize(static_cast<size_t>(n));
  world.broadcast(text.data(), n, root);
  if (!is_root) value = json::parse(text);
}

void merge_scalars(json& into, const json& from) {
  if (into.is_null()) {
    into = from;
  } else if (into.is_object() && from.is_object()) {
    for (const auto& [key, value] : from.items()) merge_scalars(into[key], value);
  } else if (into.is_number_integer() && from.is_number_integer()) {
    into = into.get<int64_t>() + from.get<int64_t>();
  } else if (into.is_number() && from.is_number()) {
    into = into.get<double>() + from.get<double>();
  }
}

json scalars_for(const json& saved, const json& mine, bool first) {
  if (saved.is_object() && mine.is_object()) {
    json out = json::object();
    for (const auto& [key, value] : saved.items()) {
      if (mine.contains(key)) out[key] = scalars_for(value, mine.at(key), first);
    }
    return out;
  }
  if (saved.is_number() && !first) return saved.is_number_integer() ? json(0) : json(0.0);
  return saved;
}

std::vector<ModelStage> pipeline_chunks(const ParallelContext& par, int p, int64_t micro_batches) {
  const std::vector<int> slots = pipeline_slots(p, par.pipeline, par.virtual_stages, micro_batches);
  std::vector<ModelStage> chunks;
  for (int v = 0; v < par.virtual_stages; ++v) {
    chunks.push_back(virtual_stage(par, v * par.pipeline + p));
    chunks.back().slots = slots[static_cast<size_t>(v)];
  }
  return chunks;
}

std::vector<size_t> pipeline_rank_rows(const ParallelContext& par, const std::vector<ParamSpec>& table, int p) {
  std::vector<size_t> rows;
  for (int v = 0; v < par.virtual_stages; ++v)
    for (size_t row : stage_rows(table, virtual_stage(par, v * par.pipeline + p))) rows.push_back(row);
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

StageOptimizers::StageOptimizers(std::unique_ptr<Optimizer> own, int own_stage, int stages, std::string tied_name)
    : own_(std::move(own)), own_stage_(own_stage), stages_(stages), tied_name_(std::move(tied_name)),
      scalars_(static_cast<size_t>(stages)) {}

std::vector<NamedState> StageOptimizers::state_tensors() {
  std::vector<NamedState> out = own_->state_tensors();
  if (own_stage_ > 0)
    for (NamedState& s : out)
      if (s.param == tied_name_) s.primary = false;
  return out;
}

json StageOptimizers::state_scalars() const {
  json out = json::object();
  for (int s = 0; s < stages_; ++s)
    merge_scalars(out, s == own_stage_ ? own_->state_scalars() : scalars_[static_cast<size_t>(s)]);
  return out;
}

void StageOptimizers::load_state_scalars(const json& scalars) {
  own_->load_state_scalars(scalars_for(scalars, own_->state_scalars(), own_stage_ == 0));
}

void StageOptimizers::gather(Communicator& world, const ParallelContext& par) {
  for (int s = 0; s < stages_; ++s) {
    const int root = par.stage_leader(s);
    json scalars = s == own_stage_ ? own_->state_scalars() : json();
    broadcast_json(world, scalars, root);
    scalars_[static_cast<size_t>(s)] = std::move(scalars);
  }
}

ModelGather::ModelGather(Communicator& world, const ParallelContext& par, const ParamStore& params)
    : world_(world), par_(par), params_(params), from_(params.size(), -1) {
  // Each row once, from the first stage that holds it (a routed expert from the rank of that stage
  // that holds it), in table order on every side.
  for (int s = par.pipeline - 1; s >= 0; --s)
    for (int v = 0; v < par.virtual_stages; ++v)
      for (size_t row : stage_rows(params.table(), virtual_stage(par, v * par.pipeline + s, false))) from_[row] = s;
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

int64_t sum_stage_gradients(const ParallelContext& par, const ParamStore& p, const std::vector<size_t>& rows,
                            float scale) {
  int64_t bytes = 0;
  // Each gradient is summed over the ranks that hold the same part of it (routed experts' over
  // those that hold the same experts).
  auto group = [&](size_t row) { return &par.replicas_of(p.spec(row)); };
  // Maximal runs of adjacent rows of one group are contiguous gradient memory: one all-reduce each.
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1 && group(rows[j]) == group(rows[i])) ++j;
    float* first = p.grad(rows[i]).f32();
    const k::Tensor last = p.grad(rows[j - 1]);
    const int64_t n = (last.f32() + last.numel()) - first;
    Communicator& g = *group(rows[i]);
    if (g.size() > 1) {
      g.all_reduce_sum(first, n);
      bytes += sent_by_all_reduce(n * static_cast<int64_t>(sizeof(float)), g.size());
    }
    if (scale != 1.0f) k::scale(k::Tensor::view(first, {n}), scale);
    i = j;
  }
  return bytes + sum_tied_embedding(par, p);
}

int64_t sum_tied_embedding(const ParallelContext& par, const ParamStore& p) {
  const size_t tied = tied_embedding_row(p.table());
  if (!par.embedding || tied == p.size()) return 0;  // untied: the head's matrix lies on the last stage only
  const k::Tensor wte = p.grad(tied);
  par.embedding->all_reduce_sum(wte.f32(), wte.numel());
  return sent_by_all_reduce(wte.numel() * static_cast<int64_t>(sizeof(float)), par.embedding->size());
}

double pipeline_grad_norm(const ParallelContext& par, const ParamStore& p, const std::vector<size_t>& rows) {
  const size_t wte = tied_embedding_row(p.table());  // p.size() when untied
  // The tied embedding counts on the first stage; under tensor parallelism a replicated row on the
  // first tensor-parallel rank (each rank adds its split rows' parts).
  auto counted = [&](size_t row) {
    return (row != wte || par.first_stage()) && (par.tensor == 1 || p.split(row) || par.tp_rank() == 0);
  };
  double squared = 0;
  if (par.expert > 1) {
    // Each expert-parallel rank of a stage adds its own experts' squares once.
    double dense = 0, experts = 0;
    for (size_t row : rows)
      if (counted(row)) (p.spec(row).expert >= 0 ? experts : dense) += k::sum_squares(p.grad(row));
    par.ep->all_reduce_sum(&experts, 1);
    squared = dense + experts;
  } else {
    std::vector<k::Tensor> grads;
    for (size_t row : rows)
      if (counted(row)) grads.push_back(p.grad(row));
    const double norm = grads.empty() ? 0.0 : k::global_norm(grads);
    squared = norm * norm;
  }
  if (par.tensor > 1) par.tp->all_reduce_sum(&squared, 1);
  par.pp->all_reduce_sum(&squared, 1);
  return std::sqrt(squared);
}

}  // namespace precon::worker
