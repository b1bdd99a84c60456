// Multi-head latent attention (DeepSeek-V3's MLA, [model.mla] on the llama family) against a
// PyTorch implementation written from DeepSeek-V3's description (mla_reference.py): the parameter
// table (Hugging Face DeepseekV3's names, in its order), the logits, the loss and every gradient
// (relative error <= 1e-5 against fp64 torch), with a query latent and values wider than the query
// and key heads, and with a plain q_proj and values narrower; and the key table's refusals.
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

namespace precon::worker {
namespace {

// The reference is fp64 arithmetic on the fp32 weights: what is left is the C++ model's fp32
// rounding (measured: <= 1e-6 relative), 1e-5 leaves room for another summation order.
constexpr double kMlaTensorTolerance = 1e-5;

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

  void check_variant(const std::string& v) {
    const ModelConfig cfg = variant_config(v);
    ASSERT_TRUE(cfg.uses_mla());
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
};

TEST_F(MlaReference, WithAQueryLatentLogitsLossAndEveryGradient) { check_variant("q_lora"); }

TEST_F(MlaReference, WithAPlainQueryProjectionLogitsLossAndEveryGradient) { check_variant("plain"); }

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
