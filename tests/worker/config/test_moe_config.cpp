// [model.moe]'s keys: defaults, the parameter table's Qwen-MoE rows (dense leading layers, the
// shared expert, the router's kind), the FLOPs of the active parameters only, the checkpoint's
// config.json, every bad combination refused at parse time with the key that is wrong, and the
// memory estimate's share of the routed experts under expert parallelism.
#include <gtest/gtest.h>

#include <string>

#include "worker/config/parse.h"
#include "worker/model/memory_estimate.h"
#include "worker/model/model.h"
#include "worker/model/model_io.h"
#include "worker/model/params.h"

namespace precon::worker {
namespace {

std::string moe_parse_error(const std::string& text) {
  try {
    parse_config_text(text, "recipe.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const std::string kMoeLlama =
    "[model]\narch = \"llama\"\nn_layer = 3\nd_model = 32\nn_head = 4\nffn_hidden = 64\nseq_len = 8\nvocab_size = 50\n";

TEST(MoeConfig, DefaultsAndTheTable) {
  const ModelConfig m =
      parse_config_text(kMoeLlama + "[model.moe]\nexperts = 4\nshared_experts = 1\nfirst_dense_layers = 1\n", "r.toml")
          .config.model;
  EXPECT_EQ(m.moe.experts, 4);
  EXPECT_EQ(m.moe.top_k, 2);                // Megatron's default
  EXPECT_EQ(m.expert_ffn(), 64);            // the dense MLP's width unless given
  EXPECT_DOUBLE_EQ(m.moe.aux_loss_coeff, 1e-2);
  EXPECT_FALSE(m.moe_layer(0));
  EXPECT_TRUE(m.moe_layer(1));
  EXPECT_TRUE(m.moe_layer(2));

  const std::vector<ParamSpec> t = llama_param_table(m);
  auto has = [&](const std::string& name) {
    for (const ParamSpec& s : t)
      if (s.name == name) return true;
    return false;
  };
  // Layer 0 stays dense; layers 1 and 2 have a router, 4 experts and a shared expert.
  EXPECT_TRUE(has("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_FALSE(has("model.layers.0.mlp.gate.weight"));
  EXPECT_FALSE(has("model.layers.1.mlp.gate_proj.weight"));
  for (const std::string l : {"1", "2"}) {
    EXPECT_TRUE(has("model.layers." + l + ".mlp.gate.weight"));
    EXPECT_TRUE(has("model.layers." + l + ".mlp.experts.3.down_proj.weight"));
    EXPECT_FALSE(has("model.layers." + l + ".mlp.experts.4.down_proj.weight"));
    EXPECT_TRUE(has("model.layers." + l + ".mlp.shared_expert.up_proj.weight"));
  }
  for (const ParamSpec& s : t) {
    if (s.name.ends_with(".mlp.gate.weight")) {
      EXPECT_EQ(s.kind, ParamKind::router) << s.name;  // AdamW's, not Muon's
      EXPECT_EQ(s.shape, (std::vector<int64_t>{4, 32})) << s.name;
      EXPECT_EQ(s.tp_split_dim, -1) << s.name;  // replicated
    }
    if (s.name.find(".experts.") != std::string::npos) {
      EXPECT_EQ(s.kind, ParamKind::matrix) << s.name;  // each expert matrix is its own matrix
      const bool down = s.name.ends_with("down_proj.weight");
      EXPECT_EQ(s.shape, down ? (std::vector<int64_t>{32, 64}) : (std::vector<int64_t>{64, 32})) << s.name;
      EXPECT_EQ(s.tp_split_dim, down ? 1 : 0) << s.name;
    }
  }
}

// 6 FLOPs per active weight: each MoE layer's router, shared expert and top_k of its experts.
TEST(MoeConfig, FlopsCountTheActiveExpertsOnly) {
  ModelConfig m = parse_config_text(kMoeLlama + "[model.moe]\nexperts = 8\ntop_k = 2\nffn_hidden = 16\n"
                                                "shared_experts = 1\n",
                                    "r.toml")
                      .config.model;
  auto model = make_model(m, 1, kernels::Device::cpu);
  const double C = 32, V = 50, T = 8, L = 3, q = 32, kv = 32, Fe = 16;
  const double attention = C * q + 2 * C * kv + q * C;
  const double per_layer = attention + 8 * C /*router*/ + 3 * C * Fe /*shared*/ + 2.0 / 8.0 * 8 * 3 * C * Fe;
  const double want = 6 * (L * per_layer + V * C /*lm_head*/) + 12 * L * C * T;
  EXPECT_DOUBLE_EQ(model->flops_per_token(), want);
  // As many active FLOPs as a dense llama whose MLP is top_k + shared experts wide, plus the router.
  ModelConfig dense = m;
  dense.moe.experts = 0;
  dense.ffn_hidden = 3 * 16;
  EXPECT_DOUBLE_EQ(make_model(dense, 1, kernels::Device::cpu)->flops_per_token() + 6 * L * 8 * C, want);
}

TEST(MoeConfig, TheCheckpointSaysItIsAQwenMoe) {
  const ModelConfig m =
      parse_config_text(kMoeLlama + "[model.moe]\nexperts = 4\ntop_k = 1\nfirst_dense_layers = 2\n", "r.toml")
          .config.model;
  const nlohmann::json j = hf_config_json(m);
  EXPECT_EQ(j.at("model_type"), "qwen3_moe");
  EXPECT_EQ(j.at("num_experts"), 4);
  EXPECT_EQ(j.at("num_experts_per_tok"), 1);
  EXPECT_EQ(j.at("moe_intermediate_size"), 64);
  EXPECT_EQ(j.at("norm_topk_prob"), true);
  EXPECT_EQ(j.at("mlp_only_layers"), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(j.at("shared_expert_intermediate_size"), 0);
}

TEST(MoeConfig, BadCombinationsAreRefusedWithTheKey) {
  std::string e = moe_parse_error(kMoeLlama + "[model.moe]\nexperts = 4\ntop_k = 5\n");
  EXPECT_NE(e.find("model.moe.top_k"), std::string::npos) << e;
  EXPECT_NE(e.find("more than model.moe.experts = 4"), std::string::npos) << e;
  e = moe_parse_error("[model]\nn_layer = 2\nd_model = 32\nn_head = 4\n[model.moe]\nexperts = 4\n");
  EXPECT_NE(e.find("model.moe.experts"), std::string::npos) << e;
  EXPECT_NE(e.find("needs model.arch = \"llama\""), std::string::npos) << e;
  e = moe_parse_error(kMoeLlama + "[model.moe]\nexperts = 4\nfirst_dense_layers = 3\n");
  EXPECT_NE(e.find("leaves no mixture-of-experts layer"), std::string::npos) << e;
  e = moe_parse_error(kMoeLlama + "[model.moe]\nexperts = 4\nffn_hidden = 30\n[parallel]\ntensor = 4\n");
  EXPECT_NE(e.find("parallel.tensor"), std::string::npos) << e;
  EXPECT_NE(e.find("model.moe.ffn_hidden = 30"), std::string::npos) << e;
  e = moe_parse_error(kMoeLlama + "[model.moe]\nexperts = 4\nrouter_dtype = \"bf16\"\n");
  EXPECT_NE(e.find("model.moe.router_dtype"), std::string::npos) << e;
  e = moe_parse_error(kMoeLlama + "[model.moe]\nexperts = 4\ncapacity_factor = 1.25\n");
  EXPECT_NE(e.find("model.moe.capacity_factor"), std::string::npos) << e;
  EXPECT_EQ(moe_parse_error(kMoeLlama + "[model.moe]\nexperts = 4\nffn_hidden = 32\n[parallel]\ntensor = 4\n"), "");
}

TEST(MoeConfig, ExpertParallelLayoutsThatDoNotFitAreRefusedWithTheKey) {
  std::string e = moe_parse_error(kMoeLlama + "[model.moe]\nexperts = 6\n[parallel]\ndata = 4\nexpert = 4\n");
  EXPECT_NE(e.find("parallel.expert"), std::string::npos) << e;
  EXPECT_NE(e.find("do not divide model.moe.experts = 6"), std::string::npos) << e;
  e = moe_parse_error(kMoeLlama + "[model.moe]\nexperts = 4\n[parallel]\ndata = 3\nexpert = 2\n");
  EXPECT_NE(e.find("parallel.expert"), std::string::npos) << e;
  EXPECT_NE(e.find("must divide parallel.data = 3"), std::string::npos) << e;
  e = moe_parse_error(kMoeLlama + "[parallel]\ndata = 2\nexpert = 2\n");
  EXPECT_NE(e.find("needs a mixture of experts"), std::string::npos) << e;
  e = moe_parse_error(kMoeLlama + "[model.moe]\nexperts = 4\n[train]\ndevice = \"cuda\"\n[parallel]\ndata = 2\nexpert = 2\n");
  EXPECT_NE(e.find("expert parallelism runs on the CPU"), std::string::npos) << e;
  EXPECT_EQ(moe_parse_error(kMoeLlama + "[model.moe]\nexperts = 4\n[parallel]\ndata = 4\nexpert = 2\n"), "");
}

TEST(MoeConfig, TheMemoryEstimateCountsAnExpertParallelRanksOwnExpertsOnly) {
  // 3 MoE layers of 4 experts, each a gate, an up and a down of 32 × 16: 18,432 routed-expert
  // weights, each 16 bytes with AdamW (the weight, its gradient, two moments, replicated here).
  // At EP=2 a rank holds half of them; the rest of the model is on every rank.
  const std::string text = kMoeLlama + "[model.moe]\nexperts = 4\nffn_hidden = 16\n[optimizer]\nname = \"adamw\"\n"
                           "[parallel]\ndistributed_optimizer = false\n";
  const MemoryEstimate one = estimate_memory(parse_config_text(text + "data = 2\n", "r.toml").config);
  const MemoryEstimate two =
      estimate_memory(parse_config_text(text + "data = 2\nexpert = 2\n", "r.toml").config);
  EXPECT_EQ(one.parameters, two.parameters);
  EXPECT_DOUBLE_EQ(one.bytes_per_rank - one.activation_bytes - (two.bytes_per_rank - two.activation_bytes),
                   18432.0 * 16 / 2);
}

}  // namespace
}  // namespace precon::worker
