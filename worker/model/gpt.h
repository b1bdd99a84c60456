// GPT-2 (pre-LN, learned positions, GELU-tanh, tied embeddings, biases) with explicit forward and
// backward passes over the kernels and the parallel layers. Parameters follow gpt2_param_table
// (HF names and layouts) and the passes reach them by name: each layer's table rows are looked up
// once, at construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/model/model.h"

namespace precon::worker {

class Gpt final : public Model {
 public:
  // See Model's constructor.
  Gpt(const ModelConfig& config, int64_t batch_size, kernels::Device device, const std::string& precision = "fp32",
      TpGroup tp = {}, const ModelStage& stage = {}, ParamStore* shared = nullptr);

  // GPT-2 initialisation: N(0, 0.02) weights, residual projections scaled by 1/√(2L), zero
  // biases, unit layernorm weights. Deterministic in the seed.
  void init_random(uint64_t seed) override;
  double forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, bool compute_grad) override;
  void backward(const GradsReady& ready = {}) override;

 private:
  struct Acts;
  // One transformer block: its table rows (by their HF names, "h.{l}.ln_1.weight", ...) and layers.
  struct Block {
    size_t ln_1_w, ln_1_b, ln_2_w, ln_2_b;
    ColumnParallelLinear c_attn;  // attn.c_attn: fused q, k, v (this rank's heads)
    RowParallelLinear attn_proj;  // attn.c_proj
    ColumnParallelLinear c_fc;    // mlp.c_fc
    RowParallelLinear mlp_proj;   // mlp.c_proj
    std::pair<size_t, size_t> rows;  // [first, end) of its table rows
  };
  std::unique_ptr<Acts> allocate_acts() const;

  int64_t Cl_;  // this rank's share of the channels of a head group
  size_t wte_, wpe_, ln_f_w_, ln_f_b_;  // table rows of the non-layer parameters
  std::vector<Block> blocks_;
  VocabParallelEmbedding embedding_;
  ColumnParallelLinear head_;  // the tied head: logits over this rank's vocabulary
};

}  // namespace precon::worker
