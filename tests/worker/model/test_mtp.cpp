// Multi-token prediction (model.mtp_layers, DeepSeek-V3's MTP) against a PyTorch implementation
// written from DeepSeek-V3's description (mtp_reference.py): the parameter table (Hugging Face
// DeepseekV3's names, module k at model.layers.{n_layer + k − 1}), the main logits and loss, the mean
// MTP loss and every gradient of loss + λ · mtp_loss (relative error <= 1e-5 against fp64 torch) with
// grouped-query attention, with MLA, with two chained modules and a tied embedding, and with a
// mixture-of-experts block; 12-step AdamW and Muon trajectories of both losses; the model.safetensors
// round trip; and the key table's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

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

// fp64 torch against the fp32 model: what is left is fp32 rounding (measured below 1e-6 relative).
constexpr double kMtpTensorTolerance = 1e-5;
// fp32 on both sides over 12 steps, as test_llama.cpp's trajectories.
constexpr double kMtpTrajectoryTolerance = 2e-3;

struct MtpGolden {
  static constexpr const char* kScript = "mtp_reference.py";
  static constexpr const char* kName = "precon_mtp_ref";
};

class MtpReference : public testing::GoldenSuite<MtpGolden> {
 protected:
  static ModelConfig variant_config(const std::string& v) {
    std::ifstream in(*dir_ / v / "config.json");
    return testing::llama_config_from_json(nlohmann::json::parse(in));
  }

  void check_variant(const std::string& v) {
    const ModelConfig cfg = variant_config(v);
    ASSERT_GT(cfg.mtp_layers, 0);
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
    const double ref_loss = values(v + "/loss.npy")[0], ref_mtp = values(v + "/mtp_loss.npy")[0];
    const double loss = model.forward(tokens, targets, false);
    EXPECT_NEAR(loss, ref_loss, kMtpTensorTolerance * std::fabs(ref_loss)) << v;
    const double logits_err = rel_error(model.logits_host(), floats(v + "/logits.npy"));
    EXPECT_LT(logits_err, kMtpTensorTolerance) << v << " logits";
    EXPECT_EQ(model.mtp_tally()[1], 0.0) << v << ": an evaluation forward computed the modules";

    model.params().zero_grads();
    EXPECT_NEAR(model.forward(tokens, targets, true), ref_loss, kMtpTensorTolerance * std::fabs(ref_loss)) << v;
    ASSERT_EQ(model.mtp_tally()[1], 1.0);
    const double mtp = model.mtp_tally()[0];
    EXPECT_NEAR(mtp, ref_mtp, kMtpTensorTolerance * std::fabs(ref_mtp)) << v << " mtp_loss";
    model.backward();
    const ParamStore& p = model.params();
    double worst = logits_err;
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string& name = p.spec(i).name;
      const double err = rel_error(testing::host_visible(p, i, true), floats(v + "/grad." + name + ".npy"));
      // A sigmoid router's bias takes no gradient: both sides zero.
      if (p.spec(i).kind == ParamKind::buffer) continue;
      worst = std::max(worst, err);
      EXPECT_LT(err, kMtpTensorTolerance) << v << " " << name << ": max |ours - torch| / max |torch| = " << err;
    }
    std::printf("[ mtp %s ] loss %.6f mtp_loss %.6f (torch %.6f, %.6f), worst relative error of logits and gradients "
                "%.2g\n", v.c_str(), loss, mtp, ref_loss, ref_mtp, worst);
  }

  void check_trajectory(const std::string& v, const std::string& name) {
    const ModelConfig cfg = variant_config(v);
    std::ifstream in(*dir_ / v / "cases.json");
    const nlohmann::json all = nlohmann::json::parse(in);
    const nlohmann::json* c = nullptr;
    for (const auto& k : all.at("cases"))
      if (k.at("name") == name) c = &k;
    ASSERT_NE(c, nullptr) << "no case " << name;
    Llama model(cfg, batch_size(), kernels::Device::cpu);
    ParamStore& p = model.params();
    load_model_safetensors(p, *dir_ / v / "model.safetensors");
    auto opt = make_optimizer(testing::config_from_json(c->at("config")), testing::optim_params(p), kernels::Device::cpu);
    const std::vector<double> ref_loss = values(v + "/traj_losses." + name + ".npy");
    const std::vector<double> ref_mtp = values(v + "/traj_mtp." + name + ".npy");
    const int steps = all.at("steps");
    ASSERT_EQ(ref_loss.size(), static_cast<size_t>(steps));
    double worst = 0;
    std::vector<double> losses, mtps;
    for (int t = 1; t <= steps; ++t) {
      p.zero_grads();
      const std::string at = std::to_string(t - 1) + ".npy";
      model.mtp_tally() = {0.0, 0.0};
      losses.push_back(model.forward(ints(v + "/traj_tokens_" + at), ints(v + "/traj_targets_" + at), true));
      mtps.push_back(model.mtp_tally()[0]);
      model.backward();
      StepContext ctx;
      ctx.step = t;
      opt->step(ctx);
      const size_t i = static_cast<size_t>(t - 1);
      worst = std::max({worst, std::fabs(losses[i] - ref_loss[i]) / ref_loss[i], std::fabs(mtps[i] - ref_mtp[i]) / ref_mtp[i]});
    }
    EXPECT_LT(worst, kMtpTrajectoryTolerance) << v << " " << name;
    EXPECT_LT(ref_mtp.back(), 0.9 * ref_mtp.front()) << v << " " << name << ": the reference MTP loss did not fall";
    std::printf("[ mtp %s %s ] loss %.4f -> %.4f, mtp_loss %.4f -> %.4f (torch %.4f -> %.4f, %.4f -> %.4f), max "
                "relative difference %.2g\n", v.c_str(), name.c_str(), losses.front(), losses.back(), mtps.front(),
                mtps.back(), ref_loss.front(), ref_loss.back(), ref_mtp.front(), ref_mtp.back(), worst);
  }
};

// One test for the four variants (and one for the trajectories): each test process runs the script.
TEST_F(MtpReference, LogitsLossesAndEveryGradient) {
  for (const char* v : {"gqa", "mla", "chain", "moe"}) check_variant(v);
}

TEST_F(MtpReference, AdamWAndMuonTrajectories) {
  for (const char* v : {"gqa", "mla"})
    for (const char* c : {"adamw", "muon"}) check_trajectory(v, c);
}

// model.safetensors holds the modules under DeepseekV3's names and reads back bitwise; the config
// says how many there are.
TEST(MtpSafetensors, ModulesRoundTripUnderDeepseekV3Names) {
  ModelConfig cfg;
  cfg.arch = "llama";
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.d_model = 32;
  cfg.ffn_hidden = 48;
  cfg.seq_len = 8;
  cfg.vocab_size = 50;
  cfg.mla.kv_lora_rank = 16;
  cfg.mla.q_lora_rank = 12;
  cfg.mla.qk_nope_head_dim = 8;
  cfg.mla.qk_rope_head_dim = 4;
  cfg.mla.v_head_dim = 16;
  cfg.mtp_layers = 1;
  Llama a(cfg, 1, kernels::Device::cpu), b(cfg, 1, kernels::Device::cpu);
  a.init_random(7);
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("precon_mtp_round_trip_" + std::to_string(::getpid()) + ".safetensors");
  {
    const std::vector<uint8_t> bytes = model_safetensors_bytes(a.params(), cfg);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_NE(file.find("model.layers.2.eh_proj.weight"), nullptr);
  EXPECT_NE(file.find("model.layers.2.self_attn.kv_b_proj.weight"), nullptr);
  EXPECT_NE(file.find("model.layers.2.shared_head.norm.weight"), nullptr);
  load_model_safetensors(b.params(), path);
  for (size_t i = 0; i < a.params().size(); ++i)
    EXPECT_EQ(testing::host_visible(a.params(), i), testing::host_visible(b.params(), i)) << a.params().spec(i).name;
  EXPECT_EQ(hf_config_json(cfg).at("num_nextn_predict_layers"), 1);
  // A model without the modules refuses the file's extra tensors; one with them refuses a file without.
  ModelConfig plain = cfg;
  plain.mtp_layers = 0;
  Llama c(plain, 1, kernels::Device::cpu);
  EXPECT_THROW(load_model_safetensors(c.params(), path), std::exception);
  ModelConfig two = cfg;
  two.mtp_layers = 2;
  Llama d(two, 1, kernels::Device::cpu);
  try {
    load_model_safetensors(d.params(), path);
    ADD_FAILURE() << "a file without module 2 was read";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.3."), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(MtpKeys, BadSettingsAreRefusedNamingTheKey) {
  auto error_of = [](const std::string& model, const std::string& parallel = "") {
    const std::string text = "[model]\narch = \"llama\"\nn_layer = 2\nd_model = 32\nn_head = 4\nseq_len = 8\n"
                             "vocab_size = 50\n" + model + parallel;
    try {
      parse_config_text(text, "recipe.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of("mtp_layers = 1\n"), "");
  for (const char* bad : {"mtp_layers = -1\n", "mtp_layers = 8\n", "mtp_layers = 1\narch = \"gpt2\"\n"}) {
    std::string model = bad;
    if (model.find("gpt2") != std::string::npos) {
      const std::string text = "[model]\narch = \"gpt2\"\nn_layer = 2\nd_model = 32\nn_head = 4\nseq_len = 8\n"
                               "vocab_size = 50\nmtp_layers = 1\n";
      std::string e;
      try {
        parse_config_text(text, "recipe.toml");
      } catch (const ConfigError& err) {
        e = err.what();
      }
      EXPECT_NE(e.find("mtp_layers"), std::string::npos) << e;
      continue;
    }
    const std::string e = error_of(model);
    EXPECT_NE(e.find("model.mtp_layers"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_EQ(error_of("mtp_layers = 1\n", "[parallel]\npipeline = 2\n"), "");
  EXPECT_NE(error_of("mtp_loss_coeff = -1\n").find("mtp_loss_coeff"), std::string::npos);
}

}  // namespace
}  // namespace precon::worker
