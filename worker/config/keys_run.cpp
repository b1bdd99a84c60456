// Key table rows: [data], [train], [parallel] and [resources]: how and where a trial runs.
#include <string>
#include <vector>

#include "worker/config/key_rows.h"

namespace precon::worker::key_rows {

#define T(path) [](TrialConfig& c) { return FieldRef{&c.path}; }

void add_data_and_train_rows(std::vector<Row>& k) {
  // [data]
  k.push_back(trial("data.train", "path",
                    "training data: llm.c shard(s) (comma-separated) or a Megatron prefix, or a blend "
                    "[{path, weight}, ...]",
                    T(data.train))
                  .rule([](const TrialConfig& c) {
                    return c.data.train.empty() ? std::string("training data is needed: a path or a blend") : "";
                  }));
  k.push_back(trial("data.val", "path", "validation data, in the same forms; \"\" = none", T(data.val)));
  k.push_back(trial("data.format", "", "the data's format; auto: from each file's magic", T(data.format))
                  .choices({"auto", "llmc", "megatron"}));
  k.push_back(trial("data.document_boundaries", "",
                    "Megatron data: shuffle documents each epoch (samples cross them) or keep file order (eod)",
                    T(data.document_boundaries))
                  .choices({"shuffle", "eod"}));
  // [train]
  k.push_back(trial("train.steps", "steps", "optimizer steps", T(train.steps)).range(1, 1e12));
  k.push_back(trial("train.batch_size", "sequences", "sequences per step (B), over all data-parallel ranks",
                    T(train.batch_size))
                  .range(1, 1 << 20)
                  .rule([](const TrialConfig& c) {
                    return c.train.batch_size % c.parallel.data ? "batch_size = " + std::to_string(c.train.batch_size) +
                                                                      " must be a multiple of parallel.data = " +
                                                                      std::to_string(c.parallel.data)
                                                                : std::string();
                  }));
  k.push_back(trial("train.micro_batch_size", "sequences",
                    "sequences per forward/backward on a rank; 0 = its whole slice; smaller accumulates gradients",
                    T(train.micro_batch_size))
                  .range(0, 1 << 20)
                  .rule([](const TrialConfig& c) {
                    const int64_t slice = c.train.batch_size / c.parallel.data, m = c.train.micro_batch_size;
                    return m > 0 && (slice % m != 0)
                               ? "micro_batch_size = " + std::to_string(m) + " must divide the rank's slice batch_size / "
                                 "parallel.data = " + std::to_string(slice)
                               : std::string();
                  }));
  k.push_back(trial("train.seed", "", "RNG seed for init and data order", T(train.seed)).range(0, 9.2e18));
  k.push_back(trial("train.eval_every", "steps", "steps between validation losses; 0 = only at the end",
                    T(train.eval_every)).range(0, 1e12));
  k.push_back(trial("train.eval_batches", "batches", "validation batches per evaluation", T(train.eval_batches))
                  .range(1, 1e6));
  k.push_back(trial("train.log_every", "steps", "steps between train-loss records", T(train.log_every)).range(1, 1e12));
  k.push_back(trial("train.checkpoint_every", "steps", "steps between checkpoints; 0 = only at the end",
                    T(train.checkpoint_every)).range(0, 1e12));
  k.push_back(trial("train.keep_checkpoints", "", "checkpoints kept (the newest good one always is)",
                    T(train.keep_checkpoints)).range(1, 1e6));
  k.push_back(trial("train.keep_best", "", "also kept: checkpoints with the best objective (objective.metric/mode)",
                    T(train.keep_best)).range(0, 1e6));
  k.push_back(trial("train.init_from", "path", "safetensors file to initialise from; empty = random init",
                    T(train.init_from)));
  k.push_back(trial("train.grad_clip", "", "global-norm clip of raw gradients; 0 = off", T(train.grad_clip))
                  .range(0, kInf));
  k.push_back(trial("train.device", "", "compute device", T(train.device)).choices({"cpu", "cuda"}));
  k.push_back(trial("train.precision", "", "compute precision (bf16: CUDA, fp32 masters)", T(train.precision))
                  .choices({"fp32", "bf16"})
                  .rule([](const TrialConfig& c) {
                    return c.train.precision == "bf16" && c.train.device != "cuda"
                               ? std::string("bf16 compute needs train.device = \"cuda\"; the CPU path is fp32")
                               : std::string();
                  }));
  k.push_back(trial("train.threads", "threads", "CPU threads; 0 = all cores", T(train.threads)).range(0, 4096));
  k.push_back(trial("train.memory_check", "",
                    "before allocating, compare the memory estimate (parameters, gradients, optimizer state, "
                    "activations) with the memory this process may have (MemAvailable, its cgroup's memory.max, "
                    "the GPU's free memory) and exit 2 naming both when it does not fit; false: start anyway",
                    T(train.memory_check)));
}

void add_parallel_rows(std::vector<Row>& k) {
  // [parallel]
  k.push_back(trial("parallel.tensor", "ranks", "tensor-parallel ranks (must divide model.n_head and the padded vocabulary)",
                    T(parallel.tensor))
                  .range(1, 1024)
                  .rule([](const TrialConfig& c) {
                    const int64_t t = c.parallel.tensor, padded = (c.model.vocab_size + 63) / 64 * 64;
                    if (c.model.n_head % t) return "tensor = " + ratio(t, "n_head", c.model.n_head);
                    if (padded % t) return "tensor = " + ratio(t, "the padded vocabulary", padded);
                    if (c.model.llama() && c.model.kv_heads() % t)
                      return "tensor = " + ratio(t, "model.n_kv_head", c.model.kv_heads()) +
                             " (each rank holds whole key/value heads; kv heads are not replicated)";
                    if (c.model.llama() && c.model.ffn() % t)
                      return "tensor = " + ratio(t, "model.ffn_hidden", c.model.ffn());
                    if (c.model.moe.experts > 0 && c.model.expert_ffn() % t)
                      return "tensor = " + ratio(t, "model.moe.ffn_hidden", c.model.expert_ffn()) +
                             " (each expert's MLP is split like the dense one)";
                    return t > 1 && (c.train.device != "cpu" || c.train.precision != "fp32")
                               ? std::string("tensor parallelism runs on the CPU in fp32 in this precon-train")
                               : std::string();
                  }));
  k.push_back(trial("parallel.data", "ranks", "data-parallel ranks; tensor × data × pipeline = the ranks the launcher starts",
                    T(parallel.data)).range(1, 1 << 20));
  k.push_back(trial("parallel.pipeline", "stages", "pipeline stages: the transformer blocks split over this many rank groups (1F1B)",
                    T(parallel.pipeline))
                  .range(1, 1024)
                  .rule([](const TrialConfig& c) {
                    const int64_t p = c.parallel.pipeline;
                    if (p > c.model.n_layer)
                      return "pipeline = " + std::to_string(p) + " stages need at least as many layers, model.n_layer = " +
                             std::to_string(c.model.n_layer);
                    return p > 1 && (c.train.device != "cpu" || c.train.precision != "fp32")
                               ? std::string("pipeline parallelism runs on the CPU in fp32 in this precon-train")
                               : std::string();
                  }));
  k.push_back(trial("parallel.pipeline_layers", "layers", "transformer blocks per stage (per virtual stage when interleaved), first to last; empty = as even as possible",
                    T(parallel.pipeline_layers))
                  .rule([](const TrialConfig& c) {
                    const auto& l = c.parallel.pipeline_layers;
                    if (l.empty()) return std::string();
                    const int64_t stages = c.parallel.pipeline * c.parallel.virtual_stages;
                    if (static_cast<int64_t>(l.size()) != stages)
                      return "pipeline_layers lists " + std::to_string(l.size()) + " stage(s), parallel.pipeline = " +
                             std::to_string(c.parallel.pipeline) +
                             (c.parallel.virtual_stages > 1 ? " × virtual_stages = " + std::to_string(c.parallel.virtual_stages)
                                                            : std::string());
                    int64_t sum = 0;
                    for (int64_t n : l) {
                      if (n < 1) return std::string("every stage needs at least one layer (pipeline_layers holds ") +
                                        std::to_string(n) + ")";
                      sum += n;
                    }
                    return sum != c.model.n_layer ? "pipeline_layers sum to " + std::to_string(sum) +
                                                        " layers, model.n_layer = " + std::to_string(c.model.n_layer)
                                                  : std::string();
                  }));
  k.push_back(trial("parallel.virtual_stages", "",
                    "model chunks per pipeline rank (interleaved 1F1B); 1 = one contiguous stage a rank",
                    T(parallel.virtual_stages))
                  .range(1, 64)
                  .rule([](const TrialConfig& c) {
                    const int64_t v = c.parallel.virtual_stages, p = c.parallel.pipeline;
                    if (v == 1) return std::string();
                    if (p < 2) return "virtual_stages = " + std::to_string(v) + " interleaves pipeline stages; it needs parallel.pipeline ≥ 2";
                    if (p * v > c.model.n_layer)
                      return "pipeline × virtual_stages = " + std::to_string(p) + " × " + std::to_string(v) +
                             " chunks need at least as many layers, model.n_layer = " + std::to_string(c.model.n_layer);
                    // Interleaved 1F1B walks the micro-batches in groups of one per stage.
                    const int64_t slice = c.train.batch_size / c.parallel.data;
                    const int64_t micro = c.train.micro_batch_size > 0 ? c.train.micro_batch_size : slice;
                    const int64_t m = micro > 0 ? slice / micro : 0;
                    return m % p ? "virtual_stages > 1 needs the micro-batches a step (batch_size / (data × "
                                   "micro_batch_size) = " + std::to_string(m) + ") to be a multiple of parallel.pipeline = " +
                                   std::to_string(p)
                                 : std::string();
                  }));
  k.push_back(trial("parallel.expert", "ranks",
                    "expert-parallel ranks: each mixture-of-experts layer's experts split over this many of the "
                    "data-parallel ranks, tokens sent to their experts' ranks and back by all-to-all",
                    T(parallel.expert))
                  .range(1, 4096)
                  .rule([](const TrialConfig& c) {
                    const int64_t ep = c.parallel.expert, e = c.model.moe.experts;
                    if (ep == 1) return std::string();
                    if (e == 0)
                      return "expert = " + std::to_string(ep) + " splits experts over ranks; it needs a mixture of experts "
                             "(model.moe.experts > 0)";
                    if (e % ep)
                      return "expert = " + std::to_string(ep) + " ranks do not divide model.moe.experts = " + std::to_string(e);
                    if (c.parallel.data % ep)
                      return "expert = " + std::to_string(ep) + " ranks must divide parallel.data = " +
                             std::to_string(c.parallel.data) + " (the expert-parallel group is carved from the data-parallel one)";
                    return c.train.device != "cpu" || c.train.precision != "fp32"
                               ? std::string("expert parallelism runs on the CPU in fp32 in this precon-train")
                               : std::string();
                  }));
  k.push_back(trial("parallel.distributed_optimizer", "",
                    "element-wise optimizer state (AdamW's moments, and those of every optimizer's AdamW-routed "
                    "parameters) split in contiguous ranges over the ranks that hold the same parameters, each rank "
                    "updating its range and all-gathering the values (Megatron's distributed optimizer); the same "
                    "numbers as false, which keeps the state replicated on every rank",
                    T(parallel.distributed_optimizer)));
  k.push_back(trial("parallel.backend", "", "collectives: auto = nccl on CUDA, mpi on CPU", T(parallel.backend))
                  .choices({"auto", "mpi", "nccl"})
                  .rule([](const TrialConfig& c) {
                    return c.parallel.backend == "nccl" && c.train.device != "cuda"
                               ? std::string("nccl needs train.device = \"cuda\"; the CPU path uses mpi")
                               : std::string();
                  }));
}

namespace {

// What sbatch reads from `#SBATCH` lines must never need quoting.
const std::string kSlurmName = R"([A-Za-z0-9_.,-]{1,200})";
const std::string kSlurmNameText = "letters, digits and _.,- only";
// Options the Slurm script writes itself; the resources keys' own options are added to these.
const std::vector<std::string> kSbatchWrittenByPrecon = {
    "array", "output", "error", "open-mode", "requeue", "no-requeue", "signal", "job-name", "parsable", "wrap",
    "input", "export", "export-file", "ntasks", "test-only", "hold", "dependency", "get-user-env"};

// sbatch_args may not set what precon writes itself or what a resources key covers.
std::string sbatch_args_rule(const TrialConfig& c) {
  for (const std::string& a : c.resources.sbatch_args) {
    const size_t eq = a.find('=');
    const std::string name = a.size() > 2 ? a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2) : "";
    for (const KeySpec& k : recipe_keys())
      if (!k.sbatch.empty() && k.sbatch == name) return "entry \"" + a + "\" is set by precon; use " + k.name + " instead";
    for (const std::string& own : kSbatchWrittenByPrecon)
      if (own == name) return "entry \"" + a + "\" is set by precon; remove it";
  }
  return "";
}

}  // namespace

void add_resources_rows(std::vector<Row>& k) {
  // [resources]
  k.push_back(trial("resources.executor", "", "where trials run", T(resources.executor)).choices({"local", "slurm"}));
  k.push_back(trial("resources.nodes", "nodes", "nodes per trial", T(resources.nodes)).range(1, 1e5).sbatch("nodes"));
  k.push_back(trial("resources.ntasks_per_node", "tasks", "ranks per node (Slurm: nodes × ntasks_per_node = the layout's ranks)",
                    T(resources.ntasks_per_node))
                  .range(1, 1024).sbatch("ntasks-per-node")
                  .rule([](const TrialConfig& c) {
                    const auto& r = c.resources;
                    const int64_t ranks = c.parallel.tensor * c.parallel.data * c.parallel.pipeline;
                    return r.executor == "slurm" && r.nodes * r.ntasks_per_node != ranks
                               ? "resources.nodes × ntasks_per_node = " + std::to_string(r.nodes) + " × " +
                                     std::to_string(r.ntasks_per_node) + " tasks, but the layout parallel.tensor × "
                                     "parallel.data × parallel.pipeline needs " + std::to_string(ranks) +
                                     " rank(s); one task is one rank"
                               : std::string();
                  }));
  k.push_back(trial("resources.gpus_per_node", "GPUs", "GPUs per node", T(resources.gpus_per_node))
                  .range(0, 64).sbatch("gpus-per-node"));
  k.push_back(trial("resources.cpus_per_task", "CPUs", "CPUs per rank; 0 = executor default", T(resources.cpus_per_task))
                  .range(0, 4096).sbatch("cpus-per-task"));
  k.push_back(trial("resources.mem", "", "memory per node, e.g. \"16G\"", T(resources.mem))
                  .pattern("[0-9]{1,9}[KMGT]?", "a number with an optional K, M, G or T suffix, e.g. \"16G\"").sbatch("mem"));
  k.push_back(trial("resources.time_limit", "", "Slurm time limit, e.g. \"01:30:00\"", T(resources.time_limit))
                  .pattern(R"((INFINITE|UNLIMITED|([0-9]{1,4}-)?[0-9]{1,5}(:[0-9]{1,2}){0,2}))",
                           "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, e.g. \"01:30:00\"")
                  .sbatch("time"));
  k.push_back(trial("resources.pending_limit", "",
                    "Slurm only: the longest a trial's job may stay PENDING before it first runs, as a Slurm "
                    "time (e.g. \"2:00:00\"); past it the job is cancelled and the trial fails with Slurm's "
                    "reason. \"\" = wait as long as it takes",
                    T(resources.pending_limit))
                  .pattern(R"((([0-9]{1,4}-)?[0-9]{1,5}(:[0-9]{1,2}){0,2})?)",
                           "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, e.g. \"2:00:00\""));
  k.push_back(trial("resources.partition", "", "Slurm partition", T(resources.partition))
                  .pattern(kSlurmName, kSlurmNameText).sbatch("partition"));
  k.push_back(trial("resources.account", "", "Slurm account", T(resources.account))
                  .pattern(kSlurmName, kSlurmNameText).sbatch("account"));
  k.push_back(trial("resources.qos", "", "Slurm QOS", T(resources.qos)).pattern(kSlurmName, kSlurmNameText).sbatch("qos"));
  k.push_back(trial("resources.constraint", "", "Slurm node constraint", T(resources.constraint))
                  .pattern(R"([A-Za-z0-9_.,&|:*\[\]()!-]{1,500})", "feature names with & | , [ ] * ( ) ! : only")
                  .sbatch("constraint"));
  k.push_back(trial("resources.sbatch_args", "", "extra sbatch options, one \"--name[=value]\" each", T(resources.sbatch_args))
                  .pattern(R"(--[a-z][a-z0-9-]{0,40}(=[A-Za-z0-9_.,:/@%+=\[\]-]{1,300})?)",
                           "one long option per entry, \"--name\" or \"--name=value\", with a value of letters, "
                           "digits and _.,:/@%+=[]- only")
                  .rule(sbatch_args_rule));
  k.push_back(trial("resources.setup", "", "shell lines run before the trainer (module loads)", T(resources.setup))
                  .pattern(R"([^\x00\n\r]*)", "single shell lines (one command each)"));
}

#undef T

}  // namespace precon::worker::key_rows
