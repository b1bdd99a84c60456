// The Llama family's recipe keys: defaults (Llama's MLP width rule, n_kv_head = n_head, untied),
// every bad combination refused at parse time with the key that is wrong, and the other family's
// checkpoint refused at load with what to set.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "worker/ckpt/safetensors.h"
#include "worker/config/parse.h"
#include "worker/model/model.h"
#include "worker/model/model_io.h"

namespace precon::worker {
namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_config_text(text, "recipe.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LlamaConfig, DefaultsFollowLlama) {
  const ModelConfig m = parse_config_text("[model]\narch = \"llama\"\nd_model = 4096\nn_head = 32\n", "r.toml").config.model;
  EXPECT_TRUE(m.llama());
  EXPECT_EQ(m.kv_heads(), 32);
  EXPECT_EQ(m.ffn(), 10944);  // int(8/3 · 4096) = 10922, up to a multiple of 64
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_DOUBLE_EQ(m.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-5);
  ModelConfig small;
  small.arch = "llama";
  small.d_model = 128;
  EXPECT_EQ(small.ffn(), 384);  // 341 up to 384
  ModelConfig gpt;
  EXPECT_EQ(gpt.ffn(), 4 * gpt.d_model);
  EXPECT_EQ(parse_config_text("", "r.toml").config.model.arch, "gpt2");
}

TEST(LlamaConfig, BadShapesAreRefusedWithTheKey) {
  const std::string llama = "[model]\narch = \"llama\"\nn_layer = 2\nd_model = 64\nn_head = 4\n";
  std::string e = parse_error(llama + "n_kv_head = 3\n");
  EXPECT_NE(e.find("model.n_kv_head"), std::string::npos) << e;
  EXPECT_NE(e.find("must divide n_head = 4"), std::string::npos) << e;
  e = parse_error(llama + "ffn_hidden = 51\n[parallel]\ntensor = 2\n");
  EXPECT_NE(e.find("parallel.tensor"), std::string::npos) << e;
  EXPECT_NE(e.find("model.ffn_hidden = 51"), std::string::npos) << e;
  e = parse_error(llama + "n_kv_head = 2\n[parallel]\ntensor = 4\n");
  EXPECT_NE(e.find("model.n_kv_head = 2"), std::string::npos) << e;
  e = parse_error("[model]\narch = \"llama\"\nd_model = 36\nn_head = 4\n");  // head size 9
  EXPECT_NE(e.find("even head size"), std::string::npos) << e;
  e = parse_error("[model]\narch = \"mamba\"\n");
  EXPECT_NE(e.find("model.arch"), std::string::npos) << e;
  // GPT-2 has neither grouped-query attention nor another MLP width.
  e = parse_error("[model]\nn_head = 4\nd_model = 64\nn_kv_head = 2\n");
  EXPECT_NE(e.find("gpt2 has no grouped-query attention"), std::string::npos) << e;
  e = parse_error("[model]\nd_model = 64\nffn_hidden = 100\n");
  EXPECT_NE(e.find("model.ffn_hidden = 100"), std::string::npos) << e;
  EXPECT_EQ(parse_error(llama + "n_kv_head = 2\nffn_hidden = 96\n[parallel]\ntensor = 2\n"), "");
}

class LlamaCheckpointFamily : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("precon_llama_cfg_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  static ModelConfig shape(const char* arch) {
    ModelConfig m;
    m.arch = arch;
    m.n_layer = 1;
    m.n_head = 2;
    m.d_model = 16;
    m.seq_len = 8;
    m.vocab_size = 40;
    return m;
  }
  std::filesystem::path write(const ModelConfig& m) {
    auto model = make_model(m, 1, kernels::Device::cpu);
    model->init_random(1);
    const std::filesystem::path p = dir_ / (m.arch + ".safetensors");
    write_file_atomic(p, model_safetensors_bytes(model->params(), m));
    return p;
  }
  static std::string load_error(const ModelConfig& m, const std::filesystem::path& file) {
    auto model = make_model(m, 1, kernels::Device::cpu);
    try {
      load_model_safetensors(model->params(), file);
    } catch (const ModelIoError& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
};

TEST_F(LlamaCheckpointFamily, EachFamilyRefusesTheOthersFileAndSaysWhatToSet) {
  const auto llama_file = write(shape("llama")), gpt_file = write(shape("gpt2"));
  std::string e = load_error(shape("gpt2"), llama_file);
  EXPECT_NE(e.find("holds a llama model"), std::string::npos) << e;
  EXPECT_NE(e.find("model.arch"), std::string::npos) << e;
  e = load_error(shape("llama"), gpt_file);
  EXPECT_NE(e.find("holds a gpt2 model"), std::string::npos) << e;
  EXPECT_EQ(load_error(shape("llama"), llama_file), "");
  // Tied and untied heads tell each other apart by lm_head.weight.
  ModelConfig tied = shape("llama");
  tied.tie_embeddings = true;
  e = load_error(tied, llama_file);
  EXPECT_NE(e.find("unexpected tensor lm_head.weight"), std::string::npos) << e;
  e = load_error(shape("llama"), write(tied));
  EXPECT_NE(e.find("lm_head.weight is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("tie_embeddings"), std::string::npos) << e;
}

TEST_F(LlamaCheckpointFamily, ConfigJsonIsLlamaConfigs) {
  ModelConfig m = shape("llama");
  m.n_kv_head = 1;
  const nlohmann::json c = hf_config_json(m);
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(c["num_key_value_heads"], 1);
  EXPECT_EQ(c["num_attention_heads"], 2);
  EXPECT_EQ(c["intermediate_size"], m.ffn());
  EXPECT_EQ(c["hidden_size"], 16);
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(hf_config_json(shape("gpt2"))["model_type"], "gpt2");
}

TEST(LlamaFlops, SixPerMatrixWeightPlusAttention) {
  // Untied: the head's matrix counts, the input embedding (a lookup) does not; tied: the one matrix once.
  ModelConfig m;
  m.arch = "llama";
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.d_model = 32;
  m.ffn_hidden = 48;
  m.seq_len = 16;
  m.vocab_size = 67;
  const double hidden = 2.0 * (32 * 32 + 2 * 16 * 32 + 32 * 32 + 3 * 48 * 32);
  const double attention = 12.0 * 2 * 32 * 16;
  EXPECT_DOUBLE_EQ(make_model(m, 1, kernels::Device::cpu)->flops_per_token(), 6.0 * (hidden + 67 * 32) + attention);
  m.tie_embeddings = true;
  EXPECT_DOUBLE_EQ(make_model(m, 1, kernels::Device::cpu)->flops_per_token(), 6.0 * (hidden + 67 * 32) + attention);
  m.arch = "gpt2";
  m.n_kv_head = 0;
  m.ffn_hidden = 0;
  const double gpt_hidden = 2.0 * (32 * 96 + 32 * 32 + 32 * 128 + 128 * 32);
  EXPECT_DOUBLE_EQ(make_model(m, 1, kernels::Device::cpu)->flops_per_token(), 6.0 * (gpt_hidden + 67 * 32) + attention);
}

}  // namespace
}  // namespace precon::worker
