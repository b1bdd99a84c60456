#include "worker/train/trainer.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>

#include "kernels/backend.h"
#include "kernels/nn.h"
#include "worker/ckpt/checkpoint.h"
#include "worker/config/parse.h"
#include "worker/data/loader.h"
#include "worker/model/gpt.h"
#include "worker/model/model_io.h"
#include "worker/optim/optimizer.h"
#include "worker/report/metrics.h"
#include "worker/report/reporter.h"
#include "worker/train/train_state.h"

namespace precon::worker {

namespace k = kernels;
namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_requeue{false};

extern "C" void on_requeue_signal(int) { g_requeue.store(true); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<fs::path> split_paths(const std::string& list) {
  std::vector<fs::path> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.emplace_back(item);
  }
  return out;
}

void default_log(const std::string& line) {
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  std::fprintf(stderr, "[%s] %s\n", stamp, line.c_str());
}

// Everything one run owns, built from the config.
struct Run {
  ParsedConfig parsed;
  TrialConfig& cfg() { return parsed.config; }
  std::unique_ptr<Gpt> model;
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<Batch> val;
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<Reporter> reporter;
  std::optional<double> objective;  // latest value of objective.metric emitted
  RunState state() { return {&parsed.config, model.get(), optimizer.get(), loader.get(), objective}; }
};

double evaluate(Run& run) {
  double total = 0.0;
  for (const Batch& b : run.val) total += run.model->forward(b.inputs, b.targets, false);
  return run.val.empty() ? NAN : total / static_cast<double>(run.val.size());
}

void emit(Run& run, const MetricRecord& record) {
  run.metrics->write(record);
  for (const auto& [name, value] : record.values)
    if (name == run.cfg().objective.metric) run.objective = value;
  if (run.reporter) run.reporter->push(record);
}

}  // namespace

void install_requeue_signal_handlers() {
  std::signal(SIGUSR1, on_requeue_signal);
  std::signal(SIGTERM, on_requeue_signal);
}
bool requeue_signal_received() { return g_requeue.load(); }
void reset_requeue_signal() { g_requeue.store(false); }

TrainOutcome train(const TrainOptions& options) {
  auto log = options.log ? options.log : default_log;
  Run run;
  run.parsed = parse_config_file(options.config_path.string(), options.overrides);
  TrialConfig& cfg = run.cfg();
  fs::create_directories(options.run_dir);
  {
    std::ofstream(options.run_dir / "trial.toml") << config_to_toml(cfg);
  }
  if (cfg.train.threads > 0) k::set_cpu_threads(static_cast<int>(cfg.train.threads));
  const k::Device device = cfg.train.device == "cuda" ? k::Device::cuda : k::Device::cpu;
  k::set_default_device(device);
  if (cfg.parallel.tensor != 1 || cfg.parallel.data != 1)
    throw ConfigError(run.parsed.origin.count("parallel.tensor") ? run.parsed.origin["parallel.tensor"] : "config", 0,
                      "parallel", "this precon-train runs one process; tensor/data parallelism needs the MPI launcher");

  run.model = std::make_unique<Gpt>(cfg.model, cfg.train.batch_size, device, cfg.train.precision);
  if (!cfg.train.init_from.empty()) {
    load_model_safetensors(run.model->params(), cfg.train.init_from);
    log("initialised the model from " + cfg.train.init_from);
  } else {
    run.model->init_random(static_cast<uint64_t>(cfg.train.seed));
  }

  LoaderOptions lo;
  lo.train = split_paths(cfg.data.train);
  lo.val = split_paths(cfg.data.val);
  lo.B = cfg.train.batch_size;
  lo.T = cfg.model.seq_len;
  lo.seed = static_cast<uint64_t>(cfg.train.seed);
  lo.vocab_size = cfg.model.vocab_size;
  run.loader = std::make_unique<DataLoader>(lo);
  if (!lo.val.empty()) {
    const int64_t n = std::min<int64_t>(cfg.train.eval_batches, run.loader->max_val_batches());
    if (n < 1) log("warning: the validation shard holds fewer than one batch; no val_loss will be recorded");
    else run.val = run.loader->val_batches(n);
  }

  std::vector<OptimParam> oparams;
  ParamStore& store = run.model->params();
  for (size_t i = 0; i < store.size(); ++i) oparams.push_back({&store.spec(i), store.param(i), store.grad(i)});
  OptimizerHooks hooks{[&](const std::string& m) { log("warning: " + m); }};
  run.optimizer = make_optimizer(cfg.optimizer, oparams, device, hooks);
  log("routing: " + run.optimizer->routing_summary());

  // Resume.
  int64_t start = 0;
  if (options.resume != "never") {
    std::optional<fs::path> dir;
    if (options.resume == "auto") {
      CheckpointChoice choice = latest_good_checkpoint(options.run_dir);
      for (const std::string& w : choice.warnings) log("warning: " + w);
      if (choice.checkpoint) dir = choice.checkpoint->dir;
    } else {
      dir = fs::path(options.resume);
      if (auto bad = verify_checkpoint(*dir)) throw CheckpointError(dir->string() + " does not verify: " + *bad);
    }
    if (dir) {
      start = load_checkpoint(*dir, run.state());
      run.objective = checkpoint_objective(*dir);
      log("resumed from " + dir->string() + " at step " + std::to_string(start));
    }
  }
  run.metrics = std::make_unique<MetricsWriter>(options.run_dir / "metrics.jsonl", start);
  if (!options.report_url.empty()) {
    ReporterOptions ro;
    ro.url = options.report_url;
    ro.token = options.token;
    ro.trial = options.trial_id;
    ro.log = [&](const std::string& m) { log("report: " + m); };
    run.reporter = std::make_unique<Reporter>(ro);
  }

  const int64_t steps = cfg.train.steps;
  const double tokens_per_step = static_cast<double>(cfg.train.batch_size * cfg.model.seq_len);
  int64_t last_checkpoint = start;
  auto checkpoint = [&](int64_t step) {
    if (step == last_checkpoint && step != 0) return;
    auto t0 = std::chrono::steady_clock::now();
    fs::path dir = save_checkpoint(options.run_dir, step, run.state());
    run.metrics->sync();
    last_checkpoint = step;
    log("checkpoint " + dir.filename().string() + " (" + std::to_string(seconds_since(t0)).substr(0, 5) + " s)");
  };
  auto last_good = [&]() {
    return last_checkpoint > 0 ? "the last good checkpoint is " + checkpoint_dir_name(last_checkpoint)
                               : std::string("no checkpoint was written yet");
  };

  // Test-only fault hook: PRECON_FAULT_NAN_LOSS_AT_STEP=N makes step N's loss NaN.
  const char* nan_fault = std::getenv("PRECON_FAULT_NAN_LOSS_AT_STEP");
  const int64_t nan_fault_step = nan_fault ? std::atoll(nan_fault) : -1;
  PhaseSeconds prev_phases = run.optimizer->phase_seconds();
  Batch batch;
  TrainOutcome outcome = TrainOutcome::completed;
  for (int64_t step = start + 1; step <= steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    run.loader->next(batch);
    store.zero_grads();
    double loss = run.model->forward(batch.inputs, batch.targets, true);
    if (step == nan_fault_step) loss = NAN;
    if (!std::isfinite(loss)) {
      throw TrainingError("non-finite training loss (" + std::to_string(loss) + ") at step " + std::to_string(step) +
                          "; " + last_good() + " (lower optimizer.lr or raise train.grad_clip's strictness)");
    }
    run.model->backward();
    std::vector<k::Tensor> grads;
    for (size_t i = 0; i < store.size(); ++i) grads.push_back(store.grad(i));
    const double grad_norm = k::global_norm(grads);
    const double clip = cfg.train.grad_clip;
    const float grad_scale = (clip > 0 && grad_norm > clip) ? static_cast<float>(clip / grad_norm) : 1.0f;
    const double lr_scale = lr_multiplier(cfg.optimizer, step, steps);
    try {
      run.optimizer->step({step, lr_scale, grad_scale});
    } catch (const OptimizerError& e) {
      throw TrainingError(std::string(e.what()) + " at step " + std::to_string(step) + "; " + last_good());
    }
    const double step_seconds = seconds_since(t0);

    if (step % cfg.train.log_every == 0 || step == steps) {
      PhaseSeconds ph = run.optimizer->phase_seconds();
      MetricRecord r{step, unix_seconds_now(),
                     {{"train_loss", loss},
                      {"lr", cfg.optimizer.lr * lr_scale},
                      {"grad_norm", grad_norm},
                      {"tokens_per_second", tokens_per_step / step_seconds},
                      {"step_seconds", step_seconds},
                      {"optim_seconds", ph.total() - prev_phases.total()},
                      {"optim_newton_schulz_seconds", ph.newton_schulz - prev_phases.newton_schulz},
                      {"optim_statistics_seconds", ph.statistics - prev_phases.statistics},
                      {"optim_inverse_root_seconds", ph.inverse_root - prev_phases.inverse_root},
                      {"optim_grafting_seconds", ph.grafting - prev_phases.grafting}}};
      if (cfg.optimizer.name == "shampoo")
        r.values.emplace_back("inverse_root_failures", static_cast<double>(run.optimizer->inverse_root_failures()));
      prev_phases = ph;
      emit(run, r);
    }
    const bool eval_now = cfg.train.eval_every > 0 ? (step % cfg.train.eval_every == 0 || step == steps) : step == steps;
    if (eval_now && !run.val.empty()) {
      const double val_loss = evaluate(run);
      emit(run, {step, unix_seconds_now(), {{"val_loss", val_loss}}});
      log("step " + std::to_string(step) + "/" + std::to_string(steps) + " train_loss " + std::to_string(loss) +
          " val_loss " + std::to_string(val_loss));
    }
    const bool stop = run.reporter && run.reporter->stop_requested();
    const bool requeue = requeue_signal_received() || (options.stop_at_step > 0 && step >= options.stop_at_step);
    if ((cfg.train.checkpoint_every > 0 && step % cfg.train.checkpoint_every == 0) || step == steps || stop ||
        requeue) {
      checkpoint(step);
    }
    if (stop) {
      log("the controller asked to stop: " + run.reporter->stop_reason());
      outcome = TrainOutcome::stopped;
      break;
    }
    if (requeue) {
      log("signal received: checkpointed at step " + std::to_string(step) + "; exiting to be requeued");
      outcome = TrainOutcome::requeue;
      break;
    }
  }
  if (start >= steps) log("nothing to do: the run already reached step " + std::to_string(start));
  run.metrics->sync();
  if (run.reporter && !run.reporter->flush(std::chrono::seconds(10)))
    log("warning: some metric reports were not delivered; metrics.jsonl has them all");
  return outcome;
}

}  // namespace precon::worker
