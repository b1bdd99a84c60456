// What every model family shares: the parameter store (the table's rows, or a pipeline stage's),
// this rank's tensor-parallel part of it, bf16 weight copies, the activation slots of a pipeline
// stage, and the interface the trainer, the pipeline schedule and the checkpoints use. A family
// (gpt.h, llama.h) says what the architecture is: its table, its activations, its forward and
// backward passes over the kernels and the parallel layers (worker/parallel/layers.h), which own
// all communication.
// Shape letters: B batch, T sequence, C channels, NH heads, L layers, V vocabulary, Vp padded V.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "worker/config/config.h"
#include "worker/model/activations.h"
#include "worker/model/params.h"
#include "worker/parallel/layers.h"

namespace precon::worker {

class Model : public LayerWeights {
 public:
  ~Model() override;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  int64_t batch_size() const { return B_; }
  ParamStore& params() { return *params_; }
  const ParamStore& params() const { return *params_; }

  // The family's initialisation, deterministic in the seed.
  virtual void init_random(uint64_t seed) = 0;

  // tokens, targets: B·T host ints; targets < 0 are ignored. Returns the mean loss over the
  // counted targets (0 on a stage without the head) and keeps what the backward needs. With
  // compute_grad, also writes d loss / d logits in place of the logits (fused), ready for backward().
  // A stage without the embedding reads its input from stage_input(), written before the call.
  virtual double forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                         bool compute_grad) = 0;
  // Accumulates parameter gradients (callers zero them once per step with zero_grads()).
  // `ready`, when given, is called with each range [first, end) of table rows as soon as their
  // gradients are final, from the end of the table to its start: the head's rows, the blocks from
  // the last to the first, then the embedding's (a tied embedding last: the head and the embedding
  // both add to it). Data parallelism starts each range's all-reduce there, while the earlier layers
  // are still computed.
  using GradsReady = std::function<void(size_t first, size_t end)>;
  virtual void backward(const GradsReady& ready = {}) = 0;
  // Zeroes the gradients (the part's too); of this stage's rows only when the store is shared.
  void zero_grads();

  // Pipeline stages, all (B, T, C) fp32 views of the selected slot's activations: the input a
  // stage without the embedding receives; the residual stream it hands on after forward(); the
  // gradient of that output, written before backward() on a stage without the head; and the
  // gradient of the input after backward(), for the previous stage.
  void select_slot(int slot);
  kernels::Tensor stage_input() const;
  kernels::Tensor stage_output() const;
  kernels::Tensor output_grad() const;
  kernels::Tensor input_grad() const;
  const ModelStage& stage() const { return stage_; }
  int tp_size() const { return tp_.size(); }

  // Bytes this model allocated: the values of its own parameter store (none when the store is
  // shared: its owner counts it) and bf16 copies, their gradients, and its activation slots.
  struct Bytes {
    int64_t params = 0, grads = 0, activations = 0;
  };
  Bytes bytes() const;

  // Logits of the last forward without compute_grad: (B, T, V) copied to the host.
  std::vector<float> logits_host() const;
  // Floating-point operations per token of one forward + backward: 6 per weight of the matrices
  // (the vocabulary matrices once each: a tied head counts once) and 12·L·C·T for attention's
  // QKᵀ and att·V (the causal half not credited, as Megatron's and PaLM's counts do).
  // A mixture of experts's active parameters only: each MoE layer's router, shared expert and k of
  // its E experts. The MTP modules (model.mtp_layers) count as blocks, each with one more head.
  double flops_per_token() const;

  // Mixture of experts: what the training forwards (compute_grad) routed since the tally was last
  // cleared: [0] the sum of their load-balancing losses, then for each layer l of the model (all
  // n_layer, zeros for a dense layer or another stage's) the assignments of each of its E experts
  // at [1 + l·E + e]. Empty for a dense model. The step runner sums and clears it.
  std::vector<double>& moe_tally() { return moe_tally_; }
  // Multi-token prediction (model.mtp_layers): [0] the sum over the training forwards since the
  // tally was cleared of the mean of the modules' losses, [1] those forwards. The step runner sums
  // and clears it.
  std::vector<double>& mtp_tally() { return mtp_tally_; }
  // Seconds this model's mixture-of-experts layers spent in expert-parallel all-to-alls so far.
  virtual double moe_alltoall_seconds() const { return 0; }

  // QK-clip (optimizer.qk_clip_threshold): once tracking, the training forwards (compute_grad)
  // record the largest pre-softmax attention logit of each layer and query head at [l·n_head + h]
  // (global head indices; -inf for the layers and heads this rank does not compute). The trainer
  // reduces it over the ranks and resets it to -inf.
  void track_attention_logits();
  std::vector<float>& attention_logit_max() { return qk_max_; }

  // LayerWeights: what the passes read (the bf16 copy under bf16 precision, else the fp32
  // parameter of this rank's part) and the gradient they accumulate into.
  kernels::Tensor weight(size_t row) const override;
  kernels::Tensor grad(size_t row) const override { return compute().grad(row); }
  kernels::Tensor master(size_t row) const override { return compute().param(row); }

 protected:
  // Activations every family has; a family's own derive from it.
  struct Acts {
    virtual ~Acts() = default;
    kernels::Buffer buf;
    kernels::Tensor tokens, targets;      // (B, T) i32
    kernels::Tensor encoded;              // (B, T, C) the embedding's output (a stage's input)
    std::vector<kernels::Tensor> output;  // per block (B, T, C): the residual stream after it
    kernels::Tensor logits, losses;       // (B, T, Vp / tp), (B·T)
    kernels::Tensor dresidual;            // (B, T, C) d loss / d residual stream, carried down
    std::vector<int32_t> tokens_host, targets_host;
    bool grads_ready = false;
    // Bytes of the slot's other buffers (a mixture of experts' per-layer ones).
    virtual int64_t other_bytes() const { return 0; }
  };
  // This chunk's shape in the activation plans (activations.h), which the families carve their
  // slots from.
  ActShape act_shape() const;
  // Activation bytes a family holds beside its slots' buffers (a mixture of experts' scratch).
  virtual int64_t family_activation_bytes() const { return 0; }

  // table: the family's (model_param_table); precision "fp32", or "bf16" (CUDA: bf16 activations
  // and weight copies, fp32 masters and gradients). tp: the tensor-parallel group (none or size 1:
  // the whole model here); with several ranks each tensor with a tp_split_dim is cut Megatron's way
  // (params.h tp_part_spec) and params() holds this rank's part only, from initialisation to
  // checkpoint. stage: the whole model by default; a pipeline stage computes only its blocks, and its
  // params() hold only its own rows. shared: a store of the table's rows that several chunks of one
  // rank compute with (interleaved pipeline stages), holding this stage's rows and outliving this
  // model; null: the model allocates its own.
  Model(const ModelConfig& config, std::vector<ParamSpec> table, int64_t batch_size, kernels::Device device,
        const std::string& precision, TpGroup tp, const ModelStage& stage, ParamStore* shared);
  // Called by the family's constructor once its Acts type is known: `stage.slots` of them.
  void allocate_slots(const std::function<std::unique_ptr<Acts>()>& make);
  template <class A>
  A& acts() const { return static_cast<A&>(*acts_); }

  // The families' initialisation: every row with std_of(spec) > 0 is drawn from one N(0, 1)
  // stream in table order, scaled by it (rows another pipeline stage holds still advance the
  // stream, so every layout draws the same model); the others are filled with fill_of(spec).
  // Padded vocabulary rows stay zero.
  void init_normal(uint64_t seed, const std::function<float(const ParamSpec&)>& std_of,
                   const std::function<float(const ParamSpec&)>& fill_of);
  // The shared start of a forward: the batch into the slot, the part and bf16 copies refreshed.
  void begin_forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, bool compute_grad);
  // The head's last part: the loss over the logits (d logits in place with compute_grad); returns
  // the mean over the counted targets.
  double head_loss(bool compute_grad);
  void begin_backward();
  // Adds one MoE layer's forward to moe_tally().
  void tally_moe(int64_t layer, double aux, const std::vector<int64_t>& counts);
  // attention_forward's row_max for this rank's heads (B, NH/tp, T), empty unless tracking; and
  // what a training forward of `layer` records from it into attention_logit_max().
  kernels::Tensor attention_row_max() const { return row_max_; }
  void note_attention_logits(int64_t layer);
  // [first, end) of the table rows given, for the ready callback.
  static std::pair<size_t, size_t> row_range(std::initializer_list<size_t> rows);
  ParamStore& compute() const { return *params_; }  // what the passes read and write

  ModelConfig config_;
  int64_t B_, T_, C_, NH_, L_, V_, Vp_;
  ModelStage stage_;
  int64_t L0_, L1_;  // this stage's blocks [L0_, L1_); per-layer activations are indexed l - L0_
  std::vector<size_t> stage_rows_;
  TpGroup tp_;
  int64_t NHl_, Vpl_;  // this rank's share of the heads and of the padded vocabulary
  kernels::Device device_;
  kernels::DType act_;
  VocabParallelCrossEntropy loss_;

 private:
  void cast_weights();

  std::unique_ptr<ParamStore> own_params_;  // null when the store is shared
  ParamStore* params_ = nullptr;            // own_params_ or the shared store
  kernels::Buffer shadow_buf_;              // bf16 copies of the weights (bf16 precision only)
  std::vector<kernels::Tensor> shadow_;
  std::vector<std::unique_ptr<Acts>> slots_;
  std::vector<double> moe_tally_;
  std::vector<double> mtp_tally_ = {0.0, 0.0};
  kernels::Buffer row_max_buf_;  // QK-clip's (tracking only)
  kernels::Tensor row_max_;
  std::vector<float> qk_max_;
  Acts* acts_ = nullptr;  // the selected slot
};

// The model of config.arch's family (gpt2 or llama) for one rank: see Model's constructor. ep: the
// expert-parallel group of a mixture of experts; with several ranks the model holds (and computes)
// only this rank's routed experts (ModelStage::expert_rank), the others' rows take no memory.
std::unique_ptr<Model> make_model(const ModelConfig& config, int64_t batch_size, kernels::Device device,
                                  const std::string& precision = "fp32", TpGroup tp = {},
                                  const ModelStage& stage = {}, ParamStore* shared = nullptr, TpGroup ep = {});

}  // namespace precon::worker
