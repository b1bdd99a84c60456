#include "worker/model/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "worker/common/error.h"
#include "worker/config/choice.h"
#include "worker/model/activations.h"
#include "worker/model/params.h"
#include "worker/parallel/pipeline_schedule.h"

namespace precon::worker {

namespace {

enum class OptimizerName { adamw, muon, shampoo, soap };
constexpr Choice<OptimizerName> kOptimizerNames[] = {{"adamw", OptimizerName::adamw},
                                                     {"muon", OptimizerName::muon},
                                                     {"shampoo", OptimizerName::shampoo},
                                                     {"soap", OptimizerName::soap}};

// Bytes of optimizer state per parameter of one table row (fp32 state). normuon: optimizer.muon.variant.
double state_bytes(const OptimizerConfig& o, OptimizerName name, bool normuon, const ParamSpec& spec) {
  if (!trained(spec.kind)) return 0;  // a buffer: no optimizer steps it
  const bool matrix = spec.kind == ParamKind::matrix;
  const double n = static_cast<double>(spec.numel());
  if (name == OptimizerName::muon && matrix)  // the momentum, and NorMuon's v per output neuron
    return 4 * n + (normuon ? 4.0 * static_cast<double>(spec.fan_out) : 0.0);
  if (name == OptimizerName::shampoo && matrix) {
    // Momentum and Adam grafting (3 per weight), and per block of each side's max_preconditioner_dim
    // its statistics and inverse root (2 · d² each side).
    const double d = static_cast<double>(std::max<int64_t>(1, o.shampoo.max_preconditioner_dim));
    const double rows = static_cast<double>(spec.shape.front()), cols = static_cast<double>(spec.shape.back());
    const double br = std::min(rows, d), bc = std::min(cols, d);
    const double blocks = std::ceil(rows / br) * std::ceil(cols / bc);
    return 12 * n + blocks * 8 * (br * br + bc * bc);
  }
  if (name == OptimizerName::soap && matrix) {
    // Both moments (rotated), and per rotated side its factor and eigenbasis (2 · d² each).
    const double limit = static_cast<double>(o.soap.max_preconditioner_dim);
    double bytes = 8 * n;
    for (double side : {static_cast<double>(spec.shape.front()), static_cast<double>(spec.shape.back())})
      if (side <= limit) bytes += 8 * side * side;
    return bytes;
  }
  return 8 * n;  // AdamW's two moments
}

}  // namespace

MemoryEstimate estimate_memory(const TrialConfig& c) {
  constexpr Choice<bool> kNormuon[] = {{"muon", false}, {"normuon", true}};  // optimizer.muon.variant
  constexpr Choice<bool> kBf16[] = {{"fp32", false}, {"bf16", true}};        // train.precision
  constexpr Choice<bool> kSlurm[] = {{"local", false}, {"slurm", true}};     // resources.executor
  const OptimizerName optimizer = parse_choice<WorkerError>("optimizer.name", c.optimizer.name, kOptimizerNames);
  const bool normuon = parse_choice<WorkerError>("optimizer.muon.variant", c.optimizer.muon.variant, kNormuon);
  const bool bf16 = parse_choice<WorkerError>("train.precision", c.train.precision, kBf16);
  const bool slurm = parse_choice<WorkerError>("resources.executor", c.resources.executor, kSlurm);
  MemoryEstimate e;
  const std::vector<ParamSpec> table = model_param_table(c.model);
  for (const ParamSpec& spec : table) e.parameters += spec.numel();
  const double tensor = static_cast<double>(c.parallel.tensor), data = static_cast<double>(c.parallel.data);
  const int t = static_cast<int>(c.parallel.tensor);
  // The largest pipeline rank's rows (expert-parallel ranks hold equal shares of the experts).
  const int pipeline = static_cast<int>(c.parallel.pipeline), chunks = static_cast<int>(c.parallel.virtual_stages);
  const int64_t slice = c.train.batch_size / std::max<int64_t>(c.parallel.data, 1);
  const int64_t micro = c.train.micro_batch_size > 0 ? c.train.micro_batch_size : slice;
  const std::vector<int64_t> layers = stage_layer_counts(c.parallel, c.model.n_layer);
  for (int p = 0; p < pipeline; ++p) {
    double params = 0, grads = 0, optimizer_state = 0;
    for (size_t i : pipeline_rank_table_rows(table, c.parallel, c.model.n_layer, p, 0)) {
      const ParamSpec& spec = table[i];
      const double n = static_cast<double>(spec.numel()), storage = static_cast<double>(spec.storage_numel());
      // A routed expert's optimizer ranks are the ones that hold the same experts; its replicas
      // the ones that hold the same part of them.
      const double experts = spec.expert >= 0 ? static_cast<double>(c.parallel.expert) : 1.0;
      const double group = tensor * data / experts, replicas = data / experts;
      // Each rank holds its tensor-parallel part of a split row (params.h tp_part_spec) and its
      // gradient, and a replicated row whole.
      const double part = static_cast<double>(tp_part_spec(spec, t).storage_numel());
      // Matrix state lives with one owner per matrix or block (spread evenly over the group, on
      // average); element-wise state (AdamW's moments) belongs to each rank's part and is split
      // over its replicas by the distributed optimizer, else replicated on each of them.
      const double whole_state = state_bytes(c.optimizer, optimizer, normuon, spec);
      const bool elementwise = optimizer == OptimizerName::adamw || spec.kind != ParamKind::matrix;
      const double state = elementwise ? whole_state * part / storage : whole_state;
      const double divided = elementwise ? (c.parallel.distributed_optimizer ? replicas : 1.0) : group;
      params += 4 * part + (bf16 ? 2 * n * part / storage : 0);
      grads += 4 * part;
      optimizer_state += state / divided;
    }
    // Each of its chunks' activation slots (the pipeline schedule's micro-batches in flight).
    double acts = 0;
    const std::vector<int> slots = pipeline_slots(p, pipeline, chunks, std::max<int64_t>(slice / std::max<int64_t>(micro, 1), 1));
    for (int v = 0; v < chunks; ++v) {
      const ModelStage stage = pipeline_stage(layers, static_cast<size_t>(v * pipeline + p));
      ActShape shape;
      shape.batch = micro;
      shape.tensor = c.parallel.tensor;
      shape.first_layer = stage.first_layer;
      shape.end_layer = stage.end_layer;
      shape.dtype = bf16 ? kernels::DType::bf16 : kernels::DType::f32;
      acts += static_cast<double>(chunk_activation_bytes(c.model, shape, slots[static_cast<size_t>(v)],
                                                         c.parallel.expert > 1, c.optimizer.qk_clip_threshold > 0));
    }
    if (params + grads + optimizer_state + acts > e.bytes_per_rank) {
      e.parameter_bytes = params;
      e.gradient_bytes = grads;
      e.optimizer_bytes = optimizer_state;
      e.activation_bytes = acts;
      e.bytes_per_rank = params + grads + optimizer_state + acts;
    }
  }
  const int64_t ranks = c.parallel.tensor * c.parallel.data * c.parallel.pipeline;
  const int64_t per_node = slurm ? std::min(ranks, c.resources.ntasks_per_node) : ranks;
  e.bytes_per_node = e.bytes_per_rank * static_cast<double>(per_node);
  return e;
}

double memory_limit_bytes(const std::string& mem) {
  if (mem.empty()) return 0;
  const double v = std::strtod(mem.c_str(), nullptr);
  switch (mem.back()) {
    case 'K': return v * 1024;
    case 'M': return v * 1024 * 1024;
    case 'G': return v * 1024 * 1024 * 1024;
    case 'T': return v * 1024 * 1024 * 1024 * 1024;
    default: return v * 1024 * 1024;  // sbatch --mem: megabytes without a suffix
  }
}

std::string estimate_text(const MemoryEstimate& e) {
  return "parameters " + bytes_text(e.parameter_bytes) + ", gradients " + bytes_text(e.gradient_bytes) +
         ", optimizer state " + bytes_text(e.optimizer_bytes) + ", activations " + bytes_text(e.activation_bytes);
}

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

}  // namespace precon::worker
