// The DeepSeek-V3 family's keys and checkpoints: [model.rope_scaling] (YaRN) parsed and every bad
// setting refused naming its key, as are MLA and router shapes that cannot be computed; the config.json of a model with multi-head latent attention
// (DeepseekV3ForCausalLM's fields, with the sigmoid router's experts or dense) and the names its
// tensors take (mlp.shared_experts); a DeepseekV3 checkpoint with a tensor deleted refused naming
// the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "worker/ckpt/safetensors.h"
#include "worker/config/parse.h"
#include "worker/model/llama.h"
#include "worker/model/model_io.h"
#include "worker/model/params.h"
#include "worker/model/rope_scaling.h"

namespace precon::worker {
namespace {

// A small llama with MLA; the recipes' tables follow.
const std::string kDeepseekModel =
    "[model]\narch = \"llama\"\nn_layer = 3\nd_model = 32\nn_head = 4\nffn_hidden = 48\nseq_len = 8\n"
    "vocab_size = 50\n";
const std::string kDeepseekMla =
    "[model.mla]\nkv_lora_rank = 16\nq_lora_rank = 12\nqk_nope_head_dim = 8\nqk_rope_head_dim = 4\nv_head_dim = 8\n";
const std::string kDeepseekMoe =
    "[model.moe]\nexperts = 4\ntop_k = 2\nffn_hidden = 16\nshared_experts = 1\nfirst_dense_layers = 1\n"
    "router = \"sigmoid\"\naux_loss_coeff = 0\nn_group = 2\ntopk_group = 1\nroute_scale = 2.5\n";
const std::string kDeepseekYarn =
    "[model.rope_scaling]\ntype = \"yarn\"\nfactor = 4\noriginal_max_position_embeddings = 64\nmscale = 1\n"
    "mscale_all_dim = 1\n";

std::string deepseek_parse_error(const std::string& text) {
  try {
    parse_config_text(text, "recipe.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

ModelConfig deepseek_model(const std::string& text) { return parse_config_text(text, "recipe.toml").config.model; }

TEST(DeepseekConfig, YarnKeysParseWithDeepseekDefaults) {
  const ModelConfig plain = deepseek_model(kDeepseekModel);
  EXPECT_EQ(plain.rope_scaling.type, "none");
  EXPECT_DOUBLE_EQ(model_rope(plain).factor, 1.0);
  EXPECT_DOUBLE_EQ(yarn_softmax_factor(plain), 1.0);

  const ModelConfig m = deepseek_model(kDeepseekModel + kDeepseekMla + kDeepseekYarn);
  EXPECT_TRUE(m.rope_scaling.yarn());
  EXPECT_DOUBLE_EQ(m.rope_scaling.beta_fast, 32);  // DeepSeek-V3's
  EXPECT_DOUBLE_EQ(m.rope_scaling.beta_slow, 1);
  const kernels::Rope r = model_rope(m);
  EXPECT_DOUBLE_EQ(r.factor, 4);
  EXPECT_DOUBLE_EQ(r.original_max, 64);
  // mscale = mscale_all_dim: cos and sin unscaled, the softmax scale times (0.1·ln 4 + 1)².
  EXPECT_DOUBLE_EQ(r.attention_factor, 1.0);
  EXPECT_NEAR(yarn_softmax_factor(m), std::pow(0.1 * std::log(4.0) + 1, 2), 1e-15);
  // The trial's stored TOML (what a trial runs) keeps the table.
  const ParsedConfig again = parse_config_text(config_to_toml(parse_config_text(kDeepseekModel + kDeepseekMla +
                                                                                kDeepseekYarn, "recipe.toml")
                                                                  .config),
                                               "stored.toml");
  EXPECT_TRUE(again.config.model.rope_scaling.yarn());
  EXPECT_EQ(again.config.model.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(again.config.model.rope_scaling.mscale_all_dim, 1.0);
  // Without mscale_all_dim the cos/sin factor is 0.1·mscale·ln(factor) + 1 and the softmax unchanged.
  const ModelConfig g = deepseek_model(kDeepseekModel + "[model.rope_scaling]\ntype = \"yarn\"\nfactor = 8\n"
                                                        "original_max_position_embeddings = 16\nmscale = 0.5\n");
  EXPECT_NEAR(model_rope(g).attention_factor, 0.05 * std::log(8.0) + 1, 1e-15);
  EXPECT_DOUBLE_EQ(yarn_softmax_factor(g), 1.0);
}

TEST(DeepseekConfig, BadYarnSettingsAreRefusedNamingTheKey) {
  const std::string mla = kDeepseekModel + kDeepseekMla;
  struct Bad {
    std::string text, key, says;
  };
  const std::string yarn = "[model.rope_scaling]\ntype = \"yarn\"\noriginal_max_position_embeddings = 64\n";
  for (const Bad& b : std::vector<Bad>{
           {mla + "[model.rope_scaling]\ntype = \"ntk\"\n", "model.rope_scaling.type", "yarn"},
           {mla + yarn, "model.rope_scaling.factor", "factor > 1"},
           {mla + yarn + "factor = 0.5\n", "model.rope_scaling.factor", ""},
           {mla + "[model.rope_scaling]\nfactor = 4\n", "model.rope_scaling.factor", "type = \"yarn\""},
           {mla + "[model.rope_scaling]\ntype = \"yarn\"\nfactor = 4\n",
            "model.rope_scaling.original_max_position_embeddings", "required"},
           {mla + yarn + "factor = 4\nbeta_fast = 1\n", "model.rope_scaling.beta_fast", "beta_slow"},
           {mla + yarn + "factor = 4\nbeta_slow = 0\n", "model.rope_scaling.beta_slow", ""},
           {mla + yarn + "factor = 4\nmscale = -1\n", "model.rope_scaling.mscale", ""},
           {kDeepseekModel + yarn + "factor = 4\nmscale_all_dim = 1\n", "model.rope_scaling.mscale_all_dim",
            "[model.mla]"},
           {"[model]\narch = \"gpt2\"\n" + yarn + "factor = 4\n", "model.rope_scaling.type", "llama"}}) {
    const std::string e = deepseek_parse_error(b.text);
    EXPECT_NE(e.find(b.key), std::string::npos) << b.text << "\n -> " << e;
    EXPECT_NE(e.find(b.says), std::string::npos) << b.text << "\n -> " << e;
  }
  EXPECT_EQ(deepseek_parse_error(mla + yarn + "factor = 4\n"), "");
  EXPECT_EQ(deepseek_parse_error(kDeepseekModel + yarn + "factor = 4\n"), "");  // grouped-query attention
}

// The family's shapes that cannot be computed are refused with the full key (issue 39's list; the
// model tests check the same rules beside their references).
TEST(DeepseekConfig, BadMlaAndRouterShapesAreRefusedNamingTheKey) {
  std::string e = deepseek_parse_error(kDeepseekModel + "[model.mla]\nkv_lora_rank = 16\nqk_rope_head_dim = 7\n");
  EXPECT_NE(e.find("model.mla.qk_rope_head_dim"), std::string::npos) << e;
  EXPECT_NE(e.find("must be even"), std::string::npos) << e;
  e = deepseek_parse_error(kDeepseekModel + "[model.mla]\nkv_lora_rank = 33\n");
  EXPECT_NE(e.find("model.mla.kv_lora_rank"), std::string::npos) << e;
  EXPECT_NE(e.find("more than model.d_model = 32"), std::string::npos) << e;
  e = deepseek_parse_error(kDeepseekModel + kDeepseekMla +
                           "[model.moe]\nexperts = 4\nrouter = \"sigmoid\"\naux_loss_coeff = 0\nn_group = 2\n"
                           "topk_group = 3\n");
  EXPECT_NE(e.find("model.moe.topk_group"), std::string::npos) << e;
  EXPECT_NE(e.find("more than model.moe.n_group = 2"), std::string::npos) << e;
  EXPECT_EQ(deepseek_parse_error(kDeepseekModel + kDeepseekMla + kDeepseekMoe), "");
}

// The configuration of a model that is DeepSeek-V3's architecture names it and gives DeepseekV3's
// fields; its shared expert takes DeepseekV3's name.
TEST(DeepseekConfig, TheCheckpointSaysItIsADeepseekV3) {
  const ModelConfig m = deepseek_model(kDeepseekModel + kDeepseekMla + kDeepseekMoe + kDeepseekYarn);
  ASSERT_TRUE(m.deepseek_v3());
  const nlohmann::json j = hf_config_json(m);
  EXPECT_EQ(j.at("architectures"), nlohmann::json::array({"DeepseekV3ForCausalLM"}));
  EXPECT_EQ(j.at("model_type"), "deepseek_v3");
  const nlohmann::json want = {{"hidden_size", 32},          {"intermediate_size", 48},  {"moe_intermediate_size", 16},
                               {"num_hidden_layers", 3},     {"num_attention_heads", 4}, {"num_key_value_heads", 4},
                               {"q_lora_rank", 12},          {"kv_lora_rank", 16},       {"qk_nope_head_dim", 8},
                               {"qk_rope_head_dim", 4},      {"v_head_dim", 8},          {"n_routed_experts", 4},
                               {"n_shared_experts", 1},      {"num_experts_per_tok", 2}, {"first_k_dense_replace", 1},
                               {"n_group", 2},               {"topk_group", 1},          {"routed_scaling_factor", 2.5},
                               {"scoring_func", "sigmoid"},  {"topk_method", "noaux_tc"}, {"norm_topk_prob", true},
                               {"rope_interleave", false},   {"vocab_size", 50},         {"tie_word_embeddings", false}};
  for (const auto& [key, value] : want.items()) EXPECT_EQ(j.at(key), value) << key;
  const nlohmann::json& rs = j.at("rope_scaling");
  EXPECT_EQ(rs.at("type"), "yarn");
  EXPECT_EQ(rs.at("factor"), 4.0);
  EXPECT_EQ(rs.at("original_max_position_embeddings"), 64);
  EXPECT_EQ(rs.at("beta_fast"), 32.0);
  EXPECT_EQ(rs.at("mscale_all_dim"), 1.0);
  EXPECT_EQ(rs.at("attention_factor"), 1.0);

  const std::vector<ParamSpec> t = llama_param_table(m);
  auto has = [&](const std::string& name) {
    for (const ParamSpec& s : t)
      if (s.name == name) return true;
    return false;
  };
  EXPECT_TRUE(has("model.layers.1.mlp.shared_experts.down_proj.weight"));
  EXPECT_FALSE(has("model.layers.1.mlp.shared_expert.down_proj.weight"));
  EXPECT_TRUE(has("model.layers.2.mlp.gate.e_score_correction_bias"));
  EXPECT_TRUE(has("model.layers.0.mlp.gate_proj.weight"));  // first_k_dense_replace
  EXPECT_TRUE(has("model.layers.2.self_attn.kv_a_proj_with_mqa.weight"));

  // MLA with a dense MLP: DeepseekV3 with every layer dense; no query latent: q_lora_rank null.
  const ModelConfig dense = deepseek_model(kDeepseekModel + "[model.mla]\nkv_lora_rank = 16\n");
  const nlohmann::json d = hf_config_json(dense);
  EXPECT_EQ(d.at("model_type"), "deepseek_v3");
  EXPECT_EQ(d.at("first_k_dense_replace"), 3);
  EXPECT_TRUE(d.at("q_lora_rank").is_null());
  EXPECT_TRUE(d.at("rope_scaling").is_null());
  // MLA with the softmax router is no DeepseekV3: the Qwen-MoE config and names stay.
  const ModelConfig softmax = deepseek_model(kDeepseekModel + kDeepseekMla +
                                             "[model.moe]\nexperts = 4\nshared_experts = 1\n");
  EXPECT_FALSE(softmax.deepseek_v3());
  EXPECT_EQ(hf_config_json(softmax).at("model_type"), "qwen3_moe");
  EXPECT_EQ(shared_expert_prefix(softmax), "mlp.shared_expert");
  // YaRN on a plain llama: LlamaConfig's rope_scaling.
  const ModelConfig llama = deepseek_model(kDeepseekModel + "[model.rope_scaling]\ntype = \"yarn\"\nfactor = 2\n"
                                                            "original_max_position_embeddings = 4\n");
  const nlohmann::json l = hf_config_json(llama);
  EXPECT_EQ(l.at("model_type"), "llama");
  EXPECT_EQ(l.at("rope_scaling").at("rope_type"), "yarn");
  EXPECT_NEAR(l.at("rope_scaling").at("attention_factor").get<double>(), 0.1 * std::log(2.0) + 1, 1e-15);
}

// An exported DeepseekV3 checkpoint loads back; with a tensor deleted (the file rewritten without it
// by the safetensors writer) loading names the tensor.
TEST(DeepseekConfig, ACheckpointWithATensorMissingIsRefusedNamingIt) {
  const ModelConfig m = deepseek_model(kDeepseekModel + kDeepseekMla + kDeepseekMoe);
  Llama model(m, 1, kernels::Device::cpu);
  model.init_random(7);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("precon_deepseek_ckpt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path whole = dir / "whole.safetensors", cut = dir / "cut.safetensors";
  {
    const std::vector<uint8_t> bytes = model_safetensors_bytes(model.params(), m);
    SafetensorsFile file = SafetensorsFile::parse(bytes, "exported");
    EXPECT_EQ(nlohmann::json::parse(file.metadata().at("config")).at("model_type"), "deepseek_v3");
    std::vector<SafetensorsEntry> all, kept;
    for (const SafetensorsTensor& t : file.tensors()) {
      SafetensorsEntry e{t.name, t.dtype, t.shape, t.bytes.data()};
      all.push_back(e);
      if (t.name != "model.layers.2.self_attn.kv_b_proj.weight") kept.push_back(e);
    }
    ASSERT_EQ(kept.size() + 1, all.size());
    write_safetensors(whole, all, file.metadata());
    write_safetensors(cut, kept, file.metadata());
  }
  Llama again(m, 1, kernels::Device::cpu);
  EXPECT_NO_THROW(load_model_safetensors(again.params(), whole));
  try {
    load_model_safetensors(again.params(), cut);
    ADD_FAILURE() << "a checkpoint without kv_b_proj loaded";
  } catch (const ModelIoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tensor model.layers.2.self_attn.kv_b_proj.weight is missing"), std::string::npos) << what;
    EXPECT_NE(what.find("DeepseekV3"), std::string::npos) << what;
    EXPECT_NE(what.find(cut.string()), std::string::npos) << what;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace precon::worker
