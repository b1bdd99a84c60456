// Multi-head latent attention (DeepSeek-V3's MLA, [model.mla] on the llama family) against a
// PyTorch implementation written from DeepSeek-V3's description (mla_reference.py): the parameter
// table (Hugging Face DeepseekV3's names, in its order), the logits, the loss and every gradient
// (relative error <= 1e-5 against fp64 torch), with a query latent and values wider than the query
// and key heads, and with a plain q_proj and values narrower; 12-step loss trajectories of Muon with
// and without split heads and of AdamW with QK-clip (the clip's per-step statistics too) on both;
// YaRN's logits and gradients with MLA and on grouped-query attention; and the key table's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/worker/support/golden_suite.h"
#include "tests/worker/support/optim_util.h"
#include "worker/ckpt/safetensors.h"
#include "worker/config/parse.h"
#include "worker/model/llama.h"
#include "worker/model/model_io.h"
#include "worker/model/params.h"
#include "worker/model/qk_clip.h"

namespace precon::worker {
namespace {

// The reference is fp64 arithmetic on the fp32 weights: what is left is the C++ model's fp32
// rounding (measured: <= 1e-6 relative), 1e-5 leaves room for another summation order.
constexpr double kMlaTensorTolerance = 1e-5;
// The trajectories are fp32 on both sides, as in test_llama.cpp (whose tolerance this is); what they
// must catch moves the loss by more: the whole-matrix Muon step against the split one by 1 % to 10 %
// within 12 steps, the clip's choices per head likewise.
constexpr double kMlaLossTolerance = 2e-3;

struct MlaGolden {
  static constexpr const char* kScript = "mla_reference.py";
  static constexpr const char* kName = "precon_mla_ref";
};

class MlaReference : public testing::GoldenSuite<MlaGolden> {
 protected:
  static ModelConfig variant_config(const std::string& v) {
    std::ifstream in(*dir_ / v / "config.json");
    return testing::llama_config_from_json(nlohmann::json::parse(in));
  }

  void check_variant(const std::string& v, bool mla = true) {
    const ModelConfig cfg = variant_config(v);
    ASSERT_EQ(cfg.uses_mla(), mla);
    // The table: DeepseekV3's names and shapes in the reference's (registration) order.
    const std::vector<ParamSpec> table = llama_param_table(cfg);
    SafetensorsFile file = SafetensorsFile::open(*dir_ / v / "model.safetensors");
    ASSERT_EQ(table.size(), file.tensors().size());
    for (size_t i = 0; i < table.size(); ++i) {
      EXPECT_EQ(table[i].name, file.tensors()[i].name) << v << " row " << i;
      EXPECT_EQ(table[i].shape, file.tensors()[i].shape) << table[i].name;
    }

    Llama model(cfg, batch_size(), kernels::Device::cpu);
    load_model_safetensors(model.params(), *dir_ / v / "model.safetensors");
    const auto tokens = ints(v + "/tokens.npy"), targets = ints(v + "/targets.npy");
    const double ref_loss = values(v + "/loss.npy")[0];
    const double loss = model.forward(tokens, targets, false);
    EXPECT_NEAR(loss, ref_loss, kMlaTensorTolerance * std::fabs(ref_loss)) << v;
    const double logits_err = rel_error(model.logits_host(), floats(v + "/logits.npy"));
    EXPECT_LT(logits_err, kMlaTensorTolerance) << v << " logits";

    model.params().zero_grads();
    EXPECT_NEAR(model.forward(tokens, targets, true), ref_loss, kMlaTensorTolerance * std::fabs(ref_loss)) << v;
    model.backward();
    const ParamStore& p = model.params();
    double worst = logits_err;
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string& name = p.spec(i).name;
      const double err = rel_error(testing::host_visible(p, i, true), floats(v + "/grad." + name + ".npy"));
      worst = std::max(worst, err);
      EXPECT_LT(err, kMlaTensorTolerance) << v << " " << name << ": max |ours - torch| / max |torch| = " << err;
    }
    std::printf("[ mla %s ] loss %.6f (torch %.6f), worst relative error of logits and gradients %.2g\n", v.c_str(),
                loss, ref_loss, worst);
  }

  static nlohmann::json cases(const std::string& v) {
    std::ifstream in(*dir_ / v / "cases.json");
    return nlohmann::json::parse(in);
  }

  // Trains variant v from the reference's weights on its 12 batches with the optimizer `config`
  // (QK-clip after each step at `tau` > 0, its statistics into `stats`); the losses per step.
  std::vector<double> train(const std::string& v, const nlohmann::json& config, double tau = 0, double alpha = 0,
                            std::vector<QkClipStats>* stats = nullptr) {
    const ModelConfig cfg = variant_config(v);
    Llama model(cfg, batch_size(), kernels::Device::cpu);
    ParamStore& p = model.params();
    load_model_safetensors(p, *dir_ / v / "model.safetensors");
    if (tau > 0) model.track_attention_logits();
    auto opt = make_optimizer(testing::config_from_json(config), testing::optim_params(p), kernels::Device::cpu);
    std::vector<double> losses;
    const int steps = cases(v).at("steps");
    for (int t = 1; t <= steps; ++t) {
      p.zero_grads();
      const std::string at = std::to_string(t - 1) + ".npy";
      losses.push_back(model.forward(ints(v + "/traj_tokens_" + at), ints(v + "/traj_targets_" + at), true));
      model.backward();
      StepContext ctx;
      ctx.step = t;
      opt->step(ctx);
      if (tau > 0) {
        std::vector<float>& logits = model.attention_logit_max();
        stats->push_back(qk_clip(p, cfg, logits, tau, alpha));
        std::fill(logits.begin(), logits.end(), -INFINITY);
      }
    }
    return losses;
  }

  // The largest relative difference of two loss trajectories (of equal length).
  static double worst_relative(const std::vector<double>& ours, const std::vector<double>& ref) {
    double worst = ours.size() == ref.size() ? 0 : INFINITY;
    for (size_t t = 0; t < ours.size() && t < ref.size(); ++t)
      worst = std::max(worst, std::fabs(ours[t] - ref[t]) / std::fabs(ref[t]));
    return worst;
  }

  void check_muon(const std::string& v, const std::string& name) {
    const nlohmann::json* c = nullptr;
    const nlohmann::json all = cases(v);
    for (const auto& k : all.at("cases"))
      if (k.at("name") == name) c = &k;
    ASSERT_NE(c, nullptr) << "no case " << name;
    const std::vector<double> ref = values(v + "/traj_losses." + name + ".npy");
    const std::vector<double> ours = train(v, c->at("config"));
    const double worst = worst_relative(ours, ref);
    EXPECT_LT(worst, kMlaLossTolerance) << v << " " << name;
    EXPECT_LT(ref.back(), 0.8 * ref.front()) << v << " " << name << ": the reference loss did not fall";
    std::printf("[ mla %s %s ] loss %.4f -> %.4f (torch %.4f -> %.4f), max relative difference %.2g\n", v.c_str(),
                name.c_str(), ours.front(), ours.back(), ref.front(), ref.back(), worst);
  }

  // AdamW with QK-clip: per step the loss, the largest logit before the clip and the heads clipped,
  // against the reference's clip written from MuonClip's rule for MLA (q_nope by γ^α, q_rope by γ,
  // k_nope by γ^(1−α), the shared rotary key untouched).
  void check_qk_clip(const std::string& v) {
    const nlohmann::json qk = cases(v).at("qk_clip");
    const double tau = qk.at("tau"), alpha = qk.at("alpha");
    const std::vector<double> ref_loss = values(v + "/traj_losses.qk_clip.npy");
    const std::vector<double> ref_max = values(v + "/traj_max_logit.qk_clip.npy");
    const std::vector<double> ref_clipped = values(v + "/traj_clipped.qk_clip.npy");
    const std::vector<double> ref_layer_max = values(v + "/traj_layer_max_logit.qk_clip.npy");  // [step][layer]
    std::vector<QkClipStats> stats;
    const std::vector<double> losses = train(v, qk.at("config"), tau, alpha, &stats);
    ASSERT_EQ(stats.size(), ref_max.size());
    std::vector<double> max_logit;
    int64_t clipped = 0;
    double worst_layer = 0;
    for (size_t t = 0; t < stats.size(); ++t) {
      max_logit.push_back(stats[t].max_logit);
      const size_t L = stats[t].layer_max_logit.size();
      ASSERT_EQ(L * stats.size(), ref_layer_max.size()) << v;
      for (size_t l = 0; l < L; ++l) {
        const double want = ref_layer_max[t * L + l];
        worst_layer = std::max(worst_layer, std::fabs(stats[t].layer_max_logit[l] - want) / std::fabs(want));
      }
      EXPECT_EQ(stats[t].clipped, static_cast<int64_t>(ref_clipped[t])) << v << " step " << t + 1;
      clipped += stats[t].clipped;
    }
    const double worst_loss = worst_relative(losses, ref_loss), worst_logit = worst_relative(max_logit, ref_max);
    EXPECT_LT(worst_loss, kMlaLossTolerance) << v;
    EXPECT_LT(worst_logit, kMlaLossTolerance) << v;
    EXPECT_LT(worst_layer, kMlaLossTolerance) << v << ": a layer's largest logit";
    EXPECT_GE(clipped, 5) << v << ": the threshold did not bite";
    std::printf("[ mla %s qk_clip ] tau %.2f: max logit %.3f -> %.3f (torch %.3f -> %.3f), %lld heads clipped over "
                "%zu steps, max relative difference: loss %.2g, logit %.2g\n",
                v.c_str(), tau, max_logit.front(), max_logit.back(), ref_max.front(), ref_max.back(),
                static_cast<long long>(clipped), losses.size(), worst_loss, worst_logit);
  }
};

TEST_F(MlaReference, WithAQueryLatentLogitsLossAndEveryGradient) { check_variant("q_lora"); }

TEST_F(MlaReference, WithAPlainQueryProjectionLogitsLossAndEveryGradient) { check_variant("plain"); }

// YaRN (model.rope_scaling, DeepSeek-V3's): the rope part's frequencies blended over the pairs, cos
// and sin times the attention factor, the softmax scale times mscale²; and the same frequencies on
// the plain grouped-query path, which shares the rotary kernel.
TEST_F(MlaReference, WithYarnLogitsLossAndEveryGradient) { check_variant("yarn"); }

TEST_F(MlaReference, YarnOnGroupedQueryAttentionLogitsLossAndEveryGradient) { check_variant("yarn_gqa", false); }

TEST_F(MlaReference, MuonLossTrajectories) {
  for (const char* v : {"q_lora", "plain"}) check_muon(v, "muon");
}

// Muon split (optimizer.muon.split_heads): q_b_proj's (q_proj's) and kv_b_proj's rows and o_proj's
// input columns of each head orthogonalised and scaled on their own, the latent projections whole.
TEST_F(MlaReference, MuonSplitHeadsLossTrajectories) {
  for (const char* v : {"q_lora", "plain"}) check_muon(v, "muon_split_heads");
}

TEST_F(MlaReference, QkClipTrajectoryWithAQueryLatent) { check_qk_clip("q_lora"); }

TEST_F(MlaReference, QkClipTrajectoryWithAPlainQueryProjection) { check_qk_clip("plain"); }

// The key table refuses what MLA cannot compute, naming the key.
TEST(MlaKeys, BadSettingsAreRefusedNamingTheKey) {
  // The model table's extra lines, then [model.mla]'s.
  auto error_of = [](const std::string& model, const std::string& mla) {
    const std::string text = "[model]\narch = \"llama\"\nn_layer = 2\nd_model = 32\nn_head = 4\nseq_len = 8\n"
                             "vocab_size = 50\n" + model + "[model.mla]\n" + mla;
    try {
      parse_config_text(text, "recipe.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of("", "kv_lora_rank = 16\n"), "");
  const std::string odd = error_of("", "kv_lora_rank = 16\nqk_rope_head_dim = 5\n");
  EXPECT_NE(odd.find("qk_rope_head_dim"), std::string::npos) << odd;
  const std::string wide = error_of("", "kv_lora_rank = 33\n");
  EXPECT_NE(wide.find("kv_lora_rank"), std::string::npos) << wide;
  EXPECT_NE(wide.find("d_model"), std::string::npos) << wide;
  const std::string gqa = error_of("n_kv_head = 2\n", "kv_lora_rank = 16\n");
  EXPECT_NE(gqa.find("n_kv_head"), std::string::npos) << gqa;
}

}  // namespace
}  // namespace precon::worker
