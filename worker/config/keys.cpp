#include "worker/config/keys.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "kernels/newton_schulz.h"

namespace precon::worker {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One row under construction: the fluent setters keep each row on a few readable lines.
struct Row {
  KeySpec k;
  Row& range(double lo, double hi) {
    k.min = lo;
    k.max = hi;
    return *this;
  }
  Row& choices(std::vector<std::string> c) {
    k.choices = std::move(c);
    return *this;
  }
  Row& pattern(std::string re, std::string text) {
    k.pattern = std::move(re);
    k.pattern_text = std::move(text);
    return *this;
  }
  Row& hashed() {
    k.in_config_hash = true;
    return *this;
  }
  Row& sbatch(std::string option) {
    k.sbatch = std::move(option);
    return *this;
  }
  Row& rule(std::function<std::string(const TrialConfig&)> r) {
    k.rule = std::move(r);
    return *this;
  }
};

Row trial(std::string name, std::string unit, std::string description, std::function<FieldRef(TrialConfig&)> field) {
  Row r;
  r.k.name = std::move(name);
  r.k.unit = std::move(unit);
  r.k.description = std::move(description);
  r.k.field = std::move(field);
  return r;
}

Row sweep(std::string name, std::string unit, std::string description,
          std::function<FieldRef(SweepSettings&)> field) {
  Row r;
  r.k.name = std::move(name);
  r.k.unit = std::move(unit);
  r.k.description = std::move(description);
  r.k.sweep_field = std::move(field);
  return r;
}

#define T(path) [](TrialConfig& c) { return FieldRef{&c.path}; }
#define S(path) [](SweepSettings& s) { return FieldRef{&s.path}; }

// Printable text of bounded length: names end up in logs, tables, paths and job names.
const std::string kPrintable = R"([^\x00-\x1f\x7f]{1,100})";
const std::string kPrintableText = "1 to 100 characters, no control characters";
// What sbatch reads from `#SBATCH` lines must never need quoting.
const std::string kSlurmName = R"([A-Za-z0-9_.,-]{1,200})";
const std::string kSlurmNameText = "letters, digits and _.,- only";
// Options the Slurm script writes itself; the resources keys' own options are added to these.
const std::vector<std::string> kSbatchWrittenByPrecon = {
    "array", "output", "error", "open-mode", "requeue", "no-requeue", "signal", "job-name", "parsable", "wrap",
    "input", "export", "export-file", "ntasks", "test-only", "hold", "dependency", "get-user-env"};

std::string sbatch_args_rule(const TrialConfig& c);

std::string ratio(int64_t a, const char* what, int64_t b) {
  return std::to_string(a) + " must divide " + what + " = " + std::to_string(b);
}

std::vector<KeySpec> build_table() {
  std::vector<Row> k;
  // [experiment]
  k.push_back(trial("experiment.name", "", "experiment name", T(experiment.name)).pattern(kPrintable, kPrintableText));
  k.push_back(trial("experiment.description", "", "free-text description", T(experiment.description)));
  // [model]
  k.push_back(trial("model.arch", "", "model family: gpt2 (GPT-2) or llama (RMSNorm, RoPE, grouped-query attention, SwiGLU)",
                    T(model.arch))
                  .choices({"gpt2", "llama"}).hashed()
                  .rule([](const TrialConfig& c) {
                    const ModelConfig& m = c.model;
                    if (!m.llama() && m.n_kv_head > 0 && m.n_kv_head != m.n_head)
                      return "gpt2 has no grouped-query attention: model.n_kv_head = " + std::to_string(m.n_kv_head) +
                             " must be 0 or n_head = " + std::to_string(m.n_head) + " (or set model.arch = \"llama\")";
                    if (!m.llama() && m.ffn_hidden > 0 && m.ffn_hidden != 4 * m.d_model)
                      return "gpt2's MLP is 4·d_model = " + std::to_string(4 * m.d_model) + " wide: model.ffn_hidden = " +
                             std::to_string(m.ffn_hidden) + " must be 0 or that (or set model.arch = \"llama\")";
                    if (m.llama() && m.d_model % m.n_head == 0 && (m.d_model / m.n_head) % 2 != 0)
                      return "llama's rotary embeddings need an even head size: d_model / n_head = " +
                             std::to_string(m.d_model / m.n_head);
                    return std::string();
                  }));
  k.push_back(trial("model.n_layer", "", "transformer blocks", T(model.n_layer)).range(1, 256).hashed());
  k.push_back(trial("model.n_head", "", "attention heads (must divide d_model)", T(model.n_head))
                  .range(1, 256).hashed()
                  .rule([](const TrialConfig& c) {
                    return c.model.d_model % c.model.n_head ? "n_head = " + ratio(c.model.n_head, "d_model", c.model.d_model)
                                                            : std::string();
                  }));
  k.push_back(trial("model.n_kv_head", "",
                    "llama: key/value heads of grouped-query attention (must divide n_head); 0 = n_head",
                    T(model.n_kv_head))
                  .range(0, 256).hashed()
                  .rule([](const TrialConfig& c) {
                    const int64_t kv = c.model.kv_heads();
                    return c.model.n_head % kv ? "n_kv_head = " + ratio(kv, "n_head", c.model.n_head) : std::string();
                  }));
  k.push_back(trial("model.d_model", "", "embedding width C", T(model.d_model)).range(1, 65536).hashed());
  k.push_back(trial("model.ffn_hidden", "",
                    "MLP width; 0 = the family's rule (gpt2: 4·d_model; llama: int(8/3·d_model) rounded up to a "
                    "multiple of 64)",
                    T(model.ffn_hidden))
                  .range(0, 1 << 20).hashed());
  k.push_back(trial("model.seq_len", "tokens", "context length T", T(model.seq_len)).range(1, 1 << 20).hashed());
  k.push_back(trial("model.vocab_size", "tokens", "vocabulary size V (padded internally)", T(model.vocab_size))
                  .range(1, 1 << 24).hashed());
  k.push_back(trial("model.rope_theta", "", "llama: base of the rotary position embeddings' frequencies",
                    T(model.rope_theta)).range(1, 1e12));
  k.push_back(trial("model.norm_eps", "", "llama: RMSNorm epsilon", T(model.norm_eps)).range(1e-12, 1));
  k.push_back(trial("model.tie_embeddings", "",
                    "llama: the output head is model.embed_tokens (no lm_head); gpt2 is always tied, whatever this says",
                    T(model.tie_embeddings)).hashed());
  // [model.moe]
  k.push_back(trial("model.moe.experts", "",
                    "llama: experts of each mixture-of-experts MLP (dropless top-k routing); 0 = a dense model",
                    T(model.moe.experts))
                  .range(0, 4096).hashed()
                  .rule([](const TrialConfig& c) {
                    const ModelConfig& m = c.model;
                    if (m.moe.experts == 0) return std::string();
                    if (!m.llama())
                      return "[model.moe] needs model.arch = \"llama\": gpt2 has a dense MLP only (model.moe.experts = " +
                             std::to_string(m.moe.experts) + ")";
                    if (m.moe.first_dense_layers >= m.n_layer)
                      return "model.moe.first_dense_layers = " + std::to_string(m.moe.first_dense_layers) +
                             " leaves no mixture-of-experts layer of model.n_layer = " + std::to_string(m.n_layer);
                    return std::string();
                  }));
  k.push_back(trial("model.moe.top_k", "", "experts each token is sent to (at most model.moe.experts)", T(model.moe.top_k))
                  .range(1, 4096).hashed()
                  .rule([](const TrialConfig& c) {
                    const MoeConfig& e = c.model.moe;
                    return e.experts > 0 && e.top_k > e.experts
                               ? "top_k = " + std::to_string(e.top_k) + " is more than model.moe.experts = " +
                                     std::to_string(e.experts)
                               : std::string();
                  }));
  k.push_back(trial("model.moe.ffn_hidden", "", "each expert's SwiGLU width; 0 = the dense MLP's (model.ffn_hidden)",
                    T(model.moe.ffn_hidden)).range(0, 1 << 20).hashed());
  k.push_back(trial("model.moe.shared_experts", "",
                    "a shared SwiGLU expert of width shared_experts × model.moe.ffn_hidden added to every token's output; "
                    "0 = none",
                    T(model.moe.shared_experts)).range(0, 64).hashed());
  k.push_back(trial("model.moe.first_dense_layers", "layers", "leading layers that keep the dense MLP",
                    T(model.moe.first_dense_layers)).range(0, 256).hashed());
  k.push_back(trial("model.moe.aux_loss_coeff", "",
                    "load-balancing loss coefficient: aux = coeff · E · Σₑ fₑ·Pₑ per MoE layer, over each micro-batch",
                    T(model.moe.aux_loss_coeff)).range(0, 1e3).hashed());
  k.push_back(trial("model.moe.router_dtype", "", "the router's dtype: fp32 always", T(model.moe.router_dtype))
                  .choices({"fp32"}));
  // [data]
  k.push_back(trial("data.train", "path", "training token shard(s), comma-separated", T(data.train)));
  k.push_back(trial("data.val", "path", "validation token shard", T(data.val)));
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
  // [optimizer]
  k.push_back(trial("optimizer.name", "", "optimizer of the 2-D hidden matrices (the rest use AdamW)", T(optimizer.name))
                  .choices({"adamw", "muon", "shampoo"}).hashed());
  k.push_back(trial("optimizer.lr", "", "peak learning rate", T(optimizer.lr)).range(0, 1e3));
  k.push_back(trial("optimizer.weight_decay", "", "decoupled weight decay", T(optimizer.weight_decay)).range(0, 1e3));
  k.push_back(trial("optimizer.schedule", "", "learning-rate schedule after warm-up", T(optimizer.schedule))
                  .choices({"constant", "cosine", "linear", "wsd"}));
  k.push_back(trial("optimizer.warmup_steps", "steps", "linear warm-up steps (at most train.steps)",
                    T(optimizer.warmup_steps))
                  .range(0, 1e12)
                  .rule([](const TrialConfig& c) {
                    // The default warm-up on a run shorter than it just warms up throughout (a
                    // resolved config spells the default out, so the value is what is judged).
                    const int64_t w = c.optimizer.warmup_steps;
                    return w > c.train.steps && w != OptimizerConfig{}.warmup_steps
                               ? "warm-up of " + std::to_string(w) + " steps is longer than train.steps = " +
                                     std::to_string(c.train.steps)
                               : std::string();
                  }));
  k.push_back(trial("optimizer.min_lr_ratio", "", "final lr as a fraction of the peak", T(optimizer.min_lr_ratio))
                  .range(0, 1));
  k.push_back(trial("optimizer.decay_fraction", "", "wsd: fraction of the steps spent decaying",
                    T(optimizer.decay_fraction)).range(0, 1));
  // [optimizer.adamw]
  k.push_back(trial("optimizer.adamw.lr", "", "lr of AdamW-routed params in muon/shampoo runs; 0 = optimizer.lr",
                    T(optimizer.adamw.lr)).range(0, 1e3));
  k.push_back(trial("optimizer.adamw.beta1", "", "first-moment decay", T(optimizer.adamw.beta1)).range(0, 1));
  k.push_back(trial("optimizer.adamw.beta2", "", "second-moment decay", T(optimizer.adamw.beta2)).range(0, 1));
  k.push_back(trial("optimizer.adamw.eps", "", "denominator epsilon", T(optimizer.adamw.eps)).range(0, 1));
  k.push_back(trial("optimizer.adamw.weight_decay", "", "weight decay of AdamW-routed params; -1 = optimizer.weight_decay",
                    T(optimizer.adamw.weight_decay)).range(-1, 1e3));
  // [optimizer.muon]
  std::vector<std::string> coefficient_sets = kernels::ns_coefficient_set_names();
  coefficient_sets.push_back("explicit");
  k.push_back(trial("optimizer.muon.momentum", "", "momentum μ", T(optimizer.muon.momentum)).range(0, 1));
  k.push_back(trial("optimizer.muon.nesterov", "", "Nesterov momentum", T(optimizer.muon.nesterov)));
  k.push_back(trial("optimizer.muon.momentum_form", "", "ema: M = μM + (1-μ)G; sgd: M = μM + G",
                    T(optimizer.muon.momentum_form)).choices({"ema", "sgd"}));
  k.push_back(trial("optimizer.muon.ns_steps", "", "Newton–Schulz iterations", T(optimizer.muon.ns_steps)).range(1, 100));
  k.push_back(trial("optimizer.muon.coefficients", "", "Newton–Schulz coefficient set, or explicit when coefficient_list is given",
                    T(optimizer.muon.coefficients))
                  .choices(coefficient_sets)
                  .rule([](const TrialConfig& c) {
                    return c.optimizer.muon.coefficients == "explicit" && c.optimizer.muon.coefficient_list.empty()
                               ? std::string("\"explicit\" needs optimizer.muon.coefficient_list = [[a, b, c], ...]")
                               : std::string();
                  }));
  k.push_back(trial("optimizer.muon.coefficient_list", "", "explicit [[a, b, c], ...] per step, last repeated",
                    T(optimizer.muon.coefficient_list)));
  k.push_back(trial("optimizer.muon.scale", "", "update scale: shape √max(1,out/in), rms-match 0.2√max(out,in), spectral √(out/in)",
                    T(optimizer.muon.scale)).choices({"shape", "rms-match", "spectral"}));
  k.push_back(trial("optimizer.muon.split_qkv", "",
                    "orthogonalise the fused Q, K and V blocks (gpt2) separately; llama's q, k and v are "
                    "separate matrices already, so it changes nothing there",
                    T(optimizer.muon.split_qkv)));
  k.push_back(trial("optimizer.muon.ns_precision", "", "Newton–Schulz precision; auto = bf16 on CUDA, fp32 on CPU",
                    T(optimizer.muon.ns_precision)).choices({"auto", "fp32", "bf16"}));
  k.push_back(trial("optimizer.muon.ns_eps", "", "added to the Frobenius norm before Newton–Schulz", T(optimizer.muon.ns_eps))
                  .range(0, 1));
  k.push_back(trial("optimizer.muon.tp_mode", "",
                    "Newton–Schulz of tensor-parallel matrices: duplicated = of the whole matrix; distributed = "
                    "each rank keeps its part and each step all-reduces the Gram matrix (same result); blockwise = "
                    "each part on its own, no communication: the result depends on parallel.tensor",
                    T(optimizer.muon.tp_mode)).choices({"duplicated", "distributed", "blockwise"}));
  k.push_back(trial("optimizer.muon.comm_dtype", "",
                    "dtype of the orthogonalised updates all-gathered from their owners; bf16 halves the bytes "
                    "(and rounds the updates)",
                    T(optimizer.muon.comm_dtype)).choices({"fp32", "bf16"}));
  // [optimizer.shampoo]
  k.push_back(trial("optimizer.shampoo.beta1", "", "gradient filtering (momentum); 0 = off, below 1",
                    T(optimizer.shampoo.beta1))
                  .range(0, 1)
                  .rule([](const TrialConfig& c) {
                    return c.optimizer.shampoo.beta1 >= 1 ? std::string("must be below 1 (0 = no filtering)") : std::string();
                  }));
  k.push_back(trial("optimizer.shampoo.beta2", "", "statistics EMA; 1 = running sum", T(optimizer.shampoo.beta2)).range(0, 1));
  k.push_back(trial("optimizer.shampoo.epsilon", "", "inverse-root regulariser", T(optimizer.shampoo.epsilon)).range(0, 1));
  k.push_back(trial("optimizer.shampoo.precondition_frequency", "steps", "steps between inverse-root refreshes",
                    T(optimizer.shampoo.precondition_frequency)).range(1, 1e9));
  k.push_back(trial("optimizer.shampoo.start_preconditioning_step", "steps", "first preconditioned step; 0 = precondition_frequency",
                    T(optimizer.shampoo.start_preconditioning_step)).range(0, 1e12));
  k.push_back(trial("optimizer.shampoo.exponent", "", "inverse-root exponent override (0.25 = 4th root); 0 = 1/(2·order)",
                    T(optimizer.shampoo.exponent)).range(0, 1));
  k.push_back(trial("optimizer.shampoo.max_preconditioner_dim", "", "dims above this are split into blocks",
                    T(optimizer.shampoo.max_preconditioner_dim)).range(1, 1 << 20).hashed());
  k.push_back(trial("optimizer.shampoo.grafting", "", "grafting method for the step size", T(optimizer.shampoo.grafting))
                  .choices({"adam", "adagrad", "rmsprop", "sgd", "none"}));
  k.push_back(trial("optimizer.shampoo.grafting_beta2", "", "grafting second-moment decay (below 1 for adam, rmsprop)",
                    T(optimizer.shampoo.grafting_beta2))
                  .range(0, 1)
                  .rule([](const TrialConfig& c) {
                    const auto& s = c.optimizer.shampoo;
                    return (s.grafting == "adam" || s.grafting == "rmsprop") && s.grafting_beta2 >= 1
                               ? "must be below 1 for " + s.grafting + " grafting"
                               : std::string();
                  }));
  k.push_back(trial("optimizer.shampoo.grafting_epsilon", "", "grafting denominator epsilon", T(optimizer.shampoo.grafting_epsilon))
                  .range(0, 1));
  k.push_back(trial("optimizer.shampoo.root_method", "", "inverse-root method", T(optimizer.shampoo.root_method))
                  .choices({"eigh", "newton"})
                  .rule([](const TrialConfig& c) {
                    const auto& s = c.optimizer.shampoo;
                    const double root = 1.0 / (s.exponent > 0 ? s.exponent : 0.25);
                    return s.root_method == "newton" && std::abs(root - std::round(root)) > 1e-9
                               ? "the Newton iteration computes integer roots only (exponent 1/p); optimizer.shampoo.exponent "
                                 "= " + std::to_string(s.exponent) + " needs root_method = \"eigh\""
                               : std::string();
                  }));
  k.push_back(trial("optimizer.shampoo.bias_correction", "", "bias-correct statistics and momentum",
                    T(optimizer.shampoo.bias_correction)));
  k.push_back(trial("optimizer.shampoo.max_root_failures", "", "consecutive failed roots before the run stops",
                    T(optimizer.shampoo.max_root_failures)).range(1, 1e6));
  k.push_back(trial("optimizer.shampoo.params", "", "which matrices get Shampoo", T(optimizer.shampoo.params))
                  .choices({"hidden", "all-matrices"}).hashed());
  k.push_back(trial("optimizer.shampoo.comm_dtype", "",
                    "dtype of the search directions all-gathered from the blocks' owners; bf16 halves the bytes "
                    "(and rounds the directions)",
                    T(optimizer.shampoo.comm_dtype)).choices({"fp32", "bf16"}));
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
  k.push_back(trial("parallel.backend", "", "collectives: auto = nccl on CUDA, mpi on CPU", T(parallel.backend))
                  .choices({"auto", "mpi", "nccl"})
                  .rule([](const TrialConfig& c) {
                    return c.parallel.backend == "nccl" && c.train.device != "cuda"
                               ? std::string("nccl needs train.device = \"cuda\"; the CPU path uses mpi")
                               : std::string();
                  }));
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
  // [objective]
  k.push_back(trial("objective.metric", "", "metric that ranks trials", T(objective.metric))
                  .pattern(R"([A-Za-z_][A-Za-z0-9_./-]{0,99})", "a metric name: letters, digits and _./-"));
  k.push_back(trial("objective.mode", "", "better is min or max", T(objective.mode)).choices({"min", "max"}));
  // [sweep]: read by the controller; the swept values are [sweep.parameters] and [[sweep.grid]].
  k.push_back(sweep("sweep.method", "", "grid: every combination; random: `samples` draws", S(method)).choices({"grid", "random"}));
  k.push_back(sweep("sweep.samples", "trials", "random search: trials drawn", S(samples)).range(1, 100000));
  k.push_back(sweep("sweep.seed", "", "random search: seed of the draws (same seed, same trials)", S(seed)).range(0, 9.2e18));
  k.push_back(sweep("sweep.max_concurrent", "trials", "trials running at once", S(max_concurrent)).range(1, 1e6));
  k.push_back(sweep("sweep.max_attempts", "launches", "launches per trial; a retry resumes from the last checkpoint",
                    S(max_attempts)).range(1, 1000));
  k.push_back(sweep("sweep.early_stop.method", "", "early stopping of trials behind the others", S(early_stop.method))
                  .choices({"asha", "median", "none"}));
  k.push_back(sweep("sweep.early_stop.metric", "", "metric judged; \"\" = objective.metric", S(early_stop.metric)));
  k.push_back(sweep("sweep.early_stop.mode", "", "better is min or max; \"\" = objective.mode", S(early_stop.mode))
                  .choices({"min", "max"}));
  k.push_back(sweep("sweep.early_stop.min_step", "steps", "asha: first rung; median: no stopping before this step",
                    S(early_stop.min_step)).range(1, 1e12));
  k.push_back(sweep("sweep.early_stop.reduction_factor", "", "asha: rungs at min_step·factor^k, 1/factor promoted",
                    S(early_stop.reduction_factor)).range(2, 1000));
  k.push_back(sweep("sweep.early_stop.min_early_stopping_rate", "", "asha: rung offset s (first rung at min_step·factor^s)",
                    S(early_stop.min_early_stopping_rate)).range(0, 100));
  k.push_back(sweep("sweep.early_stop.n_startup_trials", "trials", "median: trials that report before any is stopped",
                    S(early_stop.n_startup_trials)).range(0, 1e6));
  k.push_back(sweep("sweep.early_stop.interval", "steps", "median: steps between checks; 0 = every reported step",
                    S(early_stop.interval)).range(0, 1e12));
  std::vector<KeySpec> out;
  for (Row& r : k) out.push_back(std::move(r.k));
  return out;
}

#undef T
#undef S

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

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Significant digits of the shortest text that reads back as v (std::to_chars finds it without
// trial and error): no %g precision below it can read back the same.
int shortest_digits(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string digits;
  for (const char* c = buf; c < r.ptr && *c != 'e'; ++c)
    if (*c >= '0' && *c <= '9') digits += *c;
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 1;
  const size_t last = digits.find_last_not_of('0');
  return static_cast<int>(last - first + 1);
}

std::string number_text(double v) {
  // Shortest %g text that reads back the same (the text checkpoints and stored configs already
  // hold), searched from the shortest possible precision up: usually found at the first try.
  char buf[64];
  int prec = std::isfinite(v) ? std::max(1, shortest_digits(v)) : 17;
  for (; prec < 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;  // not stod: it throws for subnormal values
  }
  if (prec == 17) std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // stays a TOML float
  return s;
}

std::string ref_text(const FieldRef& ref) {
  if (auto p = std::get_if<int64_t*>(&ref)) return std::to_string(**p);
  if (auto p = std::get_if<double*>(&ref)) return number_text(**p);
  if (auto p = std::get_if<bool*>(&ref)) return **p ? "true" : "false";
  if (auto p = std::get_if<std::string*>(&ref)) return toml_quoted(**p);
  if (auto p = std::get_if<std::vector<std::string>*>(&ref)) {
    std::string s = "[";
    for (size_t i = 0; i < (*p)->size(); ++i) {
      if (i) s += ", ";
      s += toml_quoted((**p)[i]);
    }
    return s + "]";
  }
  if (auto p = std::get_if<std::vector<int64_t>*>(&ref)) {
    std::string s = "[";
    for (size_t i = 0; i < (*p)->size(); ++i) {
      if (i) s += ", ";  // appended apart: GCC 12 warns (-Wrestrict) on ", " + to_string
      s += std::to_string((**p)[i]);
    }
    return s + "]";
  }
  auto& list = *std::get<std::vector<std::array<double, 3>>*>(ref);
  std::string s = "[";
  for (size_t i = 0; i < list.size(); ++i) {
    if (i) s += ", ";
    s += "[" + number_text(list[i][0]) + ", " + number_text(list[i][1]) + ", " + number_text(list[i][2]) + "]";
  }
  return s + "]";
}

}  // namespace

const char* key_type_name(KeyType type) {
  switch (type) {
    case KeyType::integer: return "integer";
    case KeyType::number: return "number";
    case KeyType::boolean: return "boolean";
    case KeyType::string: return "string";
    case KeyType::string_list: return "string list";
    case KeyType::coefficient_list: return "[[a,b,c],...]";
    case KeyType::integer_list: return "integer list";
  }
  return "?";
}

std::string toml_quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

KeyType KeySpec::type() const {
  if (field) {
    TrialConfig probe;
    return static_cast<KeyType>(field(probe).index());
  }
  SweepSettings probe;
  return static_cast<KeyType>(sweep_field(probe).index());
}

std::string KeySpec::expected_text() const {
  if (choices.empty()) return key_type_name(type());
  std::string s = "one of";
  for (size_t i = 0; i < choices.size(); ++i) s += (i ? ", \"" : " \"") + choices[i] + "\"";
  return s;
}

std::string KeySpec::range_text() const {
  std::ostringstream s;
  if (std::isfinite(min) && std::isfinite(max)) s << "between " << min << " and " << max;
  else if (std::isfinite(min)) s << ">= " << min;
  else s << "<= " << max;
  return s.str();
}

std::string value_text(const TrialConfig& config, const KeySpec& key) {
  TrialConfig copy = config;
  return ref_text(key.field(copy));
}

std::string value_text(const SweepSettings& sweep, const KeySpec& key) {
  SweepSettings copy = sweep;
  return ref_text(key.sweep_field(copy));
}

std::string KeySpec::default_text() const {
  return field ? value_text(TrialConfig{}, *this) : value_text(SweepSettings{}, *this);
}

const std::vector<KeySpec>& recipe_keys() {
  static const std::vector<KeySpec> table = build_table();
  return table;
}

const std::vector<const KeySpec*>& trial_keys() {
  static const std::vector<const KeySpec*> rows = [] {
    std::vector<const KeySpec*> out;
    for (const KeySpec& k : recipe_keys())
      if (k.scope() == KeyScope::trial) out.push_back(&k);
    return out;
  }();
  return rows;
}

const KeySpec* find_key(std::string_view name) {
  for (const KeySpec& k : recipe_keys())
    if (k.name == name) return &k;
  return nullptr;
}

std::string closest_key(std::string_view name, const std::vector<std::string>& extra) {
  const size_t limit = std::max<size_t>(2, name.size() / 4);
  // The distance is at least the difference in length: candidates that cannot come within the
  // limit are skipped before the quadratic comparison (a recipe may hold a hostile, megabyte-long
  // key; without this its suggestion took seconds of the controller's time per key).
  const auto too_far = [&](std::string_view candidate) {
    return (name.size() > candidate.size() ? name.size() - candidate.size() : candidate.size() - name.size()) > limit;
  };
  std::string best;
  size_t best_d = std::string::npos;
  auto consider = [&](const std::string& candidate) {
    size_t d = too_far(candidate) ? std::string::npos : edit_distance(name, candidate);
    // Also match on the last component alone ("ns_step" -> "optimizer.muon.ns_steps").
    size_t dot = candidate.rfind('.');
    if (dot != std::string::npos && name.find('.') == std::string_view::npos) {
      const std::string_view last = std::string_view(candidate).substr(dot + 1);
      if (!too_far(last)) d = std::min(d, edit_distance(name, last));
    }
    if (d < best_d) {
      best_d = d;
      best = candidate;
    }
  };
  for (const KeySpec& k : recipe_keys()) consider(k.name);
  for (const std::string& e : extra) consider(e);
  return best_d <= limit ? best : "";
}

std::string format_key_row(const std::string& name, const std::string& type, const std::string& def,
                           const std::string& unit, const std::string& description) {
  char line[1024];
  std::snprintf(line, sizeof line, "%-44s %-14s %-18s %-10s %s", name.c_str(), type.c_str(), def.c_str(),
                unit.c_str(), description.c_str());
  return line;
}

std::string format_key_table(bool with_recipe_keys, const std::vector<std::string>& extra_rows) {
  std::ostringstream out;
  out << format_key_row("key", "type", "default", "unit", "description") << "\n";
  for (const KeySpec& k : recipe_keys()) {
    if (k.scope() == KeyScope::recipe && !with_recipe_keys) continue;
    std::string desc = k.description;
    if (!k.choices.empty()) {
      desc += " (";
      for (size_t i = 0; i < k.choices.size(); ++i) desc += (i ? " | " : "") + k.choices[i];
      desc += ")";
    }
    out << format_key_row(k.name, key_type_name(k.type()), k.default_text(), k.unit, desc) << "\n";
  }
  for (const std::string& row : extra_rows) out << row << "\n";
  return out.str();
}

}  // namespace precon::worker
