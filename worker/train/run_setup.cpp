#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kernels/backend.h"
#include "kernels/linalg.h"
#include "worker/ckpt/checkpoint.h"
#include "worker/common/fault_hook.h"
#include "worker/common/file_io.h"
#include "worker/config/choice.h"
#include "worker/model/memory_estimate.h"
#include "worker/model/model_io.h"
#include "worker/parallel/nccl_communicator.h"
#include "worker/train/run.h"

namespace precon::worker {

namespace k = kernels;
namespace fs = std::filesystem;

namespace {

constexpr Choice<k::Device> kDevices[] = {{"cpu", k::Device::cpu}, {"cuda", k::Device::cuda}};  // train.device

// parallel.backend; automatic is "auto": NCCL between GPUs, MPI (or nothing, for one process) on the CPU.
enum class Backend { automatic, mpi, nccl };
constexpr Choice<Backend> kBackends[] = {{"auto", Backend::automatic}, {"mpi", Backend::mpi}, {"nccl", Backend::nccl}};

// A run directory holds one config file, config.toml. The controller writes it and passes it as
// --config; a standalone run gets its resolved config (overrides applied) written there.
void write_run_config(const TrainOptions& options, const TrialConfig& cfg) {
  const fs::path target = options.run_dir / "config.toml";
  std::error_code ec;
  if (fs::equivalent(target, options.config_path, ec)) return;
  FileWriter out(target);  // not through a link planted at config.toml
  out.write(config_to_toml(cfg));
  out.finish();
}

}  // namespace

void configure_run(Run& run) {
  const TrainOptions& options = *run.options;
  run.parsed = parse_config_file(options.config_path.string(), options.overrides);
  TrialConfig& cfg = run.cfg();
  std::unique_ptr<Communicator> world = options.world ? options.world->split(0, options.world->rank())
                                                      : make_local_communicator();
  const k::Device device = parse_choice<ConfigError>("train.device", cfg.train.device, kDevices);
  const bool cuda = device == k::Device::cuda;
  const Backend backend = parse_choice<ConfigError>("parallel.backend", cfg.parallel.backend, kBackends);
  // nccl on one rank is allowed: it is how a single GPU checks the backend.
  if (backend == Backend::nccl || (backend == Backend::automatic && cuda && world->size() > 1)) {
    world = make_nccl_communicator(*world);
  } else if (cuda && world->size() > 1) {
    throw ConfigError(run.parsed.origin.count("parallel.backend") ? run.parsed.origin.at("parallel.backend") : "config", 0,
                      "parallel.backend", "mpi collectives read host memory; GPU ranks need \"nccl\" (or \"auto\")");
  }
  run.par = make_parallel_context(std::move(world), cfg.parallel, cfg.model.n_layer);
  if (run.par.world->size() > 1) {
    run.log = [log = run.log, prefix = "rank " + std::to_string(run.par.world->rank()) + ": "](const std::string& m) {
      log(prefix + m);
    };
  }
  run.slice = cfg.train.batch_size / run.par.data;
  run.micro = cfg.train.micro_batch_size > 0 ? cfg.train.micro_batch_size : run.slice;
  fs::create_directories(options.run_dir);
  if (run.par.first()) write_run_config(options, cfg);
  if (cfg.train.threads > 0) k::set_cpu_threads(static_cast<int>(cfg.train.threads));
  run.device = device;
  k::require_device(run.device);
}

void build_model(Run& run) {
  const TrialConfig& cfg = run.cfg();
  const std::vector<ModelStage> chunks = pipeline_chunks(run.par, run.par.pp_rank(), run.slice / run.micro);
  run.rows = pipeline_rank_rows(run.par, model_param_table(cfg.model), run.par.pp_rank());
  // A rank with several chunks holds their rows in one store: one optimizer, one gradient buffer
  // and one checkpoint part, as for a contiguous stage.
  if (chunks.size() > 1)
    run.rank_params = std::make_unique<ParamStore>(model_param_table(cfg.model), run.device, run.rows,
                                                   TpPlace{run.par.tp_rank(), run.par.tensor});
  for (const ModelStage& chunk : chunks)
    run.chunks.push_back(make_model(cfg.model, run.micro, run.device, cfg.train.precision, run.par.tp.get(), chunk,
                                    run.rank_params.get(), run.par.ep.get()));
  if (cfg.optimizer.qk_clip_threshold > 0)
    for (auto& chunk : run.chunks) chunk->track_attention_logits();
  if (!cfg.train.init_from.empty()) {
    const ParamStore& params = run.model().params();
    load_model_safetensors(run.model().params(), cfg.train.init_from);
    for (size_t i = 0; i < params.size(); ++i)
      if (params.resident(i) && !k::all_finite(params.param(i)))
        throw ModelIoError(cfg.train.init_from + ": tensor " + params.spec(i).name +
                           " holds NaN or infinite values: the model cannot start from it");
    run.log("initialised the model from " + cfg.train.init_from);
  } else {
    run.model().init_random(static_cast<uint64_t>(cfg.train.seed));  // every row the (shared) store holds
  }
}

void build_data(Run& run) {
  const TrialConfig& cfg = run.cfg();
  LoaderOptions lo;
  lo.train = dataset_specs(cfg.data.train);
  lo.val = dataset_specs(cfg.data.val);
  lo.format = cfg.data.format;
  lo.shuffle_documents = cfg.data.document_boundaries == "shuffle";
  lo.B = cfg.train.batch_size;
  lo.T = cfg.model.seq_len;
  lo.seed = static_cast<uint64_t>(cfg.train.seed);
  lo.vocab_size = cfg.model.vocab_size;
  run.loader = std::make_unique<DataLoader>(lo);
  if (!lo.val.empty()) {
    const int64_t n = std::min<int64_t>(cfg.train.eval_batches, run.loader->max_val_batches());
    if (n < 1) run.log("warning: the validation data hold fewer than one batch; no val_loss will be recorded");
    else run.val = run.loader->val_batches(n);
  }
}

// Each rank steps the optimizer of its own rows (rank_optimizer.h): the distributed optimizer over
// the ranks that hold them, its experts apart under expert parallelism.
void build_optimizer(Run& run) {
  const ParamStore& store = run.model().params();
  run.optimizer = make_rank_optimizer(run.cfg().optimizer, run.par, store, run.rows, run.device,
                                      run.cfg().parallel.distributed_optimizer,
                                      [log = run.log](const std::string& m) { log("warning: " + m); });
  if (run.par.pipeline > 1 || run.par.expert > 1 || run.par.tensor > 1) {
    int64_t whole = 0;
    for (const ParamSpec& spec : store.table()) whole += spec.storage_numel();
    run.log("parameters: " + std::to_string(store.total_numel()) + " of the model's " + std::to_string(whole) +
            " held on this rank (pipeline stage " + std::to_string(run.par.pp_rank()) +
            (run.par.tensor > 1 ? ", tensor-parallel rank " + std::to_string(run.par.tp_rank()) : std::string()) +
            (run.par.expert > 1 ? ", expert-parallel rank " + std::to_string(run.par.ep_rank()) : std::string()) + ")");
  }
  run.log("routing: " + run.optimizer->routing_summary());
}

void build_step_runner(Run& run) {
  // The layout's step runner (step_runner.h): each rank's gradients (its parts of the split rows)
  // are summed over the data-parallel ranks that hold the same parts, whose ranks the optimizer's
  // roots name. Under data parallelism a gradient only its owner reads (Muon's matrices) is
  // reduced to that owner; pipeline stages sum theirs apart (sum_stage_gradients), all-reduced.
  const ParamStore& store = run.model().params();
  StepParts parts;
  parts.par = &run.par;
  for (auto& c : run.chunks) parts.chunks.push_back(c.get());
  parts.slice = run.slice;
  parts.micro = run.micro;
  parts.rows = run.rows;
  if (run.par.pipeline == 1 && run.par.data > 1) {
    parts.roots = run.optimizer->roots_by_row(0, store.size());
    if (run.optimizer->parts() > 1) parts.expert_roots = run.optimizer->roots_by_row(1, store.size());
  }
  run.runner = make_step_runner(parts);
  for (const std::string& note : run.runner->notes()) run.log(note);
  if (run.par.world->size() > 1) {
    std::vector<ModelStage> chunks;
    for (const auto& c : run.chunks) chunks.push_back(c->stage());
    const std::string virtual_stages =
        run.par.virtual_stages > 1 ? " × " + std::to_string(run.par.virtual_stages) + " virtual" : std::string();
    run.log("layout: " + std::to_string(run.par.data) + " data-parallel rank(s) over " + run.par.world->backend() +
            ", " + std::to_string(run.par.tensor) + " tensor-parallel, " + std::to_string(run.par.pipeline) +
            virtual_stages + " pipeline stage(s) (this one: " + pipeline_blocks_text(chunks) + ")" + ", " +
            (run.par.expert > 1 ? std::to_string(run.par.expert) + " expert-parallel (this rank: experts " +
                                      std::to_string(run.par.first_expert(run.cfg().model.moe.experts)) + "–" +
                                      std::to_string(run.par.end_expert(run.cfg().model.moe.experts) - 1) +
                                      " of each MoE layer), "
                                : std::string()) +
            std::to_string(run.slice / run.micro) + " micro-batch(es) of " + std::to_string(run.micro) +
            " sequence(s) per step");
  }
}

void resume_run(Run& run) {
  const TrainOptions& options = *run.options;
  if (options.resume == "never") return;
  std::optional<fs::path> dir;
  if (options.resume == "auto") {
    CheckpointChoice choice = latest_good_checkpoint(
        options.run_dir, [&](const fs::path& d) { return checkpoint_unusable(d, run.state()); });
    for (const std::string& w : choice.warnings) run.log("warning: " + w);
    if (choice.checkpoint) dir = choice.checkpoint->dir;
  } else {
    dir = fs::path(options.resume);
    if (auto bad = verify_checkpoint(*dir)) throw CheckpointError(dir->string() + " does not verify: " + *bad);
    if (auto bad = checkpoint_unusable(*dir, run.state())) throw CheckpointError(dir->string() + ": " + *bad);
  }
  if (!dir) return;
  run.start = load_checkpoint(*dir, run.state());
  run.objective = checkpoint_objective(*dir);
  run.log("resumed from " + dir->string() + " at step " + std::to_string(run.start));
}

RankBytes rank_bytes(Run& run) {
  RankBytes b;
  for (const auto& chunk : run.chunks) {
    const Model::Bytes m = chunk->bytes();
    b.params += m.params;
    b.grads += m.grads;
    b.activations += m.activations;
  }
  if (run.rank_params) {  // the chunks' shared store
    b.params += run.rank_params->total_numel() * static_cast<int64_t>(sizeof(float));
    b.grads += run.rank_params->total_numel() * static_cast<int64_t>(sizeof(float));
  }
  for (const StateKind& kind : run.optimizer->state_kinds())
    b.optimizer += kind.flat.numel() * static_cast<int64_t>(sizeof(float));
  return b;
}

void open_outputs(Run& run) {
  const TrainOptions& options = *run.options;
  run.memory = rank_bytes(run);
  run.log("memory: parameters " + bytes_text(static_cast<double>(run.memory.params)) + ", gradients " +
          bytes_text(static_cast<double>(run.memory.grads)) + ", optimizer state " +
          bytes_text(static_cast<double>(run.memory.optimizer)) + ", activations " +
          bytes_text(static_cast<double>(run.memory.activations)) + " on this rank");
  int64_t most[4] = {run.memory.params, run.memory.grads, run.memory.optimizer, run.memory.activations};
  run.par.world->all_reduce_max(most, 4);
  run.memory_max = {most[0], most[1], most[2], most[3]};
  if (run.par.first()) run.metrics = std::make_unique<MetricsWriter>(options.run_dir / "metrics.jsonl", run.start);
  if (!options.report_url.empty() && run.par.first()) {
    ReporterOptions ro;
    ro.url = options.report_url;
    ro.token = options.token;
    ro.trial = options.trial_id;
    ro.log = [log = run.log](const std::string& m) { log("report: " + m); };
    run.reporter = std::make_unique<Reporter>(ro);
  }
  run.last_checkpoint = run.start;
  run.prev_phases = run.optimizer->phase_seconds();
  const char* nan_fault = std::getenv("PRECON_FAULT_NAN_LOSS_AT_STEP");
  run.nan_fault_step = nan_fault ? std::atoll(nan_fault) : -1;
  if (const char* f = std::getenv("PRECON_FAULT_RANK_ERROR"); f && std::strchr(f, ':') &&
      std::atoi(f) == run.par.world->rank())
    run.rank_fault_step = std::atoll(std::strchr(f, ':') + 1);
  run.kill_fault_step = fault_point("step").step;
  // A run that lasts long enough for an outage in a test, whatever the machine's speed.
  if (const char* f = std::getenv("PRECON_FAULT_STEP_PACE_MS")) run.step_pace_ms = std::max(0LL, std::atoll(f));
}

}  // namespace precon::worker
