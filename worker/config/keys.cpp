#include "worker/config/keys.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace precon::worker {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

KeySpec key(std::string name, std::string unit, std::string description, std::function<FieldRef(TrialConfig&)> field,
            double min = -kInf, double max = kInf, std::vector<std::string> choices = {}) {
  return KeySpec{std::move(name), std::move(unit), std::move(description), min, max, std::move(choices),
                 std::move(field)};
}

std::vector<KeySpec> build_table() {
  using C = TrialConfig&;
  std::vector<KeySpec> k;
  // [experiment]
  k.push_back(key("experiment.name", "", "experiment name", [](C c) { return FieldRef{&c.experiment.name}; }));
  k.push_back(key("experiment.description", "", "free-text description",
                  [](C c) { return FieldRef{&c.experiment.description}; }));
  // [model]
  k.push_back(key("model.n_layer", "", "transformer blocks", [](C c) { return FieldRef{&c.model.n_layer}; }, 1, 256));
  k.push_back(key("model.n_head", "", "attention heads (must divide d_model)", [](C c) { return FieldRef{&c.model.n_head}; }, 1, 256));
  k.push_back(key("model.d_model", "", "embedding width C", [](C c) { return FieldRef{&c.model.d_model}; }, 1, 65536));
  k.push_back(key("model.seq_len", "tokens", "context length T", [](C c) { return FieldRef{&c.model.seq_len}; }, 1, 1 << 20));
  k.push_back(key("model.vocab_size", "tokens", "vocabulary size V (padded internally)",
                  [](C c) { return FieldRef{&c.model.vocab_size}; }, 1, 1 << 24));
  // [data]
  k.push_back(key("data.train", "path", "training token shard(s), comma-separated", [](C c) { return FieldRef{&c.data.train}; }));
  k.push_back(key("data.val", "path", "validation token shard", [](C c) { return FieldRef{&c.data.val}; }));
  // [train]
  k.push_back(key("train.steps", "steps", "optimizer steps", [](C c) { return FieldRef{&c.train.steps}; }, 1, 1e12));
  k.push_back(key("train.batch_size", "sequences", "sequences per step (B)", [](C c) { return FieldRef{&c.train.batch_size}; }, 1, 1 << 20));
  k.push_back(key("train.seed", "", "RNG seed for init and data order", [](C c) { return FieldRef{&c.train.seed}; }, 0, 9.2e18));
  k.push_back(key("train.eval_every", "steps", "steps between validation losses; 0 = only at the end",
                  [](C c) { return FieldRef{&c.train.eval_every}; }, 0, 1e12));
  k.push_back(key("train.eval_batches", "batches", "validation batches per evaluation",
                  [](C c) { return FieldRef{&c.train.eval_batches}; }, 1, 1e6));
  k.push_back(key("train.log_every", "steps", "steps between train-loss records", [](C c) { return FieldRef{&c.train.log_every}; }, 1, 1e12));
  k.push_back(key("train.checkpoint_every", "steps", "steps between checkpoints; 0 = only at the end",
                  [](C c) { return FieldRef{&c.train.checkpoint_every}; }, 0, 1e12));
  k.push_back(key("train.keep_checkpoints", "", "checkpoints kept (the newest good one always is)",
                  [](C c) { return FieldRef{&c.train.keep_checkpoints}; }, 1, 1e6));
  k.push_back(key("train.keep_best", "", "also kept: checkpoints with the best objective (objective.metric/mode)",
                  [](C c) { return FieldRef{&c.train.keep_best}; }, 0, 1e6));
  k.push_back(key("train.init_from", "path", "safetensors file to initialise from; empty = random init",
                  [](C c) { return FieldRef{&c.train.init_from}; }));
  k.push_back(key("train.grad_clip", "", "global-norm clip of raw gradients; 0 = off", [](C c) { return FieldRef{&c.train.grad_clip}; }, 0, kInf));
  k.push_back(key("train.device", "", "compute device", [](C c) { return FieldRef{&c.train.device}; }, -kInf, kInf, {"cpu", "cuda"}));
  k.push_back(key("train.precision", "", "compute precision (bf16: CUDA, fp32 masters)",
                  [](C c) { return FieldRef{&c.train.precision}; }, -kInf, kInf, {"fp32", "bf16"}));
  k.push_back(key("train.threads", "threads", "CPU threads; 0 = all cores", [](C c) { return FieldRef{&c.train.threads}; }, 0, 4096));
  // [optimizer]
  k.push_back(key("optimizer.name", "", "optimizer of the 2-D hidden matrices (the rest use AdamW)",
                  [](C c) { return FieldRef{&c.optimizer.name}; }, -kInf, kInf, {"adamw", "muon", "shampoo"}));
  k.push_back(key("optimizer.lr", "", "peak learning rate", [](C c) { return FieldRef{&c.optimizer.lr}; }, 0, 1e3));
  k.push_back(key("optimizer.weight_decay", "", "decoupled weight decay", [](C c) { return FieldRef{&c.optimizer.weight_decay}; }, 0, 1e3));
  k.push_back(key("optimizer.schedule", "", "learning-rate schedule after warm-up", [](C c) { return FieldRef{&c.optimizer.schedule}; },
                  -kInf, kInf, {"constant", "cosine", "linear", "wsd"}));
  k.push_back(key("optimizer.warmup_steps", "steps", "linear warm-up steps", [](C c) { return FieldRef{&c.optimizer.warmup_steps}; }, 0, 1e12));
  k.push_back(key("optimizer.min_lr_ratio", "", "final lr as a fraction of the peak", [](C c) { return FieldRef{&c.optimizer.min_lr_ratio}; }, 0, 1));
  k.push_back(key("optimizer.decay_fraction", "", "wsd: fraction of the steps spent decaying",
                  [](C c) { return FieldRef{&c.optimizer.decay_fraction}; }, 0, 1));
  // [optimizer.adamw]
  k.push_back(key("optimizer.adamw.lr", "", "lr of AdamW-routed params in muon/shampoo runs; 0 = optimizer.lr",
                  [](C c) { return FieldRef{&c.optimizer.adamw.lr}; }, 0, 1e3));
  k.push_back(key("optimizer.adamw.beta1", "", "first-moment decay", [](C c) { return FieldRef{&c.optimizer.adamw.beta1}; }, 0, 1));
  k.push_back(key("optimizer.adamw.beta2", "", "second-moment decay", [](C c) { return FieldRef{&c.optimizer.adamw.beta2}; }, 0, 1));
  k.push_back(key("optimizer.adamw.eps", "", "denominator epsilon", [](C c) { return FieldRef{&c.optimizer.adamw.eps}; }, 0, 1));
  k.push_back(key("optimizer.adamw.weight_decay", "", "weight decay of AdamW-routed params; -1 = optimizer.weight_decay",
                  [](C c) { return FieldRef{&c.optimizer.adamw.weight_decay}; }, -1, 1e3));
  // [optimizer.muon]
  k.push_back(key("optimizer.muon.momentum", "", "momentum μ", [](C c) { return FieldRef{&c.optimizer.muon.momentum}; }, 0, 1));
  k.push_back(key("optimizer.muon.nesterov", "", "Nesterov momentum", [](C c) { return FieldRef{&c.optimizer.muon.nesterov}; }));
  k.push_back(key("optimizer.muon.momentum_form", "", "ema: M = μM + (1-μ)G; sgd: M = μM + G",
                  [](C c) { return FieldRef{&c.optimizer.muon.momentum_form}; }, -kInf, kInf, {"ema", "sgd"}));
  k.push_back(key("optimizer.muon.ns_steps", "", "Newton–Schulz iterations", [](C c) { return FieldRef{&c.optimizer.muon.ns_steps}; }, 0, 100));
  k.push_back(key("optimizer.muon.coefficients", "", "Newton–Schulz coefficient set, or explicit when coefficient_list is given",
                  [](C c) { return FieldRef{&c.optimizer.muon.coefficients}; }, -kInf, kInf, {"keller", "polar-express", "explicit"}));
  k.push_back(key("optimizer.muon.coefficient_list", "", "explicit [[a, b, c], ...] per step, last repeated",
                  [](C c) { return FieldRef{&c.optimizer.muon.coefficient_list}; }));
  k.push_back(key("optimizer.muon.scale", "", "update scale: shape √max(1,out/in), rms-match 0.2√max(out,in), spectral √(out/in)",
                  [](C c) { return FieldRef{&c.optimizer.muon.scale}; }, -kInf, kInf, {"shape", "rms-match", "spectral"}));
  k.push_back(key("optimizer.muon.split_qkv", "", "orthogonalise Q, K and V separately", [](C c) { return FieldRef{&c.optimizer.muon.split_qkv}; }));
  k.push_back(key("optimizer.muon.ns_precision", "", "Newton–Schulz precision; auto = bf16 on CUDA, fp32 on CPU",
                  [](C c) { return FieldRef{&c.optimizer.muon.ns_precision}; }, -kInf, kInf, {"auto", "fp32", "bf16"}));
  k.push_back(key("optimizer.muon.ns_eps", "", "added to the Frobenius norm before Newton–Schulz",
                  [](C c) { return FieldRef{&c.optimizer.muon.ns_eps}; }, 0, 1));
  // [optimizer.shampoo]
  k.push_back(key("optimizer.shampoo.beta1", "", "gradient filtering (momentum); 0 = off", [](C c) { return FieldRef{&c.optimizer.shampoo.beta1}; }, 0, 1));
  k.push_back(key("optimizer.shampoo.beta2", "", "statistics EMA; 1 = running sum", [](C c) { return FieldRef{&c.optimizer.shampoo.beta2}; }, 0, 1));
  k.push_back(key("optimizer.shampoo.epsilon", "", "inverse-root regulariser", [](C c) { return FieldRef{&c.optimizer.shampoo.epsilon}; }, 0, 1));
  k.push_back(key("optimizer.shampoo.precondition_frequency", "steps", "steps between inverse-root refreshes",
                  [](C c) { return FieldRef{&c.optimizer.shampoo.precondition_frequency}; }, 1, 1e9));
  k.push_back(key("optimizer.shampoo.start_preconditioning_step", "steps", "first preconditioned step; 0 = precondition_frequency",
                  [](C c) { return FieldRef{&c.optimizer.shampoo.start_preconditioning_step}; }, 0, 1e12));
  k.push_back(key("optimizer.shampoo.exponent", "", "inverse-root exponent override (0.25 = 4th root); 0 = 1/(2·order)",
                  [](C c) { return FieldRef{&c.optimizer.shampoo.exponent}; }, 0, 1));
  k.push_back(key("optimizer.shampoo.max_preconditioner_dim", "", "dims above this are split into blocks",
                  [](C c) { return FieldRef{&c.optimizer.shampoo.max_preconditioner_dim}; }, 1, 1 << 20));
  k.push_back(key("optimizer.shampoo.grafting", "", "grafting method for the step size",
                  [](C c) { return FieldRef{&c.optimizer.shampoo.grafting}; }, -kInf, kInf, {"adam", "adagrad", "rmsprop", "sgd", "none"}));
  k.push_back(key("optimizer.shampoo.grafting_beta2", "", "grafting second-moment decay",
                  [](C c) { return FieldRef{&c.optimizer.shampoo.grafting_beta2}; }, 0, 1));
  k.push_back(key("optimizer.shampoo.grafting_epsilon", "", "grafting denominator epsilon",
                  [](C c) { return FieldRef{&c.optimizer.shampoo.grafting_epsilon}; }, 0, 1));
  k.push_back(key("optimizer.shampoo.root_method", "", "inverse-root method", [](C c) { return FieldRef{&c.optimizer.shampoo.root_method}; },
                  -kInf, kInf, {"eigh", "newton"}));
  k.push_back(key("optimizer.shampoo.bias_correction", "", "bias-correct statistics and momentum",
                  [](C c) { return FieldRef{&c.optimizer.shampoo.bias_correction}; }));
  k.push_back(key("optimizer.shampoo.max_root_failures", "", "consecutive failed roots before the run stops",
                  [](C c) { return FieldRef{&c.optimizer.shampoo.max_root_failures}; }, 1, 1e6));
  k.push_back(key("optimizer.shampoo.params", "", "which matrices get Shampoo", [](C c) { return FieldRef{&c.optimizer.shampoo.params}; },
                  -kInf, kInf, {"hidden", "all-matrices"}));
  // [parallel]
  k.push_back(key("parallel.tensor", "ranks", "tensor-parallel ranks", [](C c) { return FieldRef{&c.parallel.tensor}; }, 1, 1024));
  k.push_back(key("parallel.data", "ranks", "data-parallel ranks", [](C c) { return FieldRef{&c.parallel.data}; }, 1, 1 << 20));
  // [resources]
  k.push_back(key("resources.executor", "", "where trials run", [](C c) { return FieldRef{&c.resources.executor}; }, -kInf, kInf, {"local", "slurm"}));
  k.push_back(key("resources.nodes", "nodes", "nodes per trial", [](C c) { return FieldRef{&c.resources.nodes}; }, 1, 1e5));
  k.push_back(key("resources.ntasks_per_node", "tasks", "ranks per node", [](C c) { return FieldRef{&c.resources.ntasks_per_node}; }, 1, 1024));
  k.push_back(key("resources.gpus_per_node", "GPUs", "GPUs per node", [](C c) { return FieldRef{&c.resources.gpus_per_node}; }, 0, 64));
  k.push_back(key("resources.cpus_per_task", "CPUs", "CPUs per rank; 0 = executor default", [](C c) { return FieldRef{&c.resources.cpus_per_task}; }, 0, 4096));
  k.push_back(key("resources.mem", "", "memory per node, e.g. \"16G\"", [](C c) { return FieldRef{&c.resources.mem}; }));
  k.push_back(key("resources.time_limit", "", "Slurm time limit, e.g. \"01:30:00\"", [](C c) { return FieldRef{&c.resources.time_limit}; }));
  k.push_back(key("resources.partition", "", "Slurm partition", [](C c) { return FieldRef{&c.resources.partition}; }));
  k.push_back(key("resources.account", "", "Slurm account", [](C c) { return FieldRef{&c.resources.account}; }));
  k.push_back(key("resources.qos", "", "Slurm QOS", [](C c) { return FieldRef{&c.resources.qos}; }));
  k.push_back(key("resources.constraint", "", "Slurm node constraint", [](C c) { return FieldRef{&c.resources.constraint}; }));
  k.push_back(key("resources.sbatch_args", "", "extra sbatch options", [](C c) { return FieldRef{&c.resources.sbatch_args}; }));
  k.push_back(key("resources.setup", "", "shell lines run before the trainer (module loads)", [](C c) { return FieldRef{&c.resources.setup}; }));
  // [objective]
  k.push_back(key("objective.metric", "", "metric that ranks trials", [](C c) { return FieldRef{&c.objective.metric}; }));
  k.push_back(key("objective.mode", "", "better is min or max", [](C c) { return FieldRef{&c.objective.mode}; }, -kInf, kInf, {"min", "max"}));
  return k;
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

std::string number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  // Shortest text that reads back the same.
  for (int prec = 1; prec < 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::stod(buf) == v) {
      s = buf;
      break;
    }
  }
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // stays a TOML float
  return s;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out + "\"";
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
  }
  return "?";
}

KeyType KeySpec::type() const {
  TrialConfig probe;
  return static_cast<KeyType>(field(probe).index());
}

std::string value_text(const TrialConfig& config, const KeySpec& key) {
  TrialConfig copy = config;
  FieldRef ref = key.field(copy);
  if (auto p = std::get_if<int64_t*>(&ref)) return std::to_string(**p);
  if (auto p = std::get_if<double*>(&ref)) return number_text(**p);
  if (auto p = std::get_if<bool*>(&ref)) return **p ? "true" : "false";
  if (auto p = std::get_if<std::string*>(&ref)) return quoted(**p);
  if (auto p = std::get_if<std::vector<std::string>*>(&ref)) {
    std::string s = "[";
    for (size_t i = 0; i < (*p)->size(); ++i) s += (i ? ", " : "") + quoted((**p)[i]);
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

std::string KeySpec::default_text() const { return value_text(TrialConfig{}, *this); }

const std::vector<KeySpec>& trial_keys() {
  static const std::vector<KeySpec> table = build_table();
  return table;
}

const KeySpec* find_key(std::string_view name) {
  for (const KeySpec& k : trial_keys())
    if (k.name == name) return &k;
  return nullptr;
}

std::string closest_key(std::string_view name, const std::vector<std::string>& extra) {
  std::string best;
  size_t best_d = std::string::npos;
  auto consider = [&](const std::string& candidate) {
    size_t d = edit_distance(name, candidate);
    // Also match on the last component alone ("ns_step" -> "optimizer.muon.ns_steps").
    size_t dot = candidate.rfind('.');
    if (dot != std::string::npos && name.find('.') == std::string_view::npos)
      d = std::min(d, edit_distance(name, std::string_view(candidate).substr(dot + 1)));
    if (d < best_d) {
      best_d = d;
      best = candidate;
    }
  };
  for (const KeySpec& k : trial_keys()) consider(k.name);
  for (const std::string& e : extra) consider(e);
  return best_d <= std::max<size_t>(2, name.size() / 4) ? best : "";
}

std::string format_key_table(const std::vector<std::string>& extra_rows) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line, "%-44s %-14s %-18s %-10s %s\n", "key", "type", "default", "unit", "description");
  out << line;
  for (const KeySpec& k : trial_keys()) {
    std::string desc = k.description;
    if (!k.choices.empty()) {
      desc += " (";
      for (size_t i = 0; i < k.choices.size(); ++i) desc += (i ? " | " : "") + k.choices[i];
      desc += ")";
    }
    std::snprintf(line, sizeof line, "%-44s %-14s %-18s %-10s %s\n", k.name.c_str(), key_type_name(k.type()),
                  k.default_text().c_str(), k.unit.c_str(), desc.c_str());
    out << line;
  }
  for (const std::string& row : extra_rows) out << row << "\n";
  return out.str();
}

}  // namespace precon::worker
