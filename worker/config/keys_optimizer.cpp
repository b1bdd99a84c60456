// Key table rows: [optimizer], [optimizer.adamw], [optimizer.muon], [optimizer.shampoo], [optimizer.soap].
#include <cmath>
#include <string>
#include <vector>

#include "kernels/newton_schulz.h"
#include "worker/config/key_rows.h"

namespace precon::worker::key_rows {

#define T(path) [](TrialConfig& c) { return FieldRef{&c.path}; }

void add_optimizer_rows(std::vector<Row>& k) {
  // [optimizer]
  k.push_back(trial("optimizer.name", "", "optimizer of the 2-D hidden matrices (the rest use AdamW)", T(optimizer.name))
                  .choices({"adamw", "muon", "shampoo", "soap"}).hashed());
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
  k.push_back(trial("optimizer.weight_decay_mode", "",
                    "decoupled: p·(1 − lr·wd) everywhere; cautious: only where the update and p have the same sign",
                    T(optimizer.weight_decay_mode))
                  .choices({"decoupled", "cautious"}));
  k.push_back(trial("optimizer.qk_clip_threshold", "", "QK-clip (MuonClip): rescale W_q, W_k of heads whose largest "
                    "attention logit passed it; 0 = off",
                    T(optimizer.qk_clip_threshold)).range(0, 1e9));
  k.push_back(trial("optimizer.qk_clip_alpha", "", "QK-clip: the query's share α of the rescaling (the key's 1 − α)",
                    T(optimizer.qk_clip_alpha)).range(0, 1));
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
                    const MuonConfig& m = c.optimizer.muon;
                    if (m.coefficients == "explicit" && m.coefficient_list.empty())
                      return std::string("\"explicit\" needs optimizer.muon.coefficient_list = [[a, b, c], ...]");
                    if (m.coefficients == "explicit") return std::string();
                    const int required = kernels::ns_required_steps(m.coefficients);
                    return required > 0 && m.ns_steps != required
                               ? m.coefficients + " is a fixed " + std::to_string(required) +
                                     "-step schedule: set optimizer.muon.ns_steps = " + std::to_string(required) +
                                     " (it is " + std::to_string(m.ns_steps) + ")"
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
  k.push_back(trial("optimizer.muon.split_heads", "",
                    "orthogonalise each attention head's block on its own (\"Muon split\"): q, k, v (gpt2's fused "
                    "c_attn per Q/K/V block), MLA's q_b (q_proj) and kv_b by the head's rows, o_proj (c_proj) by its "
                    "input columns; the scale then uses the block's shape",
                    T(optimizer.muon.split_heads))
                  .rule([](const TrialConfig& c) {
                    return c.optimizer.muon.split_heads && c.optimizer.muon.variant == "normuon"
                               ? std::string("optimizer.muon.split_heads is not supported with optimizer.muon.variant "
                                             "= \"normuon\" (its per-block rescaling assumes blocks of whole rows)")
                               : std::string();
                  }));
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
  // NorMuon
  k.push_back(trial("optimizer.muon.variant", "",
                    "muon; normuon: each row of the orthogonalised update divided by √v + eps, v its mean square's "
                    "EMA (beta2), then rescaled (rms-match: RMS 0.2; else to the update's norm before, then scale)",
                    T(optimizer.muon.variant))
                  .choices({"muon", "normuon"})
                  .rule([](const TrialConfig& c) {
                    return c.optimizer.muon.variant == "normuon" && c.optimizer.name != "muon"
                               ? "\"normuon\" is a Muon variant; optimizer.name is \"" + c.optimizer.name + "\""
                               : std::string();
                  }));
  auto normuon_only = [](const char* what, double MuonConfig::*field) {
    return [what, field](const TrialConfig& c) {
      const MuonConfig& m = c.optimizer.muon;
      return m.*field != MuonConfig{}.*field && (c.optimizer.name != "muon" || m.variant != "normuon")
                 ? std::string("only NorMuon reads ") + what + " (optimizer.name = \"muon\" with optimizer.muon.variant "
                   "= \"normuon\")"
                 : std::string();
    };
  };
  k.push_back(trial("optimizer.muon.beta2", "", "NorMuon: decay of the per-row second moment", T(optimizer.muon.beta2))
                  .range(0, 1)
                  .rule(normuon_only("optimizer.muon.beta2", &MuonConfig::beta2)));
  k.push_back(trial("optimizer.muon.eps", "", "NorMuon: added to √v", T(optimizer.muon.eps))
                  .range(0, 1)
                  .rule(normuon_only("optimizer.muon.eps", &MuonConfig::eps)));
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
  // [optimizer.soap]
  k.push_back(trial("optimizer.soap.beta1", "", "first moment (in the rotated basis)", T(optimizer.soap.beta1)).range(0, 1));
  k.push_back(trial("optimizer.soap.beta2", "", "second moment", T(optimizer.soap.beta2)).range(0, 1));
  k.push_back(trial("optimizer.soap.shampoo_beta", "", "EMA of the factors L = GGᵀ, R = GᵀG; -1 = beta2",
                    T(optimizer.soap.shampoo_beta))
                  .range(-1, 1)
                  .rule([](const TrialConfig& c) {
                    const double b = c.optimizer.soap.shampoo_beta;
                    return b < 0 && b != -1 ? std::string("must lie in [0, 1], or be -1 (= beta2)") : std::string();
                  }));
  k.push_back(trial("optimizer.soap.eps", "", "denominator epsilon", T(optimizer.soap.eps)).range(0, 1));
  k.push_back(trial("optimizer.soap.weight_decay", "", "decoupled weight decay of the SOAP matrices, after the update",
                    T(optimizer.soap.weight_decay)).range(0, 1e3));
  k.push_back(trial("optimizer.soap.precondition_frequency", "steps", "steps between eigenbasis refreshes",
                    T(optimizer.soap.precondition_frequency)).range(1, 1e9));
  k.push_back(trial("optimizer.soap.max_preconditioner_dim", "", "a side longer than this is not rotated",
                    T(optimizer.soap.max_preconditioner_dim)).range(1, 1 << 20).hashed());
  k.push_back(trial("optimizer.soap.normalize_grads", "", "divide each update by its RMS", T(optimizer.soap.normalize_grads)));
  k.push_back(trial("optimizer.soap.correct_bias", "", "Adam's bias corrections", T(optimizer.soap.correct_bias)));
}

#undef T

}  // namespace precon::worker::key_rows
