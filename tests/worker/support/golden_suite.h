// A reference test suite's golden files: SetUpTestSuite runs one tests/worker/*_reference.py script
// (PyTorch) into a temporary directory, once for the suite; the tests read its .npy tensors and its
// config.json. GoldenSuite<Tag>: each suite (its Tag) has its own directory. Tag::kScript names the
// script, Tag::kName the directory's prefix.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/common/npy.h"
#include "worker/config/config.h"

namespace precon::worker::testing {

template <class Tag>
class GoldenSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     (std::string(Tag::kName) + "_" + std::to_string(::getpid())));
    const std::string cmd = std::string(PRECON_PYTHON) + " " + PRECON_SOURCE_DIR + "/tests/worker/model/" + Tag::kScript +
                            " --out " + dir_->string() + " > /dev/null";
    status_ = std::system(cmd.c_str());
    if (status_ == 0) {
      std::ifstream in(*dir_ / "config.json");
      cfg_ = new nlohmann::json(nlohmann::json::parse(in));
    }
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete dir_;
    delete cfg_;
    cfg_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(status_, 0) << Tag::kScript << " failed (needs " << PRECON_PYTHON << " with torch)";
  }

  static int64_t batch_size() { return cfg_->at("batch_size"); }
  static std::vector<double> values(const std::string& file) { return test::read_npy((*dir_ / file).string()).values; }
  static std::vector<int32_t> ints(const std::string& file) {
    const std::vector<double> v = values(file);
    return {v.begin(), v.end()};
  }
  static std::vector<float> floats(const std::string& file) {
    const std::vector<double> v = values(file);
    return {v.begin(), v.end()};
  }
  // max |a - b| / max |b|: the error relative to the tensor's scale.
  static double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
      diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
      scale = std::max(scale, std::fabs(double(b[i])));
    }
    return a.size() == b.size() ? diff / std::max(scale, 1e-30) : INFINITY;
  }

  static inline std::filesystem::path* dir_ = nullptr;
  static inline nlohmann::json* cfg_ = nullptr;
  static inline int status_ = -1;
};

// A Llama ModelConfig from a reference's config.json (with its "moe", "mla" and "rope_scaling" tables
// when it has them).
inline ModelConfig llama_config_from_json(const nlohmann::json& c) {
  ModelConfig m;
  m.arch = c.at("arch").get<std::string>();
  m.n_layer = c.at("n_layer");
  m.n_head = c.at("n_head");
  m.n_kv_head = c.at("n_kv_head");
  m.d_model = c.at("d_model");
  m.ffn_hidden = c.at("ffn_hidden");
  m.seq_len = c.at("seq_len");
  m.vocab_size = c.at("vocab_size");
  m.rope_theta = c.at("rope_theta");
  m.norm_eps = c.at("norm_eps");
  m.tie_embeddings = c.at("tie_embeddings").get<int64_t>() != 0;
  m.mtp_layers = c.value("mtp_layers", m.mtp_layers);
  m.mtp_loss_coeff = c.value("mtp_loss_coeff", m.mtp_loss_coeff);
  if (c.contains("moe")) {
    const nlohmann::json& e = c.at("moe");
    m.moe.experts = e.at("experts");
    m.moe.top_k = e.at("top_k");
    m.moe.ffn_hidden = e.at("ffn_hidden");
    m.moe.shared_experts = e.at("shared_experts");
    m.moe.first_dense_layers = e.at("first_dense_layers");
    m.moe.aux_loss_coeff = e.at("aux_loss_coeff");
    m.moe.router = e.value("router", m.moe.router);
    m.moe.route_scale = e.value("route_scale", m.moe.route_scale);
    m.moe.n_group = e.value("n_group", m.moe.n_group);
    m.moe.topk_group = e.value("topk_group", m.moe.topk_group);
    m.moe.bias_update_rate = e.value("bias_update_rate", m.moe.bias_update_rate);
    m.moe.seq_aux_loss_coeff = e.value("seq_aux_loss_coeff", m.moe.seq_aux_loss_coeff);
  }
  if (c.contains("rope_scaling")) {
    const nlohmann::json& r = c.at("rope_scaling");
    m.rope_scaling.type = r.at("type").get<std::string>();
    m.rope_scaling.factor = r.at("factor");
    m.rope_scaling.original_max_position_embeddings = r.at("original_max_position_embeddings");
    m.rope_scaling.beta_fast = r.at("beta_fast");
    m.rope_scaling.beta_slow = r.at("beta_slow");
    m.rope_scaling.mscale = r.at("mscale");
    m.rope_scaling.mscale_all_dim = r.at("mscale_all_dim");
  }
  if (c.contains("mla")) {
    const nlohmann::json& a = c.at("mla");
    m.mla.q_lora_rank = a.at("q_lora_rank");
    m.mla.kv_lora_rank = a.at("kv_lora_rank");
    m.mla.qk_nope_head_dim = a.at("qk_nope_head_dim");
    m.mla.qk_rope_head_dim = a.at("qk_rope_head_dim");
    m.mla.v_head_dim = a.at("v_head_dim");
  }
  return m;
}

}  // namespace precon::worker::testing
