#include "worker/train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "kernels/error.h"
#include "kernels/nn.h"
#include "worker/ckpt/checkpoint.h"
#include "worker/common/peak_memory.h"
#include "worker/common/error.h"
#include "worker/common/fault_hook.h"
#include "worker/config/choice.h"
#include "worker/config/parse.h"
#include "worker/model/model_io.h"
#include "worker/model/qk_clip.h"
#include "worker/optim/flops.h"
#include "worker/parallel/sigmoid_router.h"
#include "worker/train/memory_check.h"
#include "worker/train/run.h"

namespace precon::worker {

namespace k = kernels;
namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_requeue{false};

extern "C" void on_requeue_signal(int) { g_requeue.store(true); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void default_log(const std::string& line) {
  // Called from the reporter's thread too: localtime_r, not std::localtime's shared buffer.
  std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &local);
  std::fprintf(stderr, "[%s] %s\n", stamp, line.c_str());
}

// What one step measured, for the metrics record.
struct StepStats {
  double loss = 0, grad_norm = 0, lr_scale = 1, seconds = 0;
  MoeReport moe;
  double mtp_loss = 0;  // the multi-token prediction modules' mean loss (model.mtp_layers > 0)
  QkClipStats qk;  // QK-clip's (optimizer.qk_clip_threshold > 0)
  std::vector<float> router_bias;  // the sigmoid router's: per layer, the largest |bias| after the step
};

double evaluate(Run& run) {
  double total = 0.0;
  for (const Batch& b : run.val) total += run.runner->evaluate(b);
  return run.val.empty() ? NAN : total / static_cast<double>(run.val.size());
}

// Every rank knows the objective (for its checkpoints); only the first writes and reports.
void emit(Run& run, const MetricRecord& record) {
  for (const auto& [name, value] : record.values)
    if (name == run.cfg().objective.metric) run.objective = value;
  if (run.metrics) run.metrics->write(record);
  if (run.reporter) run.reporter->push(record);
}

std::string last_good(const Run& run) {
  return run.last_checkpoint > 0 ? "the last good checkpoint is " + checkpoint_dir_name(run.last_checkpoint)
                                 : std::string("no checkpoint was written yet");
}

// The layout's forward and backward passes and gradient sums (step_runner.h); returns the
// training loss, which must be finite.
double forward_backward(Run& run, const Batch& batch, int64_t step) {
  double loss = run.runner->forward_backward(batch);
  if (step == run.nan_fault_step) loss = NAN;
  if (!std::isfinite(loss)) {
    throw TrainingError("non-finite training loss (" + std::to_string(loss) + ") at step " + std::to_string(step) +
                        "; " + last_good(run) + " (lower optimizer.lr or raise train.grad_clip's strictness)");
  }
  return loss;
}

// The global gradient norm, and the scale that clips it to train.grad_clip (1 when it fits).
std::pair<double, float> clip_gradients(Run& run) {
  const double grad_norm = run.runner->grad_norm();
  const double clip = run.cfg().train.grad_clip;
  return {grad_norm, (clip > 0 && grad_norm > clip) ? static_cast<float>(clip / grad_norm) : 1.0f};
}

void optimizer_step(Run& run, int64_t step, double lr_scale, float grad_scale) {
  try {
    run.optimizer->step({step, lr_scale, grad_scale});
  } catch (const OptimizerError& e) {
    throw TrainingError(std::string(e.what()) + " at step " + std::to_string(step) + "; " + last_good(run));
  }
}

// QK-clip after the update: the step's largest logit per layer and head, from every chunk and
// every rank (each fills its own layers and heads), then the rescaling of the rows this rank holds.
QkClipStats qk_clip_step(Run& run) {
  std::vector<float> logits(run.model().attention_logit_max().size(), -INFINITY);
  for (auto& chunk : run.chunks) {
    std::vector<float>& mine = chunk->attention_logit_max();
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::max(logits[i], mine[i]);
    std::fill(mine.begin(), mine.end(), -INFINITY);
  }
  run.par.world->all_reduce_max(logits.data(), static_cast<int64_t>(logits.size()));
  const OptimizerConfig& o = run.cfg().optimizer;
  return qk_clip(run.model().params(), run.cfg().model, logits, o.qk_clip_threshold, o.qk_clip_alpha);
}

// The sigmoid router's balancing after the update: every rank moves the bias rows it holds by the
// step's loads (summed over every rank), then the largest |bias| of each layer from its stage.
std::vector<float> router_bias_step(Run& run, const MoeReport& moe) {
  std::vector<float> absmax = update_router_biases(run.model().params(), run.cfg().model, moe.counts);
  run.par.world->all_reduce_max(absmax.data(), static_cast<int64_t>(absmax.size()));
  return absmax;
}

// Every train.log_every steps and at the last: loss, lr, throughput and optimizer time per phase
// since the previous record.
void log_step(Run& run, int64_t step, const StepStats& stats) {
  const TrialConfig& cfg = run.cfg();
  const bool record = step % cfg.train.log_every == 0 || step == cfg.train.steps;
  const bool announce = step == run.start + 1 && run.par.first();  // the optimizer's share, once
  if (!record && !announce) return;
  const double tokens_per_step = static_cast<double>(cfg.train.batch_size * cfg.model.seq_len);
  // The optimizer's own FLOPs over the whole model (optim/flops.h), beside the model's.
  const OptimizerFlopCount optim_count(cfg.optimizer, model_param_table(cfg.model), {cfg.parallel.tensor});
  const double model_step_flops = run.model().flops_per_token() * tokens_per_step;
  if (announce) {
    const OptimizerFlops f = optim_count.summary();
    char line[256];
    int n = std::snprintf(line, sizeof line, "optimizer flops: %.3g per step (%.2f%% of the model's %.3g): products %.3g, element-wise %.3g",
                          f.per_step(), 100.0 * f.per_step() / model_step_flops, model_step_flops, f.step.matmul,
                          f.step.elementwise);
    if (f.refresh_every > 0 && n > 0 && static_cast<size_t>(n) < sizeof line) {
      std::snprintf(line + n, sizeof line - static_cast<size_t>(n), ", refresh %.3g every %lld steps", f.refresh.total(),
                    static_cast<long long>(f.refresh_every));
    }
    run.log(line);
  }
  if (!record) return;
  const double model_flops = model_step_flops * static_cast<double>(step);
  const double optim_flops = optim_count.optimizer_flops_through(step);
  const PhaseSeconds ph = run.optimizer->phase_seconds();
  const PhaseSeconds& prev = run.prev_phases;
  // Optimizer time per phase is the slowest rank's (the owners' work differs between ranks).
  float phase[7] = {static_cast<float>(ph.total() - prev.total()),
                    static_cast<float>(ph.newton_schulz - prev.newton_schulz),
                    static_cast<float>(ph.statistics - prev.statistics),
                    static_cast<float>(ph.inverse_root - prev.inverse_root),
                    static_cast<float>(ph.grafting - prev.grafting),
                    static_cast<float>(ph.communication - prev.communication),
                    static_cast<float>(ph.eigenbasis - prev.eigenbasis)};
  run.par.world->all_reduce_max(phase, 7);
  MetricRecord r{step, unix_seconds_now(),
                 {{"train_loss", stats.loss},
                  {"lr", cfg.optimizer.lr * stats.lr_scale},
                  {"grad_norm", stats.grad_norm},
                  {"tokens_per_second", tokens_per_step / stats.seconds},
                  {"step_seconds", stats.seconds},
                  // Model FLOPs (forward + backward) per token, and their total over the steps so far:
                  // trials of different shapes and families compare at equal compute by it.
                  {"flops_per_token", run.model().flops_per_token()},
                  {"flops", model_flops},
                  // The optimizer's FLOPs through this step, and model plus optimizer.
                  {"optim_flops", optim_flops},
                  {"compute_flops", model_flops + optim_flops},
                  {"optim_seconds", phase[0]},
                  {"optim_newton_schulz_seconds", phase[1]},
                  {"optim_statistics_seconds", phase[2]},
                  {"optim_inverse_root_seconds", phase[3]},
                  {"optim_grafting_seconds", phase[4]},
                  {"optim_communication_seconds", phase[5]},
                  {"optim_eigenbasis_seconds", phase[6]}}};
  // Training tokens drawn so far, in all and per dataset (tokens_seen.<dataset>: the controller's
  // precon_trial_tokens_seen{dataset}).
  const std::vector<std::pair<std::string, int64_t>> seen = run.loader->tokens_seen();
  double seen_total = 0;
  for (const auto& [name, tokens] : seen) seen_total += static_cast<double>(tokens);
  r.values.emplace_back("tokens_seen", seen_total);
  for (const auto& [name, tokens] : seen) r.values.emplace_back("tokens_seen." + name, static_cast<double>(tokens));
  if (cfg.model.mtp_layers > 0) {
    // Beside train_loss (the model's own next-token loss): the mean of the MTP modules' losses,
    // which the gradient adds with weight model.mtp_loss_coeff.
    r.values.emplace_back("mtp_loss", stats.mtp_loss);
  }
  if (cfg.optimizer.qk_clip_threshold > 0) {
    // This step's largest attention logit before clipping, and the heads (kv groups) clipped.
    r.values.emplace_back("max_attention_logit", stats.qk.max_logit);
    r.values.emplace_back("qk_clipped_heads", static_cast<double>(stats.qk.clipped));
    // And each layer's (the dashboard charts every name; the controller counts .layerN as one).
    for (size_t l = 0; l < stats.qk.layer_max_logit.size(); ++l)
      r.values.emplace_back("max_attention_logit.layer" + std::to_string(l), stats.qk.layer_max_logit[l]);
  }
  if (cfg.model.moe.experts > 0) {
    // The load-balancing loss beside train_loss (which leaves it out), and the worst expert's share.
    r.values.emplace_back("moe_aux_loss", stats.moe.aux_loss);
    r.values.emplace_back("moe_load_max", stats.moe.load_max);
    if (cfg.parallel.expert > 1) r.values.emplace_back("moe_alltoall_seconds", stats.moe.alltoall_seconds);
    // Per MoE layer, its worst expert's fₑ·E (the full shares go to the log at each evaluation).
    for (size_t l = 0; l < stats.moe.load.size(); ++l) {
      if (stats.moe.load[l].empty()) continue;
      r.values.emplace_back("moe_load_max.layer" + std::to_string(l),
                            *std::max_element(stats.moe.load[l].begin(), stats.moe.load[l].end()));
    }
  }
  if (!stats.router_bias.empty()) {
    // The sigmoid router's bias: its largest magnitude, over the layers and per MoE layer.
    double all = 0;
    for (size_t l = 0; l < stats.router_bias.size(); ++l) {
      if (!cfg.model.moe_layer(static_cast<int64_t>(l))) continue;
      all = std::max(all, static_cast<double>(stats.router_bias[l]));
      r.values.emplace_back("moe_bias_absmax.layer" + std::to_string(l), static_cast<double>(stats.router_bias[l]));
    }
    r.values.emplace_back("moe_bias_absmax", all);
  }
  // optimizer.name: which optimizers keep inverse roots and report their failures.
  constexpr Choice<bool> kInverseRoots[] = {{"adamw", false}, {"muon", false}, {"shampoo", true}, {"soap", false}};
  if (parse_choice<TrainingError>("optimizer.name", cfg.optimizer.name, kInverseRoots)) {
    double failures = static_cast<double>(run.optimizer->inverse_root_failures());
    run.par.pp->all_reduce_sum(&failures, 1);  // each stage counts its own blocks (one stage: itself)
    r.values.emplace_back("inverse_root_failures", failures);
  }
  if (run.par.world->size() > 1) {
    // Gradient sums since the last record: the time the step waited for them after the
    // backward, and the bytes sent into them; then the optimizer's own collectives (Muon's and
    // Shampoo's all-gathers). Bytes are the busiest rank's: a reduce's root sends nothing.
    const StepRunner& g = *run.runner;
    r.values.emplace_back("comm_wait_seconds", g.comm_wait_seconds() - run.prev_comm_seconds);
    run.prev_comm_seconds = g.comm_wait_seconds();
    int64_t bytes[2] = {g.comm_bytes() - run.prev_comm_bytes, run.optimizer->comm_bytes() - run.prev_optim_bytes};
    run.prev_comm_bytes = g.comm_bytes();
    run.prev_optim_bytes = run.optimizer->comm_bytes();
    run.par.world->all_reduce_max(bytes, 2);
    r.values.emplace_back("comm_bytes", static_cast<double>(bytes[0]));
    r.values.emplace_back("optim_comm_bytes", static_cast<double>(bytes[1]));
    // Per kind of group, since the last record (the busiest rank's each).
    const ParallelContext::GroupBytes now = run.par.bytes_sent(), &prev = run.prev_group_bytes;
    int64_t groups[4] = {now.tp - prev.tp, now.dp - prev.dp, now.pp - prev.pp, now.ep - prev.ep};
    run.prev_group_bytes = now;
    run.par.world->all_reduce_max(groups, 4);
    r.values.emplace_back("comm_bytes_tp", static_cast<double>(groups[0]));
    r.values.emplace_back("comm_bytes_dp", static_cast<double>(groups[1]));
    r.values.emplace_back("comm_bytes_pp", static_cast<double>(groups[2]));
    r.values.emplace_back("comm_bytes_ep", static_cast<double>(groups[3]));
  }
  if (const PipelineTimes* times = run.runner->pipeline_times()) {
    // The bubble: each stage's time in the schedule not spent computing, over its computing
    // time (Megatron's bubble fraction, (p − 1)/m for 1F1B with equal stages), summed over stages.
    const PipelineTimes& t = *times;
    double d[2] = {t.idle() - run.prev_pipe.idle(), t.busy - run.prev_pipe.busy};
    run.par.pp->all_reduce_sum(d, 2);
    r.values.emplace_back("pipeline_idle_seconds", d[0] / run.par.pipeline);
    r.values.emplace_back("pipeline_bubble_fraction", d[1] > 0 ? d[0] / d[1] : 0.0);
    run.prev_pipe = t;
  }
  // What each rank holds (the largest over the ranks) and the largest peak resident memory so far.
  int64_t peak = peak_resident_bytes();
  run.par.world->all_reduce_max(&peak, 1);
  r.values.emplace_back("memory_param_bytes", static_cast<double>(run.memory_max.params));
  r.values.emplace_back("memory_grad_bytes", static_cast<double>(run.memory_max.grads));
  r.values.emplace_back("memory_optimizer_bytes", static_cast<double>(run.memory_max.optimizer));
  r.values.emplace_back("memory_activation_bytes", static_cast<double>(run.memory_max.activations));
  r.values.emplace_back("memory_peak_bytes", static_cast<double>(peak));
  run.prev_phases = ph;
  emit(run, r);
}

// Every train.eval_every steps (0: only at the last) when there is validation data.
void maybe_evaluate(Run& run, int64_t step, const StepStats& stats) {
  const double loss = stats.loss;
  const TrialConfig& cfg = run.cfg();
  const int64_t steps = cfg.train.steps;
  const bool eval_now = cfg.train.eval_every > 0 ? (step % cfg.train.eval_every == 0 || step == steps) : step == steps;
  if (!eval_now || run.val.empty()) return;
  const double val_loss = evaluate(run);
  emit(run, {step, unix_seconds_now(), {{"val_loss", val_loss}}});
  run.log("step " + std::to_string(step) + "/" + std::to_string(steps) + " train_loss " + std::to_string(loss) +
          " val_loss " + std::to_string(val_loss));
  // A mixture of experts: each layer's expert shares of this step's assignments, times E.
  std::string shares;
  for (size_t l = 0; l < stats.moe.load.size(); ++l) {
    if (stats.moe.load[l].empty()) continue;
    shares += (shares.empty() ? "" : "; ") + std::string("layer ") + std::to_string(l) + ":";
    for (double f : stats.moe.load[l]) {
      char v[16];
      std::snprintf(v, sizeof v, " %.2f", f);
      shares += v;
    }
  }
  if (!shares.empty()) run.log("step " + std::to_string(step) + " expert load (share × experts, 1 = balanced) " + shares);
}

// Every rank writes the optimizer state it holds and the first the rest; the checkpoint counts
// for all once save_checkpoint returns (it ends with a barrier).
void checkpoint(Run& run, int64_t step) {
  if (step == run.last_checkpoint && step != 0) return;
  auto t0 = std::chrono::steady_clock::now();
  RunState state = run.state();
  std::unique_ptr<ModelGather> gather;
  if (run.par.pipeline > 1 || run.par.expert > 1 || run.par.tensor > 1) {
    // Each rank holds its own stage, its own experts and its tensor-parallel parts: the first
    // writes model.safetensors tensor by tensor from the ranks that hold its rows, and every rank
    // gathers the optimizer counters of the experts and the stages (their state tensors are
    // written by the ranks that hold them).
    gather = std::make_unique<ModelGather>(*run.par.world, run.par, run.model().params());
    if (run.par.world->rank() == 0)
      state.fetch_model_row = [&gather](size_t row, std::vector<float>& whole) { gather->fetch(row, whole); };
    else
      state.send_model_rows = [&gather] { gather->send_rows(); };
    run.optimizer->gather();
  }
  fs::path dir = save_checkpoint(run.options->run_dir, step, state);
  if (run.par.first()) {
    run.metrics->sync();
    run.log("checkpoint " + dir.filename().string() + " (" + std::to_string(seconds_since(t0)).substr(0, 5) + " s)");
  }
  run.last_checkpoint = step;
}

// After a step: checkpoint when due, or before stopping (the controller's request, a requeue
// signal, --stop-at-step). Returns the outcome when the run must end here.
std::optional<TrainOutcome> checkpoint_or_stop(Run& run, int64_t step) {
  const TrialConfig& cfg = run.cfg();
  // One decision for all ranks: a signal to any rank, or the controller's answer to the first.
  int64_t flags[2] = {run.reporter && run.reporter->stop_requested(),
                      requeue_signal_received() || (run.options->stop_at_step > 0 && step >= run.options->stop_at_step)};
  run.par.world->all_reduce_max(flags, 2);
  const bool stop = flags[0] != 0, requeue = flags[1] != 0;
  if ((cfg.train.checkpoint_every > 0 && step % cfg.train.checkpoint_every == 0) || step == cfg.train.steps ||
      stop || requeue) {
    checkpoint(run, step);
  }
  if (stop) {
    run.log("the controller asked to stop" + (run.reporter ? ": " + run.reporter->stop_reason() : std::string()));
    return TrainOutcome::stopped;
  }
  if (requeue) {
    run.log("signal received: checkpointed at step " + std::to_string(step) + "; exiting to be requeued");
    return TrainOutcome::requeue;
  }
  return std::nullopt;
}

TrainOutcome step_loop(Run& run) {
  const int64_t steps = run.cfg().train.steps;
  Batch batch;
  for (int64_t step = run.start + 1; step <= steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    run.loader->next(batch);
    StepStats stats;
    if (step == run.rank_fault_step) throw TrainingError("injected fault at step " + std::to_string(step));
    stats.loss = forward_backward(run, batch, step);
    stats.moe = run.runner->moe_report();
    stats.mtp_loss = run.runner->mtp_loss();
    float grad_scale = 1.0f;
    std::tie(stats.grad_norm, grad_scale) = clip_gradients(run);
    stats.lr_scale = lr_multiplier(run.cfg().optimizer, step, steps);
    optimizer_step(run, step, stats.lr_scale, grad_scale);
    if (run.cfg().optimizer.qk_clip_threshold > 0) stats.qk = qk_clip_step(run);
    if (run.cfg().model.moe.experts > 0 && run.cfg().model.moe.sigmoid())
      stats.router_bias = router_bias_step(run, stats.moe);
    stats.seconds = seconds_since(t0);
    log_step(run, step, stats);
    if (step == run.kill_fault_step) fault_kill();
    if (run.step_pace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(run.step_pace_ms));
    maybe_evaluate(run, step, stats);
    if (auto outcome = checkpoint_or_stop(run, step)) return *outcome;
  }
  return TrainOutcome::completed;
}

void finish(Run& run) {
  if (run.start >= run.cfg().train.steps)
    run.log("nothing to do: the run already reached step " + std::to_string(run.start));
  if (run.metrics) run.metrics->sync();
  if (run.reporter && !run.reporter->flush(std::chrono::seconds(10)))
    run.log("warning: some metric reports were not delivered; metrics.jsonl has them all");
}

}  // namespace

void install_requeue_signal_handlers() {
  std::signal(SIGUSR1, on_requeue_signal);
  std::signal(SIGTERM, on_requeue_signal);
  // A stop signal that reached the launcher before this process could handle it (a Slurm
  // time-limit warning during the job's setup lines) is passed on in the environment.
  if (const char* s = std::getenv("PRECON_STOP_SIGNAL"); s && (std::strcmp(s, "USR1") == 0 || std::strcmp(s, "TERM") == 0))
    g_requeue.store(true);
}
bool requeue_signal_received() { return g_requeue.load(); }
void reset_requeue_signal() { g_requeue.store(false); }

// A failure that the config names and that no retry changes (a token file or train.init_from that is
// not what it must be, a model that cannot be allocated) is a configuration error: precon-train
// exits 2 and the controller does not launch the trial again.
// The message starts with the key ("data: token shard ..."); the file it names is the one at fault.
template <class Step>
void as_config_error(const std::string& key, Step step) {
  try {
    step();
  } catch (const DataError& e) {
    throw ConfigError(key, 0, "", e.what());
  } catch (const ModelIoError& e) {
    throw ConfigError(key, 0, "", e.what());
  } catch (const kernels::OutOfMemoryError& e) {
    throw ConfigError("model", 0, "",
                      std::string("the model does not fit in memory (") + e.what() +
                          "): shrink model.n_layer / d_model / vocab_size or train.micro_batch_size");
  } catch (const std::bad_alloc&) {
    throw ConfigError("model", 0, "",
                      "the model does not fit in memory: shrink model.n_layer / d_model / vocab_size or "
                      "train.micro_batch_size");
  }
}

// Before anything large is allocated: a run that cannot fit is refused at once (exit 2), by every
// rank when any one of them cannot (the others would wait for it in a collective).
void refuse_what_cannot_fit(Run& run) {
  const std::string problem = memory_problem(run.cfg(), run.device);
  int64_t refused = problem.empty() ? 0 : 1;
  run.par.world->all_reduce_max(&refused, 1);
  if (refused)
    throw ConfigError(run.options->config_path.string(), 0, "train.memory_check",
                      problem.empty() ? "another rank's memory cannot hold its share of the run" : problem);
}

TrainOutcome train(const TrainOptions& options) {
  Run run;
  run.options = &options;
  run.log = options.log ? options.log : default_log;
  configure_run(run);
  refuse_what_cannot_fit(run);
  as_config_error("train.init_from", [&] { build_model(run); });
  as_config_error("data", [&] { build_data(run); });
  build_optimizer(run);
  build_step_runner(run);
  resume_run(run);
  open_outputs(run);
  const TrainOutcome outcome = step_loop(run);
  finish(run);
  return outcome;
}

}  // namespace precon::worker
