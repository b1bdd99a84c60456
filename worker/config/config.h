// The recipe schema (docs/design.md, Recipe TOML) as typed structs: TrialConfig is one trial's configuration
// (what precon-train reads), SweepSettings the scalar keys of a recipe's [sweep] table (what the
// controller reads). One field per line with meaning, unit and default; the key table in keys.cpp
// documents, range-checks and parses every field of both.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace precon::worker {

struct ExperimentConfig {
  std::string name = "experiment";  // experiment name (letters, digits, '-', '_', '.')
  std::string description;          // free text
};

// A mixture-of-experts MLP in place of the dense one ([model.moe], llama only): each token's top_k
// experts of `experts`, their outputs weighted by the renormalised router probabilities, dropless.
struct MoeConfig {
  int64_t experts = 0;             // E: experts per MoE layer; 0 = a dense model
  int64_t top_k = 2;               // experts each token is sent to
  int64_t ffn_hidden = 0;          // each expert's SwiGLU width; 0 = the dense MLP's (model.ffn_hidden's rule)
  int64_t shared_experts = 0;      // a shared SwiGLU of shared_experts × ffn_hidden on every token; 0 = none
  int64_t first_dense_layers = 0;  // leading layers that keep the dense MLP
  double aux_loss_coeff = 1e-2;    // load-balancing loss coefficient (softmax router only)
  std::string router_dtype = "fp32";  // the router computes in fp32 always
  // "softmax" (top-k of the softmax, renormalised) | "sigmoid" (DeepSeek-V3's: top-k of sigmoid
  // scores + a per-expert bias kept balanced outside the gradient; weights from the scores alone)
  std::string router = "softmax";
  double route_scale = 1.0;        // sigmoid: the normalised weights' factor
  int64_t n_group = 1;             // sigmoid: expert groups of group-limited routing; 1 = none
  int64_t topk_group = 1;          // sigmoid: groups each token may choose from (n_group > 1)
  double bias_update_rate = 1e-3;  // sigmoid: the bias's step per optimizer step (sign of the load error)
  double seq_aux_loss_coeff = 0;   // sigmoid: the sequence-wise balance loss's coefficient; 0 = none

  bool sigmoid() const { return router == "sigmoid"; }
};

// Multi-head latent attention ([model.mla], llama only; DeepSeek-V3's): queries from a low-rank
// latent (q_lora_rank; 0 = one q projection), keys and values from one shared latent of
// kv_lora_rank channels, each head's query and key [nope | rope] with the rope part of the key
// shared by all heads, values of v_head_dim; RMSNorm on both latents; scale 1/√(nope + rope).
struct MlaConfig {
  int64_t kv_lora_rank = 0;      // the key/value latent's width; 0 = grouped-query attention (no MLA)
  int64_t q_lora_rank = 0;       // the query latent's width; 0 = a plain q projection from the input
  int64_t qk_nope_head_dim = 32; // each head's query/key channels without rotary embeddings
  int64_t qk_rope_head_dim = 16; // each head's query/key channels with them (the key's shared by the heads); even
  int64_t v_head_dim = 32;       // each head's value channels
};

// YaRN context extension of the rotary embeddings ([model.rope_scaling], llama only), as DeepSeek-V3
// defines it (kernels/rope.h): each pair's frequency blended between the original one and that one
// divided by factor, by a ramp between the pairs turning beta_fast and beta_slow times over
// original_max_position_embeddings; cos and sin times ms(factor, mscale) / ms(factor, mscale_all_dim);
// with MLA the softmax scale times ms(factor, mscale_all_dim)², where ms(s, m) = 0.1·m·ln s + 1 (1 when
// m = 0).
struct RopeScalingConfig {
  std::string type = "none";                     // "none" | "yarn"
  double factor = 1;                             // yarn: how many times the original context (> 1)
  int64_t original_max_position_embeddings = 0;  // yarn: the context the frequencies were made for (tokens)
  double beta_fast = 32;                         // yarn: rotations above which a pair keeps its frequency
  double beta_slow = 1;                          // yarn: rotations below which it is interpolated
  double mscale = 1;                             // yarn: cos/sin factor's numerator coefficient
  double mscale_all_dim = 0;                     // yarn: its denominator's, and MLA's softmax factor's; 0 = none

  bool yarn() const { return type == "yarn"; }
};

struct ModelConfig {
  std::string arch = "gpt2";  // "gpt2" | "llama": the model family (worker/model/)
  int64_t n_layer = 4;        // transformer blocks
  int64_t n_head = 4;         // attention heads; must divide d_model
  int64_t n_kv_head = 0;      // llama: key/value heads (grouped-query attention), dividing n_head; 0 = n_head
  int64_t d_model = 128;      // embedding width C
  int64_t ffn_hidden = 0;     // MLP width; 0 = the family's rule (gpt2: 4·d_model; llama: 8/3·d_model up to a multiple of 64)
  int64_t seq_len = 64;       // context length T (tokens)
  int64_t vocab_size = 256;   // real vocabulary V (padded internally, never visible)
  double rope_theta = 10000;  // llama: base of the rotary embeddings' frequencies
  double norm_eps = 1e-5;     // llama: RMSNorm epsilon
  bool tie_embeddings = false;  // llama: the output head is embed_tokens (no lm_head); gpt2 is always tied
  // llama: multi-token prediction modules D (DeepSeek-V3's MTP; docs/models.md): module k predicts the
  // token k + 1 after the next from [embedding of token i + k; its predecessor's hidden state] through
  // one more block, sharing the embedding and the head; 0 = none
  int64_t mtp_layers = 0;
  double mtp_loss_coeff = 0.3;  // λ: the training loss is the main loss + λ · the mean of the D modules' losses
  MoeConfig moe;
  MlaConfig mla;
  RopeScalingConfig rope_scaling;

  bool llama() const { return arch == "llama"; }
  bool uses_mla() const { return llama() && mla.kv_lora_rank > 0; }
  // DeepseekV3ForCausalLM's architecture (its config.json and tensor names): MLA, and a dense MLP
  // or the sigmoid router's experts.
  bool deepseek_v3() const { return uses_mla() && (moe.experts == 0 || moe.sigmoid()); }
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t ffn() const {
    if (ffn_hidden > 0) return ffn_hidden;
    return llama() ? (8 * d_model / 3 + 63) / 64 * 64 : 4 * d_model;  // Llama: int(8d/3), rounded up
  }
  // The blocks of the table: the n_layer of the model, then the mtp_layers modules' (model.layers.{n_layer + k − 1}).
  int64_t blocks() const { return n_layer + mtp_layers; }
  // Whether block `layer` has a mixture of experts (an MTP module's block is as the last layer is).
  bool moe_layer(int64_t layer) const { return moe.experts > 0 && layer >= moe.first_dense_layers; }
  int64_t expert_ffn() const { return moe.ffn_hidden > 0 ? moe.ffn_hidden : ffn(); }
};

// One dataset of [data] train or val: llm.c token shard(s), comma-separated, or a Megatron prefix
// (prefix.bin + prefix.idx), with its blend weight.
struct DataSource {
  std::string path;
  double weight = 1.0;
  bool operator==(const DataSource&) const = default;
};

struct DataConfig {
  std::vector<DataSource> train = {{"data/train.bin", 1.0}};  // one dataset, or a weighted blend
  std::vector<DataSource> val = {{"data/val.bin", 1.0}};      // empty: no validation
  std::string format = "auto";                 // "auto" (by magic) | "llmc" | "megatron"
  std::string document_boundaries = "shuffle"; // Megatron data: "shuffle" documents per epoch | "eod" (file order)
};

struct TrainConfig {
  int64_t steps = 200;            // optimizer steps
  int64_t batch_size = 8;         // sequences per step (B), the global batch over all data-parallel ranks
  int64_t micro_batch_size = 0;   // sequences per forward/backward on one rank; 0 = the rank's whole
                                  // slice (batch_size / parallel.data); smaller accumulates gradients
  int64_t seed = 1337;            // RNG seed: init, data order
  int64_t eval_every = 50;        // steps between validation losses; 0 = only at the end
  int64_t eval_batches = 4;       // validation batches per evaluation
  int64_t log_every = 1;          // steps between train-loss records
  int64_t checkpoint_every = 100; // steps between checkpoints; 0 = only at the end
  int64_t keep_checkpoints = 2;   // newest checkpoints kept (the newest good one is never deleted)
  int64_t keep_best = 0;          // also kept: the checkpoints with the best objective value
  std::string init_from;          // safetensors file to initialise the model from ("" = random)
  double grad_clip = 1.0;         // global-norm clip of raw gradients; 0 = off
  std::string device = "cpu";     // "cpu" | "cuda"
  std::string precision = "fp32"; // "fp32" | "bf16" (bf16 compute on CUDA, fp32 masters)
  int64_t threads = 0;            // CPU threads; 0 = all cores
  // Before allocating, compare the memory estimate with what this process may have (MemAvailable,
  // its cgroup's limit, the GPU's free memory) and refuse to start (exit 2) when it does not fit.
  bool memory_check = true;
};

struct AdamWConfig {
  double lr = 0.0;           // lr of AdamW-routed params in muon/shampoo runs; 0 = optimizer.lr
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = -1;  // -1 = optimizer.weight_decay
};

struct MuonConfig {
  double momentum = 0.95;
  bool nesterov = true;
  std::string momentum_form = "ema";      // "ema" (lerp) | "sgd"
  int64_t ns_steps = 5;                   // Newton–Schulz iterations
  std::string coefficients = "keller";    // a kernels::ns_coefficient_set_names() name | "explicit"
  std::vector<std::array<double, 3>> coefficient_list;  // the tuples when coefficients = explicit
  std::string scale = "shape";            // "shape" | "rms-match" | "spectral"
  bool split_qkv = true;                  // orthogonalise Q, K, V blocks separately
  bool split_heads = false;               // orthogonalise each attention head's block separately
  std::string ns_precision = "auto";      // "auto" (bf16 on CUDA, fp32 on CPU) | "fp32" | "bf16"
  double ns_eps = 1e-7;                   // added to the Frobenius norm before NS
  std::string tp_mode = "duplicated";     // "duplicated" | "distributed" | "blockwise" (Megatron's)
  std::string comm_dtype = "fp32";        // "fp32" | "bf16": the all-gathered updates
  // "muon" | "normuon": NorMuon divides each row (output neuron) of the orthogonalised update by
  // √v + eps, v a per-row EMA (beta2) of its mean square, then rescales (optim/muon.cpp).
  std::string variant = "muon";
  double beta2 = 0.95;                    // NorMuon: the per-row second moment's decay
  double eps = 1e-8;                      // NorMuon: added to √v
};

struct ShampooConfig {
  double beta1 = 0.9;                     // gradient filtering (momentum); 0 = off
  double beta2 = 1.0;                     // statistics EMA; 1.0 = running sum
  double epsilon = 1e-12;                 // regulariser of the inverse roots
  int64_t precondition_frequency = 10;    // steps between inverse-root refreshes
  int64_t start_preconditioning_step = 0; // 0 = precondition_frequency
  double exponent = 0.0;                  // inverse-root exponent override (e.g. 0.25); 0 = 1/(2·order)
  int64_t max_preconditioner_dim = 1024;  // larger dims are split into blocks
  std::string grafting = "adam";          // "adam" | "adagrad" | "rmsprop" | "sgd" | "none"
  double grafting_beta2 = 0.999;
  double grafting_epsilon = 1e-8;
  std::string root_method = "eigh";       // "eigh" | "newton"
  bool bias_correction = true;
  int64_t max_root_failures = 5;          // consecutive failed roots before the run stops
  std::string params = "hidden";         // "hidden" (2-D hidden matrices) | "all-matrices" (+ wte, wpe)
  std::string comm_dtype = "fp32";        // "fp32" | "bf16": the all-gathered search directions
};

// SOAP (Vyas et al. 2024): Adam in the eigenbasis of Shampoo's factors (optim/soap.cpp).
struct SoapConfig {
  double beta1 = 0.95;                    // first moment (kept in the rotated basis)
  double beta2 = 0.95;                    // second moment
  double shampoo_beta = -1;               // the factors' EMA; −1 = beta2
  double eps = 1e-8;
  double weight_decay = 0.01;             // decoupled, after the update
  int64_t precondition_frequency = 10;    // steps between eigenbasis refreshes (power step + QR)
  int64_t max_preconditioner_dim = 10000; // a longer side is not rotated
  bool normalize_grads = false;           // the update divided by its RMS
  bool correct_bias = true;
};

struct OptimizerConfig {
  std::string name = "adamw";        // "adamw" | "muon" | "shampoo" | "soap"
  double lr = 1e-3;                  // peak learning rate
  double weight_decay = 0.0;         // decoupled weight decay
  std::string schedule = "cosine";   // "constant" | "cosine" | "linear" | "wsd"
  int64_t warmup_steps = 10;         // linear warm-up steps
  double min_lr_ratio = 0.1;         // final lr as a fraction of the peak
  double decay_fraction = 0.2;       // wsd: fraction of steps spent decaying
  // QK-clip (MuonClip), any optimizer: after each update, the query and key weights of every head
  // whose largest attention logit in the step exceeded the threshold are scaled down to it
  // (worker/model/qk_clip.h). 0 = off.
  double qk_clip_threshold = 0.0;
  double qk_clip_alpha = 0.5;        // the query's share of the rescaling (the key's is 1 − alpha)
  // "decoupled": p ← p·(1 − lr·wd) − lr·u; "cautious": the decay only on the entries where the
  // update u and p have the same sign (every optimizer).
  std::string weight_decay_mode = "decoupled";
  AdamWConfig adamw;
  MuonConfig muon;
  ShampooConfig shampoo;
  SoapConfig soap;
};

struct ParallelConfig {
  int64_t tensor = 1;            // tensor-parallel ranks
  int64_t data = 1;              // data-parallel ranks; tensor × data × pipeline = the ranks the launcher starts
  int64_t pipeline = 1;          // pipeline stages (transformer blocks split over them, 1F1B schedule)
  std::vector<int64_t> pipeline_layers;  // blocks per (virtual) stage, first to last; empty = as even as possible
  int64_t virtual_stages = 1;    // model chunks per pipeline rank, interleaved 1F1B (1 = plain 1F1B)
  int64_t expert = 1;            // expert-parallel ranks, carved from the data-parallel ones (divides data)
  std::string backend = "auto";  // "auto" (nccl on CUDA, mpi on CPU) | "mpi" | "nccl"
  // Element-wise optimizer state (AdamW's moments) split in contiguous ranges over the ranks that
  // hold the same parameters, as Megatron's --use-distributed-optimizer; false: replicated on each.
  bool distributed_optimizer = true;
};

struct ResourcesConfig {
  std::string executor = "local";  // "local" | "slurm"
  int64_t nodes = 1;
  int64_t ntasks_per_node = 1;
  int64_t gpus_per_node = 0;
  int64_t cpus_per_task = 0;       // 0 = executor default
  std::string mem;                 // e.g. "16G"
  std::string time_limit;          // Slurm time, e.g. "01:00:00"
  std::string pending_limit;       // Slurm time a job may wait before it first runs; "" = no limit
  std::string partition, account, qos, constraint;
  std::vector<std::string> sbatch_args;  // extra sbatch options, validated
  std::vector<std::string> setup;        // shell lines run before the trainer (module loads)
};

struct ObjectiveConfig {
  std::string metric = "val_loss";
  std::string mode = "min";  // "min" | "max"
  // Several objectives (a Pareto front): one mode per metric. Empty: the one metric above. When
  // given, metric and mode hold the first of them (what keeps the best checkpoints).
  std::vector<std::string> metrics;
  std::vector<std::string> modes;
};

struct EarlyStopSettings {
  std::string method = "none";          // "asha" | "hyperband" | "median" | "pareto" | "none"
  std::string metric;                   // metric to judge; "" in the recipe = objective.metric
  std::string mode;                     // "min" | "max"; "" in the recipe = objective.mode
  int64_t min_step = 100;               // steps: first rung (ASHA) / no stopping before (median)
  int64_t reduction_factor = 3;         // ASHA: rung k at min_step·factor^(k+rate), keeps 1/factor
  int64_t min_early_stopping_rate = 0;  // ASHA: rung offset s (as Optuna's pruner)
  int64_t max_step = 0;                 // Hyperband: the longest run in steps; 0 = the trials' train.steps
  int64_t n_startup_trials = 5;         // median: trials that must report before anyone stops
  int64_t interval = 0;                 // median: steps between checks; 0 = every reported step
  int64_t min_dominating = 1;           // pareto: stopped when this many completed trials dominate it
};

// [sweep.tpe]: the tree-structured Parzen estimator (sweep.method = "tpe"), as Optuna's TPESampler.
struct TpeSettings {
  int64_t n_startup_trials = 10;   // trials drawn at random before the estimator proposes
  int64_t n_ei_candidates = 24;    // candidates drawn from l(x); the one with the best l/g runs
  bool multivariate = true;        // one joint estimator over the keys (else one per key)
  bool constant_liar = true;       // running trials count as the worst, so parallel proposals differ
  double prior_weight = 1.0;       // weight of the prior kernel (the whole range) in l and g
  bool consider_endpoints = false; // univariate bandwidths also count the range's ends as neighbours
};

// [sweep.nsga2]: the genetic algorithm NSGA-II (sweep.method = "nsga2"), as Optuna's NSGAIISampler.
struct NsgaSettings {
  int64_t population_size = 50;  // trials per generation; the first generation is drawn at random
  double mutation_prob = 0;      // chance a key is drawn anew instead of inherited; 0 = 1/(number of keys)
  double crossover_prob = 0.9;   // chance a child is a crossover of two parents (else a copy of one)
  double swapping_prob = 0.5;    // uniform crossover: chance each key is swapped between the parents
};

// The scalar keys of [sweep]; the swept values themselves ([sweep.parameters], [[sweep.grid]])
// are parsed by the controller's recipe layer against this same key table.
struct SweepSettings {
  std::string method = "grid";  // "grid" | "random" | "tpe" | "bohb" (tpe with Hyperband) | "nsga2"
  int64_t samples = 10;         // random, tpe: trials run
  int64_t seed = 0;             // random, tpe: seed of the draws
  int64_t max_concurrent = 2;   // trials running at once
  int64_t max_attempts = 3;     // launches per trial (first + retries)
  EarlyStopSettings early_stop; // [sweep.early_stop]
  TpeSettings tpe;              // [sweep.tpe]
  NsgaSettings nsga2;           // [sweep.nsga2]
};

struct TrialConfig {
  ExperimentConfig experiment;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  ParallelConfig parallel;
  ResourcesConfig resources;
  ObjectiveConfig objective;
};

}  // namespace precon::worker
