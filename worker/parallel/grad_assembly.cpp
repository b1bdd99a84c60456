#include "worker/parallel/grad_assembly.h"

#include <cmath>

#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/optim/parts.h"
#include "worker/parallel/comm_cost.h"

namespace precon::worker {

namespace k = kernels;

namespace {

constexpr int64_t kBucketBytes = 4 << 20;

// Expert parallelism sums the routed experts' gradients over the ranks that hold the same experts
// and the rest over the data-parallel group: the rows of one side (empty without expert
// parallelism: all).
std::vector<bool> row_side(const ParallelContext& par, const ParamStore& params, bool experts) {
  if (!par.expert_stage) return {};
  std::vector<bool> side(params.size());
  for (size_t i = 0; i < params.size(); ++i) side[i] = (params.spec(i).expert >= 0) == experts;
  return side;
}

// The global norm over several stages: the squared norm of this rank's rows (the tied embedding
// counted once, on the first stage; under tensor parallelism a replicated row on the first
// tensor-parallel rank, each rank adding its split rows' parts) summed over the stages.
double stages_norm(const ParallelContext& par, const ParamStore& p, const std::vector<size_t>& rows) {
  const size_t wte = tied_embedding_row(p.table());  // p.size() when untied
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

}  // namespace

GradientAssembly::GradientAssembly(const ParallelContext& par, const ParamStore& params, std::vector<size_t> rows,
                                   std::vector<int> roots, std::vector<int> expert_roots)
    : par_(par), params_(params), rows_(std::move(rows)),
      dense_(*par.dp, params, std::move(roots), kBucketBytes, row_side(par, params, false)),
      lowest_(params.size()) {
  if (par.expert_dp)
    experts_ = std::make_unique<GradientSync>(*par.expert_dp, params, std::move(expert_roots), kBucketBytes,
                                              row_side(par, params, true));
  if (par.data > 1) ready_ = [this](size_t first, size_t) { range_ready(first); };
}

// Each range handed on extends down to the last one: the rows between (another stage's, or the
// last stage's tied embedding, which lies with the first stage's embedding) hold no memory here,
// or are summed with the rows below.
void GradientAssembly::range_ready(size_t first) {
  dense_.ready(first, lowest_);
  if (experts_) experts_->ready(first, lowest_);
  lowest_ = first;
}

void GradientAssembly::finish(float scale) {
  if (ready_ && lowest_ > 0) range_ready(0);
  dense_.finish(scale);
  if (experts_) experts_->finish(scale);
  lowest_ = params_.size();
  tied_bytes_ += sum_tied_embedding(par_, params_);
}

double GradientAssembly::norm() {
  if (par_.pipeline > 1) return stages_norm(par_, params_, rows_);
  Communicator* tp = par_.tp.get();
  if (!experts_) return dense_.norm(tp);
  // Each expert-parallel rank adds its own experts' squares once.
  double e = experts_->norm_squared(tp);
  par_.ep->all_reduce_sum(&e, 1);
  return std::sqrt(dense_.norm_squared(tp) + e);
}

double GradientAssembly::wait_seconds() const {
  return dense_.wait_seconds() + (experts_ ? experts_->wait_seconds() : 0.0);
}

int64_t GradientAssembly::bytes_sent() const {
  return dense_.bytes_sent() + (experts_ ? experts_->bytes_sent() : 0) + tied_bytes_;
}

std::string GradientAssembly::note() const {
  if (dense_.reduced_tensors() > 0)
    return "gradients: " + std::to_string(dense_.reduced_tensors()) + " of " + std::to_string(params_.size()) +
           " tensors reduced to the one rank that reads them, the rest all-reduced";
  if (par_.pipeline > 1 && ready_)
    return "gradients: this stage's data-parallel sums run bucket by bucket during its last micro-batch's backward";
  return {};
}

WholeGradients::WholeGradients(std::shared_ptr<ShareGroup> tp, k::Device device) : tp_(std::move(tp)), device_(device) {}

k::Tensor WholeGradients::gather(const OptimParam& p) {
  if (!p.split()) return p.spec->storage_rows > 0 ? p.grad.narrow(0, 0, p.spec->shape[0]) : p.grad;
  const ParamSpec& full = *p.spec;
  if (full.shape.size() != 2) throw OptimizerError("optimizer: " + full.name + " is not 2-D");
  if (!tp_ || tp_->count() != p.tp.size) throw OptimizerError("optimizer: split matrices need their tensor-parallel group");
  if (!p.grad.contiguous()) throw OptimizerError("optimizer: " + full.name + "'s gradient part is not contiguous");
  const int64_t n = p.grad.numel();  // every rank's part has the same storage
  const size_t bytes = static_cast<size_t>(full.storage_numel()) * sizeof(float);
  if (whole_.bytes() < bytes) {
    received_ = k::Buffer(device_, bytes);
    whole_ = k::Buffer(device_, bytes);
  }
  const int ranks = tp_->count();
  float* received = static_cast<float*>(received_.data());
  comm_bytes_ += tp_->share(p.grad.f32(), received, n, k::DType::f32, device_);
  const int64_t rows = full.storage_rows > 0 ? full.storage_rows : full.shape[0], cols = full.shape[1];
  const k::Tensor whole = k::Tensor::view(static_cast<float*>(whole_.data()), {rows, cols}, k::DType::f32, device_);
  const int d = full.tp_split_dim;
  for (int r = 0; r < ranks; ++r) {
    const std::vector<optim::Span> spans = optim::part_spans(full, ranks, r);
    int64_t along = 0;
    for (const optim::Span& s : spans) along += s.length;
    optim::scatter_spans(whole, k::Tensor::view(received + r * n, {d == 0 ? along : rows, d == 0 ? cols : along},
                                                k::DType::f32, device_),
                         d, spans);
  }
  return full.storage_rows > 0 ? whole.narrow(0, 0, full.shape[0]) : whole;
}

int64_t sum_tied_embedding(const ParallelContext& par, const ParamStore& p) {
  const size_t tied = tied_embedding_row(p.table());
  if (!par.embedding || tied == p.size()) return 0;  // untied: the head's matrix lies on the last stage only
  const k::Tensor wte = p.grad(tied);
  par.embedding->all_reduce_sum(wte.f32(), wte.numel());
  return sent_by_all_reduce(wte.numel() * static_cast<int64_t>(sizeof(float)), par.embedding->size());
}

}  // namespace precon::worker
