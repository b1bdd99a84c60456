#include "worker/train/pipeline_state.h"

#include <cmath>
#include <map>
#include <set>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/common/error.h"
#include "worker/parallel/comm_cost.h"
#include "worker/train/pipeline_schedule.h"

namespace precon::worker {

namespace k = kernels;
using nlohmann::json;

namespace {

void broadcast_tensor(Communicator& world, const k::Tensor& t, int root, const std::string& what) {
  if (t.device != k::Device::cpu || t.dtype != k::DType::f32 || !t.contiguous())
    throw WorkerError("pipeline checkpoint: " + what + " is not a contiguous fp32 host tensor");
  world.broadcast(t.data, t.numel() * static_cast<int64_t>(sizeof(float)), root);
}

void broadcast_json(Communicator& world, json& value, int root, bool is_root) {
  std::string text = is_root ? value.dump() : std::string();
  int64_t n = static_cast<int64_t>(text.size());
  world.broadcast(&n, sizeof n, root);
  text.resize(static_cast<size_t>(n));
  world.broadcast(text.data(), n, root);
  if (!is_root) value = json::parse(text);
}

// Objects merged key by key (recursively), numbers summed.
void merge_into(json& into, const json& from) {
  if (into.is_null()) {
    into = from;
  } else if (into.is_object() && from.is_object()) {
    for (const auto& [key, value] : from.items()) merge_into(into[key], value);
  } else if (into.is_number_integer() && from.is_number_integer()) {
    into = into.get<int64_t>() + from.get<int64_t>();
  } else if (into.is_number() && from.is_number()) {
    into = into.get<double>() + from.get<double>();
  }
}

// The part of `saved` that `mine` (a stage's own scalars) has keys for; counters go to the first stage.
json select_for(const json& saved, const json& mine, bool first) {
  if (saved.is_object() && mine.is_object()) {
    json out = json::object();
    for (const auto& [key, value] : saved.items()) {
      if (mine.contains(key)) out[key] = select_for(value, mine.at(key), first);
    }
    return out;
  }
  if (saved.is_number() && !first) return saved.is_number_integer() ? json(0) : json(0.0);
  return saved;
}

}  // namespace

GptStage pipeline_stage(const ParallelContext& par, int s, int64_t micro_batches) {
  const std::vector<int64_t>& counts = par.stage_layers;
  GptStage stage;
  for (int i = 0; i < s; ++i) stage.first_layer += counts[static_cast<size_t>(i)];
  stage.end_layer = stage.first_layer + counts[static_cast<size_t>(s)];
  stage.embedding = s == 0;
  stage.head = s == par.pipeline - 1;
  stage.slots = pipeline_slots(s, par.pipeline, micro_batches);
  return stage;
}

StageOptimizers::StageOptimizers(std::vector<std::unique_ptr<Optimizer>> stages, int own)
    : stages_(std::move(stages)), own_(own) {}

std::vector<NamedState> StageOptimizers::state_tensors() {
  std::vector<NamedState> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < stages_.size(); ++i)
    for (NamedState& s : stages_[i]->state_tensors()) {
      s.primary = s.primary && static_cast<int>(i) == own_;
      if (seen.insert(s.name).second) out.push_back(std::move(s));
    }
  return out;
}

std::vector<StateKind> StageOptimizers::state_kinds() const {
  std::vector<StateKind> out;
  for (const auto& stage : stages_)
    for (StateKind& kind : stage->state_kinds()) out.push_back(std::move(kind));
  return out;
}

json StageOptimizers::state_scalars() const {
  json out = json::object();
  for (const auto& stage : stages_) merge_into(out, stage->state_scalars());
  return out;
}

void StageOptimizers::load_state_scalars(const json& scalars) {
  for (size_t s = 0; s < stages_.size(); ++s)
    stages_[s]->load_state_scalars(select_for(scalars, stages_[s]->state_scalars(), s == 0));
}

void StageOptimizers::copy_shared_state() {
  std::map<std::string, k::Tensor> first;
  for (auto& stage : stages_) {
    for (const NamedState& s : stage->state_tensors()) {
      auto [it, inserted] = first.emplace(s.name, s.tensor);
      if (!inserted) k::copy(s.tensor, it->second);
    }
  }
}

void StageOptimizers::gather(Communicator& world, const ParallelContext& par) {
  for (size_t s = 0; s < stages_.size(); ++s) {
    const int root = par.stage_leader(static_cast<int>(s));
    json scalars = stages_[s]->state_scalars();
    broadcast_json(world, scalars, root, world.rank() == root);
    if (world.rank() != root) stages_[s]->load_state_scalars(scalars);
  }
}

void gather_stage_params(Communicator& world, const ParallelContext& par, ParamStore& params) {
  std::set<size_t> done;
  for (int s = 0; s < par.pipeline; ++s) {
    for (size_t row : gpt_stage_rows(params, pipeline_stage(par, s, 1)))
      if (done.insert(row).second) broadcast_tensor(world, params.param(row), par.stage_leader(s), params.spec(row).name);
  }
}

int64_t sum_stage_gradients(const ParallelContext& par, const Gpt& model, float scale) {
  const ParamStore& p = model.params();
  const std::vector<size_t>& rows = model.stage_rows();
  int64_t bytes = 0;
  // Maximal runs of adjacent rows are contiguous gradient memory: one all-reduce each.
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    float* first = p.grad(rows[i]).f32();
    const k::Tensor last = p.grad(rows[j - 1]);
    const int64_t n = (last.f32() + last.numel()) - first;
    if (par.stage->size() > 1) {
      par.stage->all_reduce_sum(first, n);
      bytes += sent_by_all_reduce(n * static_cast<int64_t>(sizeof(float)), par.stage->size());
    }
    if (scale != 1.0f) k::scale(k::Tensor::view(first, {n}), scale);
    i = j;
  }
  if (par.embedding) {
    const k::Tensor wte = p.grad(p.index("wte.weight"));
    par.embedding->all_reduce_sum(wte.f32(), wte.numel());
    bytes += sent_by_all_reduce(wte.numel() * static_cast<int64_t>(sizeof(float)), par.embedding->size());
  }
  return bytes;
}

double pipeline_grad_norm(const ParallelContext& par, const Gpt& model) {
  const ParamStore& p = model.params();
  const size_t wte = p.index("wte.weight");
  std::vector<k::Tensor> grads;
  for (size_t row : model.stage_rows())
    if (row != wte || par.first_stage()) grads.push_back(p.grad(row));
  const double norm = grads.empty() ? 0.0 : k::global_norm(grads);
  double squared = norm * norm;
  par.pp->all_reduce_sum(&squared, 1);
  return std::sqrt(squared);
}

}  // namespace precon::worker
