#include "worker/parallel/step_runner.h"

#include <algorithm>
#include <cmath>

#include "worker/parallel/pipeline_state.h"

namespace precon::worker {

namespace {

// Rows [first, first + rows) of a batch.
void take_rows(const Batch& from, int64_t first, int64_t rows, Batch& to) {
  const int64_t T = from.T;
  to.B = rows;
  to.T = T;
  to.inputs.assign(from.inputs.begin() + first * T, from.inputs.begin() + (first + rows) * T);
  to.targets.assign(from.targets.begin() + first * T, from.targets.begin() + (first + rows) * T);
}

// Sums the chunks' tallies over the world (a tensor-parallel group's replicas routed alike: its
// first rank speaks) and clears them; `micro` micro-batches on each of the data-parallel ranks.
// alltoall_seconds: this rank's all-to-all seconds before the step, advanced to now.
MoeReport collect_moe(const ParallelContext& par, const std::vector<Model*>& chunks, int64_t micro,
                      double& alltoall_seconds) {
  MoeReport r;
  const ModelConfig& m = chunks.front()->config();
  if (m.moe.experts == 0) return r;
  double now = 0;
  for (Model* chunk : chunks) now += chunk->moe_alltoall_seconds();
  r.alltoall_seconds = now - alltoall_seconds;
  alltoall_seconds = now;
  std::vector<double> sum(chunks.front()->moe_tally().size(), 0.0);
  for (Model* chunk : chunks) {
    std::vector<double>& t = chunk->moe_tally();
    if (par.tp_rank() == 0)
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += t[i];
    std::fill(t.begin(), t.end(), 0.0);
  }
  par.world->all_reduce_sum(sum.data(), static_cast<int64_t>(sum.size()));
  r.aux_loss = sum[0] / static_cast<double>(micro * par.data);
  const int64_t E = m.moe.experts;
  r.load.resize(static_cast<size_t>(m.n_layer));
  r.counts.resize(static_cast<size_t>(m.n_layer));
  for (int64_t l = 0; l < m.n_layer; ++l) {
    if (!m.moe_layer(l)) continue;
    const double* c = sum.data() + 1 + l * E;
    r.counts[static_cast<size_t>(l)].assign(c, c + E);
    double total = 0;
    for (int64_t e = 0; e < E; ++e) total += c[e];
    for (int64_t e = 0; e < E; ++e) {
      const double load = total > 0 ? c[e] / total * static_cast<double>(E) : 0.0;
      r.load[static_cast<size_t>(l)].push_back(load);
      r.load_max = std::max(r.load_max, load);
    }
  }
  return r;
}

// Expert parallelism sums the routed experts' gradients over the ranks that hold the same experts
// and the rest over the whole group: the rows of one side (empty without expert parallelism: all).
std::vector<bool> row_side(const ParallelContext& par, const ParamStore& params, bool experts) {
  if (!par.expert_stage) return {};
  std::vector<bool> side(params.size());
  for (size_t i = 0; i < params.size(); ++i) side[i] = (params.spec(i).expert >= 0) == experts;
  return side;
}

// The routed experts' sums (null without expert parallelism).
std::unique_ptr<GradientSync> expert_sync(const ParallelContext& par, const ParamStore& params,
                                          const std::vector<int>& roots) {
  if (!par.expert_dp) return nullptr;
  return std::make_unique<GradientSync>(*par.expert_dp, params, roots, 4 << 20, row_side(par, params, true));
}

// The global norm from the two sides: each expert-parallel rank adds its own experts' squares once
// (and under tensor parallelism each rank its parts').
double two_sided_norm(const ParallelContext& par, GradientSync& dense, GradientSync* experts) {
  Communicator* tp = par.tp.get();
  if (!experts) return dense.norm(tp);
  double e = experts->norm_squared(tp);
  par.ep->all_reduce_sum(&e, 1);
  return std::sqrt(dense.norm_squared(tp) + e);
}

class BatchRunner final : public StepRunner {
 public:
  explicit BatchRunner(const StepParts& parts)
      : p_(parts), par_(*parts.par), model_(*parts.chunks.front()),
        sync_(*par_.dp, model_.params(), parts.roots, 4 << 20, row_side(par_, model_.params(), false)),
        esync_(expert_sync(par_, model_.params(), parts.expert_roots)), overlap_(par_.data > 1) {
    if (sync_.reduced_tensors() > 0)
      notes_.push_back("gradients: " + std::to_string(sync_.reduced_tensors()) + " of " +
                       std::to_string(model_.params().size()) +
                       " tensors reduced to the one rank that reads them, the rest all-reduced");
  }

  double forward_backward(const Batch& batch) override {
    model_.zero_grads();
    // The last micro-batch's backward starts the data-parallel sums bucket by bucket (each rank
    // sums its own parts with the ranks that hold the same ones).
    const Model::GradsReady ready = [this](size_t first, size_t end) {
      sync_.ready(first, end);
      if (esync_) esync_->ready(first, end);
    };
    const double loss = mean_over_batch(batch, [&](const Batch& part, bool last) {
      const double micro_loss = model_.forward(part.inputs, part.targets, true);
      if (std::isfinite(micro_loss)) model_.backward(last && overlap_ ? ready : Model::GradsReady{});
      return micro_loss;
    });
    if (!overlap_ && esync_) {
      ready(0, model_.params().size());
    }
    sync_.finish(scale());
    if (esync_) esync_->finish(scale());
    return loss;
  }

  double grad_norm() override { return two_sided_norm(par_, sync_, esync_.get()); }

  double evaluate(const Batch& batch) override {
    return mean_over_batch(batch, [&](const Batch& part, bool) { return model_.forward(part.inputs, part.targets, false); });
  }

  MoeReport moe_report() override { return collect_moe(par_, p_.chunks, p_.slice / p_.micro, alltoall_seconds_); }

  double comm_wait_seconds() const override { return sync_.wait_seconds() + (esync_ ? esync_->wait_seconds() : 0.0); }
  int64_t comm_bytes() const override { return sync_.bytes_sent() + (esync_ ? esync_->bytes_sent() : 0); }

 private:
  float scale() const { return 1.0f / static_cast<float>(p_.slice / p_.micro * par_.data); }
  // The mean of f(micro-batch) over this rank's slice, averaged over the data-parallel ranks: every
  // slice and micro-batch holds the same number of tokens, so this is the mean over the whole
  // batch, as one process computes it.
  template <class F>
  double mean_over_batch(const Batch& batch, F&& f) {
    Batch part;
    const int64_t n = p_.slice / p_.micro;
    double total = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      take_rows(batch, par_.dp_rank() * p_.slice + j * p_.micro, p_.micro, part);
      total += f(part, j == n - 1);
    }
    double mean = total / static_cast<double>(n * par_.data);
    par_.dp->all_reduce_sum(&mean, 1);
    return mean;
  }

  StepParts p_;
  const ParallelContext& par_;
  Model& model_;
  GradientSync sync_;
  std::unique_ptr<GradientSync> esync_;  // the routed experts' (expert parallelism only)
  bool overlap_;
  double alltoall_seconds_ = 0;
};

class PipelineRunner final : public StepRunner {
 public:
  explicit PipelineRunner(const StepParts& parts)
      : p_(parts), par_(*parts.par), params_(parts.chunks.front()->params()),
        schedule_(parts.chunks, *par_.pp),
        sync_(*par_.dp, params_, {}, 4 << 20, row_side(par_, params_, false)),
        esync_(expert_sync(par_, params_, {})), overlap_(par_.data > 1) {
    if (overlap_)
      notes_.push_back("gradients: this stage's data-parallel sums run bucket by bucket during its last micro-batch's backward");
  }

  double forward_backward(const Batch& batch) override {
    for (Model* chunk : p_.chunks) chunk->zero_grads();
    const float scale = 1.0f / static_cast<float>(p_.slice / p_.micro * par_.data);
    const std::vector<Batch> micro = micro_batches(par_, p_.slice, p_.micro, batch);
    if (!overlap_) {
      // One data-parallel rank: the gradients are scaled, and the tied embedding's summed.
      const double loss = mean(schedule_.train(micro));
      pipe_bytes_ += sum_stage_gradients(par_, params_, p_.rows, scale);
      return loss;
    }
    // The stage's data-parallel sums start bucket by bucket during each chunk's last backward. Each
    // range reported extends down to the last one: the rows between belong to other ranks and take
    // no memory. The last stage's backward does not report a tied embedding (it lies with the first
    // stage's embedding): it is summed with the rows below, then with the first stage's copy.
    size_t lowest = params_.size();
    const Model::GradsReady ready = [&](size_t first, size_t) {
      sync_.ready(first, lowest);
      if (esync_) esync_->ready(first, lowest);
      lowest = first;
    };
    const double loss = mean(schedule_.train(micro, ready));
    if (lowest > 0) {
      sync_.ready(0, lowest);
      if (esync_) esync_->ready(0, lowest);
    }
    sync_.finish(scale);
    if (esync_) esync_->finish(scale);
    pipe_bytes_ += sum_tied_embedding(par_, params_);
    return loss;
  }

  double grad_norm() override { return pipeline_grad_norm(par_, params_, p_.rows); }

  double evaluate(const Batch& batch) override {
    return mean(schedule_.evaluate(micro_batches(par_, p_.slice, p_.micro, batch)));
  }

  MoeReport moe_report() override { return collect_moe(par_, p_.chunks, p_.slice / p_.micro, alltoall_seconds_); }

  double comm_wait_seconds() const override { return sync_.wait_seconds() + (esync_ ? esync_->wait_seconds() : 0.0); }
  int64_t comm_bytes() const override {
    return sync_.bytes_sent() + (esync_ ? esync_->bytes_sent() : 0) + pipe_bytes_;
  }
  const PipelineTimes* pipeline_times() const override { return &schedule_.times(); }

 private:
  // The sum of the last stage's micro-batch losses as the mean over the global batch, known to
  // every rank (the other stages, and the tensor-parallel replicas, add zeros).
  double mean(double loss_sum) {
    const bool speaks = par_.last_stage() && par_.tp_rank() == 0;
    double m = speaks ? loss_sum / static_cast<double>(p_.slice / p_.micro * par_.data) : 0.0;
    par_.world->all_reduce_sum(&m, 1);
    return m;
  }

  StepParts p_;
  const ParallelContext& par_;
  const ParamStore& params_;
  PipelineSchedule schedule_;
  GradientSync sync_;
  std::unique_ptr<GradientSync> esync_;  // the routed experts' (expert parallelism only)
  bool overlap_;
  double alltoall_seconds_ = 0;
  int64_t pipe_bytes_ = 0;  // gradients all-reduced after the schedule
};

}  // namespace

std::vector<Batch> micro_batches(const ParallelContext& par, int64_t slice, int64_t micro, const Batch& batch) {
  std::vector<Batch> parts(static_cast<size_t>(slice / micro));
  for (size_t j = 0; j < parts.size(); ++j)
    take_rows(batch, par.dp_rank() * slice + static_cast<int64_t>(j) * micro, micro, parts[j]);
  return parts;
}

std::unique_ptr<StepRunner> make_step_runner(const StepParts& parts) {
  if (parts.par->pipeline > 1) return std::make_unique<PipelineRunner>(parts);
  return std::make_unique<BatchRunner>(parts);
}

}  // namespace precon::worker
