// The activation plan (worker/model/activations.h) against llm.c-style arithmetic for GPT-2, and the
// memory estimate's activations against what the models allocate, byte for byte, for GPT-2, Llama
// with grouped-query attention, a mixture of experts with a shared expert, a smaller micro-batch,
// QK-clip's row maxima and a pipeline chunk with several slots. (Tensor, data and pipeline layouts
// run under mpirun in test_rank_memory.cpp, against the trainer's own report.)
#include <gtest/gtest.h>

#include <string>

#include "worker/config/parse.h"
#include "worker/model/activations.h"
#include "worker/model/memory_estimate.h"
#include "worker/model/model.h"

namespace precon::worker {
namespace {

TrialConfig config_of(const std::string& text) { return parse_config_text(text, "r.toml").config; }

// What one process's model allocates for its activations (one slot: no pipeline).
int64_t allocated(const TrialConfig& c) {
  const int64_t micro = c.train.micro_batch_size > 0 ? c.train.micro_batch_size : c.train.batch_size;
  auto model = make_model(c.model, micro, kernels::Device::cpu, c.train.precision);
  if (c.optimizer.qk_clip_threshold > 0) model->track_attention_logits();
  return model->bytes().activations;
}

TEST(Activations, GptSlotIsLlmcArithmetic) {
  // B 8, T 16, C 32, NH 4, L 2, V 61 padded to 64: every buffer a multiple of 64 bytes, so none is
  // rounded. Per block, in floats: ln1, residual2, ln2, output and atty (BTC each), qkv (3BTC),
  // fch and fch_gelu (4BTC each), the attention probabilities (B·NH·T²) and two (mean, rstd) pairs
  // (4BT). Once: the tokens and targets (2BT ints), encoded, lnf, branch_out, dresidual, dln, datty
  // (BTC each), dfch_gelu and dfch (4BTC each), dqkv (3BTC), lnf's mean and rstd and the losses
  // (3BT), the logits (BT·Vp) and datt (B·NH·T²).
  const TrialConfig c = config_of("[model]\nn_layer = 2\nn_head = 4\nd_model = 32\nseq_len = 16\nvocab_size = 61\n"
                                  "[train]\nbatch_size = 8\n");
  const int64_t B = 8, T = 16, C = 32, NH = 4, L = 2, Vp = 64, BT = B * T, BTC = BT * C, att = B * NH * T * T;
  const int64_t block = 16 * BTC + 4 * BT + att;
  const int64_t once = 2 * BT + 17 * BTC + 3 * BT + BT * Vp + att;
  EXPECT_EQ(plan_bytes(gpt_slot_plan(c.model, {8, 1, 0, -1, kernels::DType::f32})), 4 * (L * block + once));
  EXPECT_EQ(allocated(c), 4 * (L * block + once));
  EXPECT_EQ(estimate_memory(c).activation_bytes, 4.0 * (L * block + once));
}

TEST(Activations, TheEstimateIsWhatTheModelAllocates) {
  const std::string llama = "[model]\narch = \"llama\"\nn_layer = 3\nd_model = 48\nn_head = 6\nn_kv_head = 2\n"
                            "ffn_hidden = 96\nseq_len = 12\nvocab_size = 70\n";
  const struct {
    const char* name;
    std::string text;
  } cases[] = {
      {"gpt2", "[model]\nn_layer = 3\nn_head = 4\nd_model = 64\nseq_len = 24\nvocab_size = 100\n[train]\nbatch_size = 6\n"},
      {"gpt2 micro-batch 2 of 6", "[model]\nn_layer = 2\nn_head = 2\nd_model = 32\nseq_len = 20\nvocab_size = 90\n"
                                  "[train]\nbatch_size = 6\nmicro_batch_size = 2\n"},
      {"gpt2 qk-clip", "[model]\nn_layer = 2\nn_head = 4\nd_model = 32\nseq_len = 16\nvocab_size = 61\n"
                       "[optimizer]\nqk_clip_threshold = 50.0\n"},
      {"llama gqa", llama + "[train]\nbatch_size = 5\n"},
      {"llama moe", llama + "[model.moe]\nexperts = 4\ntop_k = 2\nffn_hidden = 40\nshared_experts = 1\n"
                            "first_dense_layers = 1\n[train]\nbatch_size = 3\n"},
      {"llama moe, no shared expert", llama + "[model.moe]\nexperts = 8\ntop_k = 3\n[train]\nbatch_size = 2\n"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    const TrialConfig c = config_of(k.text);
    const int64_t bytes = allocated(c);
    std::printf("%s: %lld activation bytes\n", k.name, static_cast<long long>(bytes));
    EXPECT_GT(bytes, 0);
    EXPECT_EQ(estimate_memory(c).activation_bytes, static_cast<double>(bytes));
  }
}

TEST(Activations, APipelineChunkHoldsOneSlotPerMicroBatchInFlight) {
  const TrialConfig c = config_of("[model]\narch = \"llama\"\nn_layer = 4\nd_model = 32\nn_head = 4\n"
                                  "ffn_hidden = 64\nseq_len = 8\nvocab_size = 50\n[model.moe]\nexperts = 4\n");
  ModelStage stage;
  stage.first_layer = 1;
  stage.end_layer = 3;
  stage.embedding = false;
  stage.head = false;
  stage.slots = 3;
  auto model = make_model(c.model, 2, kernels::Device::cpu, "fp32", nullptr, stage);
  const ActShape shape{2, 1, 1, 3, kernels::DType::f32};
  EXPECT_EQ(model->bytes().activations, chunk_activation_bytes(c.model, shape, 3, false, false));
  // Three slots of two blocks hold three times one slot's, and the MoE scratch once.
  const int64_t one = chunk_activation_bytes(c.model, shape, 1, false, false);
  const int64_t two = chunk_activation_bytes(c.model, shape, 2, false, false);
  EXPECT_EQ(model->bytes().activations - two, two - one);
}

}  // namespace
}  // namespace precon::worker
