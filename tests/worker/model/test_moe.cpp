// The mixture-of-experts Llama against a PyTorch implementation written from its description
// (moe_reference.py: top-k routing with renormalised weights, dropless, a shared expert, the
// load-balancing loss): the parameter table in Qwen-MoE's names and order, the cross-entropy, the
// aux loss, each expert's share of the assignments and every gradient of their sum (router
// included) within 1e-5 relative of fp64 torch, and a 12-step trajectory under each of AdamW, Muon
// (each expert matrix orthogonalised on its own, the router AdamW's) and Shampoo. Also, without
// the reference: a router that sends every token to one expert gives moe_load_max = E and the
// model still trains (dropless).
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

#include "kernels/linalg.h"
#include "tests/common/npy.h"
#include "tests/worker/support/golden_suite.h"
#include "tests/worker/support/optim_util.h"
#include "worker/ckpt/safetensors.h"
#include "worker/model/llama.h"
#include "worker/model/model_io.h"
#include "worker/model/params.h"

namespace precon::worker {
namespace {

// As test_llama_reference.cpp's: fp64 torch on fp32 weights, 1e-5 relative for every tensor; the
// trajectories fp32 on both sides within 2e-3.
constexpr double kMoeTensorTolerance = 1e-5;
constexpr double kMoeLossTolerance = 2e-3;

struct MoeGolden {
  static constexpr const char* kScript = "moe_reference.py";
  static constexpr const char* kName = "precon_moe_ref";
};

class MoeReference : public testing::GoldenSuite<MoeGolden> {
 protected:
  static ModelConfig model_config() { return testing::llama_config_from_json(*cfg_); }

  void check_trajectory(const std::string& name) {
    std::ifstream in(*dir_ / "cases.json");
    const nlohmann::json all = nlohmann::json::parse(in);
    const nlohmann::json* c = nullptr;
    for (const auto& k : all.at("cases"))
      if (k.at("name") == name) c = &k;
    ASSERT_NE(c, nullptr) << "no case " << name << " in cases.json";
    const int steps = all.at("steps");
    const std::vector<double> ref = values("traj_losses." + name + ".npy");
    const std::vector<double> ref_aux = values("traj_aux." + name + ".npy");
    ASSERT_EQ(ref.size(), static_cast<size_t>(steps));
    ASSERT_EQ(ref_aux.size(), static_cast<size_t>(steps));

    Llama model(model_config(), batch_size(), kernels::Device::cpu);
    ParamStore& p = model.params();
    load_model_safetensors(p, *dir_ / "model.safetensors");
    auto opt = make_optimizer(testing::config_from_json(c->at("config")), testing::optim_params(p),
                              kernels::Device::cpu);
    std::vector<double> ours;
    double worst = 0;
    for (int t = 1; t <= steps; ++t) {
      p.zero_grads();
      std::fill(model.moe_tally().begin(), model.moe_tally().end(), 0.0);
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
      const double aux = model.moe_tally()[0];
      const double aux_err = std::fabs(aux - ref_aux[t - 1]) / std::fabs(ref_aux[t - 1]);
      worst = std::max({worst, err, aux_err});
      EXPECT_LT(err, kMoeLossTolerance) << name << " step " << t << ": loss " << loss << ", torch " << ref[t - 1];
      EXPECT_LT(aux_err, kMoeLossTolerance) << name << " step " << t << ": aux " << aux << ", torch " << ref_aux[t - 1];
    }
    EXPECT_LT(ref.back(), 0.8 * ref.front()) << name << ": the reference loss did not fall";
    std::printf("[ moe %s ] loss %.4f -> %.4f (torch %.4f -> %.4f), max relative difference (loss, aux) %.2g; %s\n",
                name.c_str(), ours.front(), ours.back(), ref.front(), ref.back(), worst,
                opt->routing_summary().c_str());
  }
};


TEST_F(MoeReference, ParameterTableIsQwenMoesInOrder) {
  const std::vector<ParamSpec> table = llama_param_table(model_config());
  SafetensorsFile file = SafetensorsFile::open(*dir_ / "model.safetensors");
  ASSERT_EQ(table.size(), file.tensors().size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(table[i].name, file.tensors()[i].name) << "row " << i;
    EXPECT_EQ(table[i].shape, file.tensors()[i].shape) << table[i].name;
    EXPECT_EQ(table[i].kind == ParamKind::router, table[i].name.ends_with(".mlp.gate.weight")) << table[i].name;
  }
}

TEST_F(MoeReference, LossAuxLoadAndEveryGradient) {
  const ModelConfig m = model_config();
  Llama model(m, batch_size(), kernels::Device::cpu);
  load_model_safetensors(model.params(), *dir_ / "model.safetensors");
  const auto tokens = ints("tokens.npy"), targets = ints("targets.npy");
  const double ref_loss = values("loss.npy")[0], ref_aux = values("aux.npy")[0];

  // An evaluation forward: the cross-entropy alone, nothing tallied.
  EXPECT_NEAR(model.forward(tokens, targets, false), ref_loss, kMoeTensorTolerance * ref_loss);
  for (double v : model.moe_tally()) EXPECT_EQ(v, 0.0);
  const double logits_err = rel_error(model.logits_host(), floats("logits.npy"));
  EXPECT_LT(logits_err, kMoeTensorTolerance) << "logits";

  model.params().zero_grads();
  const double loss = model.forward(tokens, targets, true);
  EXPECT_NEAR(loss, ref_loss, kMoeTensorTolerance * ref_loss);
  const double aux = model.moe_tally()[0];
  EXPECT_NEAR(aux, ref_aux, kMoeTensorTolerance * ref_aux);
  // Each MoE layer's share of the assignments per expert.
  const std::vector<double> load = values("load.npy");
  const int64_t E = m.moe.experts, N = batch_size() * m.seq_len;
  size_t at = 0;
  for (int64_t l = 0; l < m.n_layer; ++l) {
    if (!m.moe_layer(l)) continue;
    for (int64_t e = 0; e < E; ++e, ++at)
      EXPECT_DOUBLE_EQ(model.moe_tally()[1 + l * E + e] / static_cast<double>(N * m.moe.top_k), load.at(at))
          << "layer " << l << " expert " << e;
  }
  EXPECT_EQ(at, load.size());

  model.backward();
  const ParamStore& p = model.params();
  double worst = logits_err;
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string& name = p.spec(i).name;
    const double err = rel_error(testing::host_visible(p, i, true), floats("grad." + name + ".npy"));
    worst = std::max(worst, err);
    EXPECT_LT(err, kMoeTensorTolerance) << name << ": max |ours - torch| / max |torch| = " << err;
  }
  std::printf("[ moe ] loss %.6f (torch %.6f), aux %.6g (torch %.6g), worst relative error of logits and gradients "
              "%.2g\n",
              loss, ref_loss, aux, ref_aux, worst);
}

TEST_F(MoeReference, AdamWLossTrajectory) { check_trajectory("adamw"); }

TEST_F(MoeReference, MuonLossTrajectory) { check_trajectory("muon"); }

TEST_F(MoeReference, ShampooLossTrajectory) { check_trajectory("shampoo"); }

// A zero router gives every expert the same probability: with top_k = 1 the tie rule sends every
// token to expert 0 (moe_load_max = E), whose block holds all N tokens; nothing is dropped and the
// loss still falls under plain gradient descent.
TEST(MoeRouting, EveryTokenToOneExpertStillTrains) {
  ModelConfig m;
  m.arch = "llama";
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 16;
  m.ffn_hidden = 32;
  m.seq_len = 8;
  m.vocab_size = 23;
  m.moe.experts = 4;
  m.moe.top_k = 1;
  m.moe.ffn_hidden = 8;
  const int64_t B = 2, N = B * m.seq_len, E = m.moe.experts;
  Llama model(m, B, kernels::Device::cpu);
  model.init_random(5);
  ParamStore& p = model.params();
  for (int64_t l = 0; l < m.n_layer; ++l)
    kernels::fill_zero(p.param("model.layers." + std::to_string(l) + ".mlp.gate.weight"));
  std::vector<int32_t> tokens(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7) % m.vocab_size);
    targets[i] = static_cast<int32_t>((i * 7 + 3) % m.vocab_size);
  }
  p.zero_grads();
  const double first = model.forward(tokens, targets, true);
  for (int64_t l = 0; l < m.n_layer; ++l) {
    EXPECT_EQ(model.moe_tally()[1 + l * E], static_cast<double>(N)) << "layer " << l << ": expert 0 gets every token";
    for (int64_t e = 1; e < E; ++e) EXPECT_EQ(model.moe_tally()[1 + l * E + e], 0.0) << "layer " << l << " expert " << e;
  }
  // fₑ·E = E for expert 0: the report's moe_load_max. The aux loss is coeff · E · 1 · (1/E) per layer.
  EXPECT_NEAR(model.moe_tally()[0], 2 * m.moe.aux_loss_coeff, 1e-7);
  model.backward();
  // Every expert-0 matrix has a gradient, the others none (they got no token).
  EXPECT_GT(kernels::sum_squares(p.grad("model.layers.0.mlp.experts.0.up_proj.weight")), 0.0);
  EXPECT_EQ(kernels::sum_squares(p.grad("model.layers.0.mlp.experts.1.up_proj.weight")), 0.0);
  // The router's gradient is the aux loss's alone (top 1 renormalised is the constant 1).
  EXPECT_GT(kernels::sum_squares(p.grad("model.layers.0.mlp.gate.weight")), 0.0);
  double loss = first;
  for (int step = 0; step < 30; ++step) {
    kernels::axpby(p.all_params(), p.all_grads(), -0.5f, 1.0f);
    p.zero_grads();
    loss = model.forward(tokens, targets, true);
    model.backward();
  }
  EXPECT_LT(loss, 0.7 * first) << "loss " << first << " -> " << loss;
}

// The router's weights are drawn at initialisation, N(0, 0.02²) like the other matrices: a router of
// equal weights gives every expert the same logit for every token, so the first steps send every
// token to the tie rule's experts. The sample std near 0.02 and the first forward spreading 16 tokens
// over more than top_k experts in every layer.
TEST(MoeRouting, RouterWeightsAreDrawnAtInitialisation) {
  ModelConfig m;
  m.arch = "llama";
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 32;
  m.ffn_hidden = 32;
  m.seq_len = 8;
  m.vocab_size = 23;
  m.moe.experts = 8;
  m.moe.top_k = 2;
  m.moe.ffn_hidden = 8;
  const int64_t B = 2, N = B * m.seq_len, E = m.moe.experts;
  Llama model(m, B, kernels::Device::cpu);
  model.init_random(11);
  ParamStore& p = model.params();
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string name = "model.layers." + std::to_string(l) + ".mlp.gate.weight";
    const double n = static_cast<double>(E * m.d_model);
    const double rms = std::sqrt(kernels::sum_squares(p.param(name)) / n);
    EXPECT_GT(rms, 0.015) << name;
    EXPECT_LT(rms, 0.025) << name;
  }
  std::vector<int32_t> tokens(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>((i * 5) % m.vocab_size);
    targets[i] = static_cast<int32_t>((i * 5 + 1) % m.vocab_size);
  }
  model.params().zero_grads();
  model.forward(tokens, targets, true);  // the tally is kept by training forwards
  for (int64_t l = 0; l < m.n_layer; ++l) {
    int64_t used = 0;
    for (int64_t e = 0; e < E; ++e) used += model.moe_tally()[1 + l * E + e] > 0;
    EXPECT_GT(used, m.moe.top_k) << "layer " << l << ": experts that got a token";
  }
}

}  // namespace
}  // namespace precon::worker
