// The Llama model against a PyTorch implementation of Hugging Face's LlamaForCausalLM
// (llama_reference.py): the parameter table, logits, loss and every gradient (relative error
// <= 1e-5 against fp64 torch), a 12-step loss trajectory under each of AdamW, Muon (also split by
// heads) and Shampoo
// (precon's optimizers, routed as in training, against optim_reference.py's) and under AdamW with
// QK-clip (the clip's per-step statistics too), and the loader's
// refusal, naming the tensor, of a checkpoint that is not this model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/common/npy.h"
#include "tests/common/temp_dir.h"
#include "tests/worker/support/golden_suite.h"
#include "tests/worker/support/optim_util.h"
#include "worker/ckpt/safetensors.h"
#include "worker/common/file_io.h"
#include "worker/model/llama.h"
#include "worker/model/model_io.h"
#include "worker/model/params.h"
#include "worker/model/qk_clip.h"

namespace precon::worker {
namespace {

// Tolerances. The reference tensors are fp64 arithmetic on the fp32 weights; torch's own fp32
// forward and backward differ from them by <= 6.2e-7 relative (logits 3.4e-7), so 1e-5 leaves
// ~15x for a different summation order. The trajectories are fp32 on both sides: in the reference
// a 1e-6 relative change of the weights moves no loss by more than 1.3e-6, while routing or
// configuration errors move them by far more than 2e-3 (Muon on the Conv1D layout 1.2e-2,
// Nesterov off 3.6e-2, the AdamW-routed lr doubled 0.12, Shampoo refreshing every 2nd step 7e-2).
// Smaller differences, such as weight decay left out (1e-3), are the optimizer tests' to catch.
constexpr double kTensorTolerance = 1e-5;
constexpr double kTrajectoryTolerance = 2e-3;

struct LlamaGolden {
  static constexpr const char* kScript = "llama_reference.py";
  static constexpr const char* kName = "precon_llama_ref";
};

class LlamaReference : public testing::GoldenSuite<LlamaGolden> {
 protected:
  static ModelConfig model_config() { return testing::llama_config_from_json(*cfg_); }
  // The ModelIoError's message from loading `file` into a fresh Llama ("" if it loaded).
  static std::string load_error(const fs::path& file) {
    Llama model(model_config(), 1, kernels::Device::cpu);
    try {
      load_model_safetensors(model.params(), file);
    } catch (const ModelIoError& e) {
      return e.what();
    }
    return "";
  }
  // The reference's model.safetensors rewritten with `edit` applied to its entries (in file order).
  template <typename Edit>
  static fs::path rewritten(const fs::path& dir, const std::string& file_name, Edit edit) {
    SafetensorsFile ref = SafetensorsFile::open(*dir_ / "model.safetensors");
    std::vector<SafetensorsEntry> entries;
    for (const SafetensorsTensor& t : ref.tensors()) entries.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
    edit(entries);
    const fs::path out = dir / file_name;
    write_safetensors(out, entries, {{"format", "pt"}});
    return out;
  }

  // Runs one case of cases.json through precon's optimizer on the C++ model, step by step from
  // the reference's weights and batches, and compares each step's loss with torch's.
  void check_trajectory(const std::string& name) {
    std::ifstream in(*dir_ / "cases.json");
    const nlohmann::json all = nlohmann::json::parse(in);
    const nlohmann::json* c = nullptr;
    for (const auto& k : all.at("cases")) {
      if (k.at("name") == name) c = &k;
    }
    ASSERT_NE(c, nullptr) << "no case " << name << " in cases.json";
    const int steps = all.at("steps");
    const std::vector<double> ref = test::read_npy((*dir_ / ("traj_losses." + name + ".npy")).string()).values;
    ASSERT_EQ(ref.size(), static_cast<size_t>(steps));

    Llama model(model_config(), batch_size(), kernels::Device::cpu);
    ParamStore& p = model.params();
    load_model_safetensors(p, *dir_ / "model.safetensors");
    auto opt = make_optimizer(testing::config_from_json(c->at("config")), testing::optim_params(p),
                              kernels::Device::cpu);
    std::vector<double> ours;
    double worst = 0;
    for (int t = 1; t <= steps; ++t) {
      p.zero_grads();
      const double loss = model.forward(ints("traj_tokens_" + std::to_string(t - 1) + ".npy"),
                                        ints("traj_targets_" + std::to_string(t - 1) + ".npy"), true);
      model.backward();
      StepContext ctx;
      ctx.step = t;
      ctx.lr_scale = 1.0;
      ctx.grad_scale = 1.0f;
      opt->step(ctx);
      ours.push_back(loss);
      const double err = std::fabs(loss - ref[t - 1]) / std::fabs(ref[t - 1]);
      worst = std::max(worst, err);
      EXPECT_LT(err, kTrajectoryTolerance) << name << " step " << t << ": loss " << loss << ", torch " << ref[t - 1];
    }
    // The reference learned (the batches follow a bigram law), so a no-op optimizer cannot pass.
    EXPECT_LT(ref.back(), 0.8 * ref.front()) << name << ": the reference loss did not fall";
    std::printf("[ %s ] loss %.4f -> %.4f (torch %.4f -> %.4f), max relative difference %.2g; %s\n", name.c_str(),
                ours.front(), ours.back(), ref.front(), ref.back(), worst, opt->routing_summary().c_str());
  }
};


// HF's names and shapes in the reference's order (its writer keeps table order), and the kinds
// that route the optimizers: Linear weights are matrices stored (out, in), not Conv1D.
TEST_F(LlamaReference, ParameterTableIsHfsInOrder) {
  const std::vector<ParamSpec> table = llama_param_table(model_config());
  SafetensorsFile file = SafetensorsFile::open(*dir_ / "model.safetensors");
  ASSERT_EQ(table.size(), file.tensors().size());
  for (size_t i = 0; i < table.size(); ++i) {
    const ParamSpec& s = table[i];
    EXPECT_EQ(s.name, file.tensors()[i].name) << "row " << i;
    EXPECT_EQ(s.shape, file.tensors()[i].shape) << s.name;
    const bool norm = s.name.ends_with("layernorm.weight") || s.name == "model.norm.weight";
    const bool embedding = s.name == "model.embed_tokens.weight" || s.name == "lm_head.weight";
    const ParamKind kind = norm ? ParamKind::norm : embedding ? ParamKind::embedding : ParamKind::matrix;
    EXPECT_STREQ(param_kind_name(s.kind), param_kind_name(kind)) << s.name;
    if (kind == ParamKind::matrix && s.shape.size() == 2) {
      EXPECT_FALSE(s.stored_in_out) << s.name << " is a Linear: stored (out, in)";
      EXPECT_EQ(s.fan_out, s.shape[0]) << s.name;
      EXPECT_EQ(s.fan_in, s.shape[1]) << s.name;
      EXPECT_EQ(s.qkv_blocks, 1) << s.name;
    }
  }
}

TEST_F(LlamaReference, LogitsLossAndEveryGradient) {
  Llama model(model_config(), batch_size(), kernels::Device::cpu);
  load_model_safetensors(model.params(), *dir_ / "model.safetensors");
  const auto tokens = ints("tokens.npy"), targets = ints("targets.npy");
  const double ref_loss = test::read_npy((*dir_ / "loss.npy").string()).values[0];

  const double loss = model.forward(tokens, targets, false);
  EXPECT_NEAR(loss, ref_loss, kTensorTolerance * std::fabs(ref_loss));
  const double logits_err = rel_error(model.logits_host(), floats("logits.npy"));
  EXPECT_LT(logits_err, kTensorTolerance) << "logits: max |ours - torch| / max |torch| = " << logits_err;

  model.params().zero_grads();
  EXPECT_NEAR(model.forward(tokens, targets, true), ref_loss, kTensorTolerance * std::fabs(ref_loss));
  model.backward();
  const ParamStore& p = model.params();
  double worst = logits_err;
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string& name = p.spec(i).name;
    // The visible rows only: embed_tokens and lm_head keep padded vocabulary rows in storage.
    const double err = rel_error(testing::host_visible(p, i, true), floats("grad." + name + ".npy"));
    worst = std::max(worst, err);
    EXPECT_LT(err, kTensorTolerance) << name << ": max |ours - torch| / max |torch| = " << err;
  }
  std::printf("[ llama ] loss %.6f (torch %.6f), worst relative error of logits and gradients %.2g\n", loss, ref_loss,
              worst);
}

TEST_F(LlamaReference, AdamWLossTrajectory) { check_trajectory("adamw"); }

TEST_F(LlamaReference, MuonLossTrajectory) { check_trajectory("muon"); }

// Muon split (optimizer.muon.split_heads): q_proj's 4 query heads, k_proj's and v_proj's 2 kv heads
// (rows) and o_proj's 4 input heads (columns) orthogonalised and scaled each on its own; the
// whole-matrix trajectory parts from this one by 2 % at step 2 and 9.6 % at step 11.
TEST_F(LlamaReference, MuonSplitHeadsLossTrajectory) { check_trajectory("muon_split_heads"); }

TEST_F(LlamaReference, ShampooLossTrajectory) { check_trajectory("shampoo"); }

// QK-clip (MuonClip's clip) after each AdamW step, at a threshold the unclipped run's largest
// logit passes from step 5 on (1.3 at the start, 6.3 at step 12 without the clip): per step the
// loss, the largest logit before the clip and the kv groups rescaled, against the reference's
// clip written from the description (per kv group, gamma = tau / its largest logit).
TEST_F(LlamaReference, QkClipTrajectory) {
  std::ifstream in(*dir_ / "cases.json");
  const nlohmann::json qk = nlohmann::json::parse(in).at("qk_clip");
  const double tau = qk.at("tau"), alpha = qk.at("alpha");
  const auto ref_loss = test::read_npy((*dir_ / "traj_losses.qk_clip.npy").string()).values;
  const auto ref_max = test::read_npy((*dir_ / "traj_max_logit.qk_clip.npy").string()).values;
  const auto ref_clipped = test::read_npy((*dir_ / "traj_clipped.qk_clip.npy").string()).values;
  // Runs the case with the clip at `threshold` (0: the model does not even track the logits).
  // units: each step's largest logit per layer and kv group (before the clip), when given.
  auto run = [&](double threshold, std::vector<QkClipStats>* stats, std::vector<std::vector<float>>* units = nullptr) {
    Llama model(model_config(), batch_size(), kernels::Device::cpu);
    ParamStore& p = model.params();
    load_model_safetensors(p, *dir_ / "model.safetensors");
    if (threshold > 0) model.track_attention_logits();
    auto opt = make_optimizer(testing::config_from_json(qk.at("config")), testing::optim_params(p), kernels::Device::cpu);
    std::vector<double> losses;
    for (int t = 1; t <= static_cast<int>(ref_loss.size()); ++t) {
      p.zero_grads();
      losses.push_back(model.forward(ints("traj_tokens_" + std::to_string(t - 1) + ".npy"),
                                     ints("traj_targets_" + std::to_string(t - 1) + ".npy"), true));
      model.backward();
      StepContext ctx;
      ctx.step = t;
      opt->step(ctx);
      if (threshold > 0) {
        std::vector<float>& logits = model.attention_logit_max();
        if (units) units->push_back(logits);
        stats->push_back(qk_clip(p, model_config(), logits, threshold, alpha));
        std::fill(logits.begin(), logits.end(), -INFINITY);
      }
    }
    return losses;
  };
  std::vector<QkClipStats> stats;
  std::vector<std::vector<float>> clipped_units;
  const std::vector<double> losses = run(tau, &stats, &clipped_units);
  double worst_loss = 0, worst_logit = 0;
  int64_t clipped = 0;
  for (size_t t = 0; t < losses.size(); ++t) {
    worst_loss = std::max(worst_loss, std::fabs(losses[t] - ref_loss[t]) / ref_loss[t]);
    worst_logit = std::max(worst_logit, std::fabs(stats[t].max_logit - ref_max[t]) / ref_max[t]);
    EXPECT_EQ(stats[t].clipped, static_cast<int64_t>(ref_clipped[t])) << "step " << t + 1;
    clipped += stats[t].clipped;
  }
  EXPECT_LT(worst_loss, kTrajectoryTolerance);
  EXPECT_LT(worst_logit, kTrajectoryTolerance);
  EXPECT_GE(clipped, 5) << "the threshold did not bite";
  std::printf("[ qk_clip ] tau %.2f: max logit %.3f -> %.3f (torch %.3f -> %.3f), %lld groups clipped over %zu steps, "
              "max relative difference: loss %.2g, logit %.2g\n",
              tau, stats.front().max_logit, stats.back().max_logit, ref_max.front(), ref_max.back(),
              static_cast<long long>(clipped), losses.size(), worst_loss, worst_logit);
  // A threshold no logit reaches changes nothing: bitwise the run without QK-clip.
  std::vector<QkClipStats> none;
  std::vector<std::vector<float>> free_units;
  EXPECT_EQ(run(1e9, &none, &free_units), run(0, nullptr));
  for (const QkClipStats& s : none) EXPECT_EQ(s.clipped, 0);
  // After a clip every unit ends the step at or under τ, so the next forward's logits exceed τ by
  // at most one step's drift (the update after the logits were taken, and a new batch): the
  // largest relative growth from one step to the next, in the unclipped run, of a unit's logit that
  // was at τ/2 or more (smaller ones are not where the bound bites, and grow by larger ratios).
  double drift = 0;
  for (size_t t = 1; t < free_units.size(); ++t)
    for (size_t u = 0; u < free_units[t].size(); ++u)
      if (free_units[t - 1][u] >= 0.5 * tau)
        drift = std::max(drift, double(free_units[t][u]) / free_units[t - 1][u] - 1.0);
  bool after_clip = false;
  double worst_excess = 0;
  for (size_t t = 0; t < clipped_units.size(); ++t) {
    if (after_clip) {
      for (float s : clipped_units[t]) {
        worst_excess = std::max(worst_excess, double(s) / tau - 1.0);
        EXPECT_LE(s, tau * (1.0 + drift)) << "step " << t + 1 << ": a unit passed τ by more than one step's drift";
      }
    }
    after_clip = after_clip || stats[t].clipped > 0;
  }
  EXPECT_GT(drift, 0.0);
  std::printf("[ qk_clip ] after the first clip no unit passed tau by more than %.3g (one step's drift: %.3g)\n",
              worst_excess, drift);
}

// A GPT-2 checkpoint of the same width and depth, written by precon's own writer: the error names
// the file and a tensor (the first Llama one it lacks, or a GPT-2 one the Llama does not know).
TEST_F(LlamaReference, AGpt2CheckpointIsRefusedWithTheTensorName) {
  test::TempDir tmp;
  ModelConfig gpt;
  gpt.arch = "gpt2";
  gpt.n_layer = (*cfg_).at("n_layer");
  gpt.n_head = (*cfg_).at("n_head");
  gpt.d_model = (*cfg_).at("d_model");
  gpt.seq_len = (*cfg_).at("seq_len");
  gpt.vocab_size = (*cfg_).at("vocab_size");
  const std::vector<ParamSpec> gpt_table = gpt2_param_table(gpt);
  ParamStore gpt_store(gpt_table, kernels::Device::cpu);
  const fs::path file = tmp.path / "gpt2.safetensors";
  write_file_atomic(file, model_safetensors_bytes(gpt_store, gpt));

  const std::string msg = load_error(file);
  ASSERT_FALSE(msg.empty()) << "a GPT-2 checkpoint loaded into a Llama";
  EXPECT_NE(msg.find(file.filename().string()), std::string::npos) << msg;
  bool named = false;
  for (const ParamSpec& s : llama_param_table(model_config())) named = named || msg.find(s.name) != std::string::npos;
  for (const ParamSpec& s : gpt_table) named = named || msg.find(s.name) != std::string::npos;
  EXPECT_TRUE(named) << "the error names no tensor: " << msg;
}

TEST_F(LlamaReference, AMissingOrMisshapedTensorIsNamed) {
  test::TempDir tmp;
  {
    SCOPED_TRACE("a tensor left out");
    const std::string gone = "model.layers.1.mlp.up_proj.weight";
    const fs::path file = rewritten(tmp.path, "missing.safetensors", [&](std::vector<SafetensorsEntry>& e) {
      e.erase(std::remove_if(e.begin(), e.end(), [&](const SafetensorsEntry& x) { return x.name == gone; }), e.end());
    });
    const std::string msg = load_error(file);
    EXPECT_NE(msg.find(gone), std::string::npos) << (msg.empty() ? "it loaded" : msg);
  }
  {
    SCOPED_TRACE("a tensor stored (in, out), as Conv1D would");
    const std::string bad = "model.layers.1.self_attn.v_proj.weight";
    const fs::path file = rewritten(tmp.path, "transposed.safetensors", [&](std::vector<SafetensorsEntry>& e) {
      for (SafetensorsEntry& x : e) {
        if (x.name == bad) std::swap(x.shape[0], x.shape[1]);
      }
    });
    const std::string msg = load_error(file);
    EXPECT_NE(msg.find(bad), std::string::npos) << (msg.empty() ? "it loaded" : msg);
  }
  {
    SCOPED_TRACE("a Llama without grouped-query attention (n_kv_head = n_head)");
    ModelConfig mha = model_config();
    mha.n_kv_head = mha.n_head;
    ParamStore store(llama_param_table(mha), kernels::Device::cpu);
    const fs::path file = tmp.path / "mha.safetensors";
    write_file_atomic(file, model_safetensors_bytes(store, mha));
    const std::string msg = load_error(file);
    EXPECT_NE(msg.find("model.layers.0.self_attn.k_proj.weight"), std::string::npos)
        << (msg.empty() ? "it loaded" : msg);
  }
}

}  // namespace
}  // namespace precon::worker
