#include "worker/parallel/step_runner.h"

#include <algorithm>
#include <cmath>

#include "worker/parallel/grad_assembly.h"

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
  r.load.resize(static_cast<size_t>(m.blocks()));
  r.counts.resize(static_cast<size_t>(m.blocks()));
  for (int64_t l = 0; l < m.blocks(); ++l) {
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

// The mean of the chunks' MTP tallies over the world's training forwards (a tensor-parallel
// group's replicas computed alike: its first rank speaks), clearing them.
double collect_mtp(const ParallelContext& par, const std::vector<Model*>& chunks) {
  if (chunks.front()->config().mtp_layers == 0) return 0;
  double sum[2] = {0, 0};
  for (Model* chunk : chunks) {
    std::vector<double>& t = chunk->mtp_tally();
    if (par.tp_rank() == 0)
      for (size_t i = 0; i < 2; ++i) sum[i] += t[i];
    std::fill(t.begin(), t.end(), 0.0);
  }
  par.world->all_reduce_sum(sum, 2);
  return sum[1] > 0 ? sum[0] / sum[1] : 0.0;
}

class BatchRunner final : public StepRunner {
 public:
  explicit BatchRunner(const StepParts& parts)
      : p_(parts), par_(*parts.par), model_(*parts.chunks.front()),
        grads_(par_, model_.params(), parts.rows, parts.roots, parts.expert_roots) {
    if (!grads_.note().empty()) notes_.push_back(grads_.note());
  }

  double forward_backward(const Batch& batch) override {
    model_.zero_grads();
    // The last micro-batch's backward starts the gradient sums bucket by bucket.
    const double loss = mean_over_batch(batch, [&](const Batch& part, bool last) {
      const double micro_loss = model_.forward(part.inputs, part.targets, true);
      if (std::isfinite(micro_loss)) model_.backward(last ? grads_.ready() : Model::GradsReady{});
      return micro_loss;
    });
    grads_.finish(1.0f / static_cast<float>(p_.slice / p_.micro * par_.data));
    return loss;
  }

  double grad_norm() override { return grads_.norm(); }

  double evaluate(const Batch& batch) override {
    return mean_over_batch(batch, [&](const Batch& part, bool) { return model_.forward(part.inputs, part.targets, false); });
  }

  MoeReport moe_report() override { return collect_moe(par_, p_.chunks, p_.slice / p_.micro, alltoall_seconds_); }
  double mtp_loss() override { return collect_mtp(par_, p_.chunks); }

  double comm_wait_seconds() const override { return grads_.wait_seconds(); }
  int64_t comm_bytes() const override { return grads_.bytes_sent(); }

 private:
  // The mean of f(micro-batch) over this rank's slice, averaged over the data-parallel ranks: every
  // slice and micro-batch holds the same number of tokens, so this is the mean over the whole
  // batch, as one process computes it.
  template <class F>
  double mean_over_batch(const Batch& batch, F&& f) {
    Batch part;
    const int64_t n = p_.slice / p_.micro;
    double total = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      take_rows(batch, par_.batch_row(p_.slice, p_.micro, j), p_.micro, part);
      total += f(part, j == n - 1);
    }
    double mean = total / static_cast<double>(n * par_.data);
    par_.dp->all_reduce_sum(&mean, 1);
    return mean;
  }

  StepParts p_;
  const ParallelContext& par_;
  Model& model_;
  GradientAssembly grads_;
  double alltoall_seconds_ = 0;
};

class PipelineRunner final : public StepRunner {
 public:
  explicit PipelineRunner(const StepParts& parts)
      : p_(parts), par_(*parts.par), params_(parts.chunks.front()->params()),
        schedule_(parts.chunks, *par_.pp), grads_(par_, params_, parts.rows) {
    if (!grads_.note().empty()) notes_.push_back(grads_.note());
  }

  double forward_backward(const Batch& batch) override {
    for (Model* chunk : p_.chunks) chunk->zero_grads();
    // Each chunk's last backward starts the stage's gradient sums bucket by bucket.
    const double loss = mean(schedule_.train(micro_batches(par_, p_.slice, p_.micro, batch), grads_.ready()));
    grads_.finish(1.0f / static_cast<float>(p_.slice / p_.micro * par_.data));
    return loss;
  }

  double grad_norm() override { return grads_.norm(); }

  double evaluate(const Batch& batch) override {
    return mean(schedule_.evaluate(micro_batches(par_, p_.slice, p_.micro, batch)));
  }

  MoeReport moe_report() override { return collect_moe(par_, p_.chunks, p_.slice / p_.micro, alltoall_seconds_); }
  double mtp_loss() override { return collect_mtp(par_, p_.chunks); }

  double comm_wait_seconds() const override { return grads_.wait_seconds(); }
  int64_t comm_bytes() const override { return grads_.bytes_sent(); }
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
  GradientAssembly grads_;
  double alltoall_seconds_ = 0;
};

}  // namespace

std::vector<Batch> micro_batches(const ParallelContext& par, int64_t slice, int64_t micro, const Batch& batch) {
  std::vector<Batch> parts(static_cast<size_t>(slice / micro));
  for (size_t j = 0; j < parts.size(); ++j)
    take_rows(batch, par.batch_row(slice, micro, static_cast<int64_t>(j)), micro, parts[j]);
  return parts;
}

std::unique_ptr<StepRunner> make_step_runner(const StepParts& parts) {
  if (parts.par->pipeline > 1) return std::make_unique<PipelineRunner>(parts);
  return std::make_unique<BatchRunner>(parts);
}

}  // namespace precon::worker
