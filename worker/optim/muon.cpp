// Muon (docs/optimizers.md, Muon) for the 2-D hidden matrices; every other parameter goes to the
// AdamW side group. Per matrix W with gradient G (s = ctx.grad_scale, μ = momentum):
//   ema: M ← μM + (1−μ)sG ; U = nesterov ? (1−μ)sG + μM : M
//   sgd: M ← μM + sG      ; U = nesterov ? sG + μM      : M
//   O = NS(U)  (split_qkv: the Q, K, V blocks of attn.c_attn separately; split_heads: each attention
//               head's block, rows along fan_out or columns along fan_in, separately)
//   variant normuon (Li et al. 2025), per output neuron n (a row of the linear map; a storage
//   column when stored (in, out)) and per NS problem b (Q/K/V block or the matrix):
//     v_n ← β2·v_n + (1−β2)·mean_j O[n,j]² ;  Ô[n,:] = O[n,:] / (√v_n + ε)
//     rms-match: O ← 0.2·√(numel_b)·Ô_b / ‖Ô_b‖_F (update RMS 0.2; no other scale);
//     else:      O ← Ô_b·‖O_b‖_F / ‖Ô_b‖_F, then the scale mode applies as below
//   W ← W·(1 − lr·wd) − lr·scale·O
// NS(Xᵀ) = NS(X)ᵀ, so the storage matrix is orthogonalised as stored; only the scale uses the
// linear map's (fan_out, fan_in), per block when split.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include "kernels/linalg.h"
#include "kernels/newton_schulz.h"
#include "worker/config/choice.h"
#include "worker/optim/ns_batch.h"
#include "worker/optim/optim_internal.h"
#include "worker/optim/work_cost.h"
#include "worker/optim/parts.h"

namespace precon::worker::optim {

using kernels::Tensor;

namespace {

enum class MomentumForm { ema, sgd };
constexpr Choice<MomentumForm> kMomentumForms[] = {{"ema", MomentumForm::ema}, {"sgd", MomentumForm::sgd}};

enum class Scale { shape, rms_match, spectral };
constexpr Choice<Scale> kScales[] = {
    {"shape", Scale::shape}, {"rms-match", Scale::rms_match}, {"spectral", Scale::spectral}};

enum class TpMode { duplicated, distributed, blockwise };
constexpr Choice<TpMode> kTpModes[] = {
    {"duplicated", TpMode::duplicated}, {"distributed", TpMode::distributed}, {"blockwise", TpMode::blockwise}};

// auto: bf16 on CUDA, fp32 on the CPU.
enum class NsPrecision { by_device, fp32, bf16 };
constexpr Choice<NsPrecision> kNsPrecisions[] = {
    {"auto", NsPrecision::by_device}, {"fp32", NsPrecision::fp32}, {"bf16", NsPrecision::bf16}};

constexpr Choice<bool> kNormuon[] = {{"muon", false}, {"normuon", true}};  // optimizer.muon.variant

double muon_scale(Scale scale, double fan_out, double fan_in) {
  if (scale == Scale::shape) return std::sqrt(std::max(1.0, fan_out / fan_in));
  if (scale == Scale::rms_match) return 0.2 * std::sqrt(std::max(fan_out, fan_in));
  return std::sqrt(fan_out / fan_in);  // spectral
}

kernels::NsOptions ns_options(const MuonConfig& c, kernels::Device device) {
  // Values were checked by make_optimizer against the key table; a named set comes from the kernels.
  kernels::NsOptions o;
  if (c.coefficients == "explicit") {
    std::vector<kernels::NsCoefficients> set;
    for (const auto& t : c.coefficient_list) {
      set.push_back({static_cast<float>(t[0]), static_cast<float>(t[1]), static_cast<float>(t[2])});
    }
    o.schedule = kernels::ns_schedule(set, static_cast<int>(c.ns_steps));
  } else {
    o.schedule = kernels::ns_schedule(c.coefficients, static_cast<int>(c.ns_steps));
  }
  o.eps = static_cast<float>(c.ns_eps);
  switch (parse_choice<OptimizerError>("optimizer.muon.ns_precision", c.ns_precision, kNsPrecisions)) {
    case NsPrecision::by_device:
      o.compute = device == kernels::Device::cuda ? kernels::DType::bf16 : kernels::DType::f32;
      break;
    case NsPrecision::fp32:
      o.compute = kernels::DType::f32;
      break;
    case NsPrecision::bf16:
      if (device != kernels::Device::cuda) {
        throw OptimizerError("optimizer.muon.ns_precision = \"bf16\" needs the CUDA device; use \"auto\" or \"fp32\"");
      }
      o.compute = kernels::DType::bf16;
      break;
  }
  return o;
}

// Who computes what with several ranks: each matrix is one unit of owned work, costed by its
// Newton–Schulz (OptimizerHooks::owners assigns the owners, worker/parallel): its owner alone keeps
// its momentum, reads its gradient (so the trainer sums it there only: gradient_roots) and
// orthogonalises it into the memory it is given; worker/parallel hands every update to every rank
// (optimizer.muon.comm_dtype), and each applies what it holds.
// Under tensor parallelism each rank holds its part of a split matrix (params.h tp_part_spec) and
// tp_mode (tensor = TP ranks, Megatron's names) says how the whole matrix is orthogonalised:
//   duplicated:  the owner (any rank) gathers the whole gradient from its tensor-parallel group and
//                orthogonalises the whole matrix: the single-process result;
//   distributed: the owner is a data-parallel index; each rank of that tensor-parallel group keeps
//                the momentum of its own part only (its chunks packed along the split dim, as
//                params.h cuts the parameter), and the group runs Newton–Schulz on the parts with
//                the Gram matrix all-reduced each step (newton_schulz_distributed): the same result;
//   blockwise:   as distributed, but each rank orthogonalises its part on its own: a result that
//                depends on parallel.tensor.
class Muon final : public Optimizer {
 public:
  Muon(const OptimizerConfig& config, const std::vector<OptimParam>& params, kernels::Device device,
       const OptimizerHooks& hooks)
      : config_(config.muon),
        lr_(config.lr),
        weight_decay_(config.weight_decay), cautious_(cautious_decay(config)),
        device_(device),
        ns_(ns_options(config.muon, device)),
        adamw_(matrix_params(params, false), adamw_hyper(config, false), device,
               hooks.distribute_elementwise ? hooks.ranges : nullptr) {
    momentum_form_ =
        parse_choice<OptimizerError>("optimizer.muon.momentum_form", config_.momentum_form, kMomentumForms);
    if (!(config_.momentum >= 0 && config_.momentum < 1)) {
      throw OptimizerError("optimizer.muon.momentum must lie in [0, 1)");
    }
    const TpMode tp_mode = parse_choice<OptimizerError>("optimizer.muon.tp_mode", config_.tp_mode, kTpModes);
    comm_dtype_ = comm_dtype("optimizer.muon.comm_dtype", config_.comm_dtype);
    normuon_ = parse_choice<OptimizerError>("optimizer.muon.variant", config_.variant, kNormuon);
    if (normuon_ && config_.split_heads)
      throw OptimizerError("optimizer.muon.split_heads is not supported with optimizer.muon.variant = \"normuon\"");
    scale_ = parse_choice<OptimizerError>("optimizer.muon.scale", config_.scale, kScales);
    tensor_ = std::max(1, hooks.tensor);
    // The groups' shape (group rank = data index · tensor + tensor rank) is checked where the
    // owners are planned (worker/parallel owner_planner).
    if (tensor_ > 1 && (!hooks.tp || !hooks.owners)) {
      throw OptimizerError("muon: tensor parallelism over " + std::to_string(tensor_) +
                           " ranks needs its tensor-parallel group and OptimizerHooks::owners");
    }
    tp_ = hooks.tp;
    mode_ = tensor_ > 1 ? tp_mode : TpMode::duplicated;
    roots_.assign(params.size(), -1);
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].spec->kind == ParamKind::matrix) add_matrix(params[i], i);
    }
    assign_and_allocate(hooks);
    if (results_->distributed()) merged_roots_ = merge_roots(params, roots_, adamw_);
  }

  void step(const StepContext& ctx) override {
    {
      PhaseTimer timer(phases_.adamw, device_);
      adamw_.step(ctx);
    }
    // First every direction, then every Newton–Schulz problem. A split matrix orthogonalised whole
    // is gathered by its owner's tensor-parallel group, every rank of it taking part, matrix by
    // matrix: gathering each just before its Newton–Schulz would make each rank of the group wait
    // out the others' problems at its next gather. The direction goes into the memory of this rank's
    // result (Newton–Schulz may read and write the same memory), so waiting costs no memory.
    batches_.begin_step();
    for (Matrix& m : matrices_) {
      Tensor grad = m.grad;
      if (m.src.split() && !on_parts(m) && results_->ours(m.unit)) {
        PhaseTimer timer(phases_.communication, device_);
        grad = results_->whole_gradient(m.src);
      }
      if (m.holds_state) momentum_and_direction(m, grad, ctx, own_view(m));
    }
    for (Matrix& m : matrices_) {
      if (!m.holds_state) continue;
      const Tensor u = config_.nesterov ? own_view(m) : m.momentum;
      // Same-shape matrices (a MoE layer's experts) go in one call once their batch is full.
      std::vector<size_t> done;
      {
        PhaseTimer timer(phases_.newton_schulz, device_);
        if (!batches_.batched(m.unit)) {
          orthogonalise(m, u);
          done.push_back(m.unit);
        } else {
          kernels::copy(batches_.slot(m.unit), u);
          batches_.filled(m.unit, ns_, [&](size_t unit, const Tensor& o) {
            kernels::copy(own_view(matrices_[unit]), o);
            done.push_back(unit);
          });
        }
      }
      if (normuon_) {
        PhaseTimer timer(phases_.other, device_);
        for (size_t unit : done) normalise(matrices_[unit]);
      }
    }
    // The results travel in chunks, each applied as it arrives, so that the receive buffer holds a
    // chunk from every rank, not every update of the model: a whole matrix's as ranges of its values
    // (the update is element-wise; under tensor parallelism the range's values in this rank's part),
    // a matrix on parts by the rank that holds that part (its pieces then arrive whole: planned with
    // one chunk).
    const double lr = lr_ * ctx.lr_scale;
    const float decay = static_cast<float>(1.0 - lr * weight_decay_);
    auto apply = [&](const Tensor& param, const Tensor& o, double scale) {
      const float alpha = static_cast<float>(-lr * scale);
      if (cautious_) kernels::cautious_axpby(param, o, alpha, decay);
      else kernels::axpby(param, o, alpha, decay);
    };
    results_->share(
        [&](size_t unit, size_t part, int64_t first, int64_t n, const float* src) {
          const Matrix& m = matrices_[unit];
          const Piece& p = m.pieces[part];
          if (!p.whole) {
            if (results_->applies(unit, part)) apply(m.param, make_view(const_cast<float*>(src), p.shape, device_), m.scale);
          } else if (m.src.split()) {
            apply_range_to_part(m.src, first, n, src, static_cast<float>(-lr * m.scale), decay, cautious_);
          } else {
            apply(make_view(m.param.f32() + first, {n}, device_), make_view(const_cast<float*>(src), {n}, device_),
                  m.scale);
          }
        },
        phases_.communication, phases_.other);
  }

  std::vector<NamedState> state_tensors() override {
    std::vector<NamedState> momenta, out;
    momentum_.append_tensors(momenta);
    for (NamedState& s : momenta) {
      const Matrix& m = matrices_[matrix_index_.at(s.param)];
      if (on_parts(m)) append_parts(m, s, out);
      else out.push_back(std::move(s));
    }
    std::vector<NamedState> second;
    second_moment_.append_tensors(second);
    for (NamedState& s : second) append_second_moment(matrices_[matrix_index_.at(s.param)], s, out);
    adamw_.append_state(out, results_->primary());
    return out;
  }
  std::vector<StateKind> state_kinds() const override {
    std::vector<StateKind> out;
    momentum_.append_kind(out);
    second_moment_.append_kind(out);
    adamw_.append_kinds(out);
    return out;
  }
  nlohmann::json state_scalars() const override { return nlohmann::json::object(); }
  void load_state_scalars(const nlohmann::json&) override {}
  PhaseSeconds phase_seconds() const override { return phases_; }
  int64_t comm_bytes() const override { return results_->comm_bytes() + adamw_.comm_bytes(); }
  // Only the owner's data-parallel index reads a matrix's gradient (its momentum lives there, or
  // under tensor parallelism its tensor-parallel group gathers it there).
  std::vector<int> gradient_roots() const override { return merged_roots_; }
  std::string routing_summary() const override {
    int64_t n = 0;
    for (const Matrix& m : matrices_) n += m.rows * m.cols;
    return route_text("muon", matrices_.size(), n) + "; " + route_text("adamw", adamw_.tensors(), adamw_.numel()) +
           (results_->distributed() ? "; " + ownership_summary() : "");
  }

 private:
  // A part of a matrix's update that one place computes and sends (a part of its unit of owned
  // work): the whole matrix, or the spans along split_dim of tensor rank r's part (on parts).
  struct Piece {
    bool whole = true;
    std::vector<Span> spans;
    std::vector<int64_t> shape;
  };
  struct Matrix {
    std::string name;
    size_t index = 0;  // in the parameters given to the constructor
    OptimParam src;    // as given
    Tensor param, grad, momentum;  // param and grad: what this rank holds (its part of a split matrix)
    int64_t rows = 0, cols = 0;    // of the whole matrix
    int qkv = 1;          // Q/K/V blocks along the fan_out storage dim (1 = none)
    int qkv_dim = 0;      // the storage dim of fan_out
    int block_dim = 0;    // the storage dim the Newton–Schulz problems lie along (qkv_dim unless by heads on fan_in)
    int blocks = 1;       // the Newton–Schulz problems along block_dim: heads, qkv under split_qkv, else 1
    bool by_head = false;  // split_heads on an attention matrix: its blocks are heads (each on one tensor rank)
    int split_dim = -1;   // the storage dim cut across tensor-parallel ranks (-1: replicated)
    double scale = 1.0;
    size_t unit = 0;      // in matrices_: its unit of owned work
    bool holds_state = false;
    std::vector<Piece> pieces;
    Tensor second_moment;  // NorMuon's v, one per output neuron this rank normalises (on state holders)
  };

  void add_matrix(const OptimParam& p, size_t index) {
    const ParamSpec& s = *p.spec;
    if (s.shape.size() != 2 || s.fan_in <= 0 || s.fan_out <= 0) {
      throw OptimizerError("muon: " + s.name + " is routed as a matrix but has no 2-D shape / fan dims");
    }
    Matrix m;
    m.name = s.name;
    m.index = index;
    m.src = p;
    m.param = visible(p.param, held_spec(p));
    m.grad = visible(p.grad, held_spec(p));
    m.rows = s.shape[0];
    m.cols = s.shape[1];
    m.qkv = std::max(1, s.qkv_blocks);
    m.qkv_dim = s.stored_in_out ? 1 : 0;
    m.by_head = config_.split_heads && s.heads > 0;
    m.block_dim = m.by_head && s.heads_on_fan_in ? 1 - m.qkv_dim : m.qkv_dim;
    m.blocks = m.by_head ? static_cast<int>((s.heads_on_fan_in ? 1 : m.qkv) * s.heads) : config_.split_qkv ? m.qkv : 1;
    m.split_dim = tensor_ > 1 ? s.tp_split_dim : -1;
    if (tensor_ > 1 && p.tp.size != tensor_)
      throw OptimizerError("muon: " + s.name + " is held in " + std::to_string(p.tp.size) + " part(s), not " +
                           std::to_string(tensor_));
    if (s.fan_out % m.qkv != 0) {
      throw OptimizerError("muon: " + s.name + " fan_out " + std::to_string(s.fan_out) + " is not divisible into " +
                           std::to_string(m.qkv) + " q/k/v blocks");
    }
    if (m.split_dim >= 0 && ((m.qkv > 1 && m.split_dim != m.qkv_dim) || s.shape[m.split_dim] % (m.qkv * tensor_) != 0)) {
      throw OptimizerError("muon: " + s.name + " cannot be cut into " + std::to_string(tensor_) +
                           " tensor-parallel parts along dim " + std::to_string(m.split_dim));
    }
    if (m.by_head) check_heads(m, s);
    // The scale of one problem's linear map: a block of fan_out's rows, or of fan_in's columns.
    const bool along_out = m.block_dim == m.qkv_dim;
    m.scale = muon_scale(scale_, static_cast<double>(s.fan_out / (along_out ? m.blocks : 1)),
                         static_cast<double>(s.fan_in / (along_out ? 1 : m.blocks)));
    if (normuon_ && scale_ == Scale::rms_match) m.scale = 1.0;  // normalise() sets the RMS itself
    matrices_.push_back(std::move(m));
  }

  // split_heads: the heads must cut the matrix into equal blocks, and a tensor-parallel cut must fall
  // between heads (each rank then holds whole heads).
  void check_heads(const Matrix& m, const ParamSpec& s) const {
    const int64_t extent = s.shape[static_cast<size_t>(m.block_dim)];
    if (extent % m.blocks != 0)
      throw OptimizerError("optimizer.muon.split_heads: " + s.name + " (" + std::to_string(extent) +
                           " along its head dim) does not divide into " + std::to_string(m.blocks) + " head blocks");
    if (m.split_dim >= 0 && (m.split_dim != m.block_dim || s.heads % tensor_ != 0))
      throw OptimizerError("optimizer.muon.split_heads: " + s.name + " is cut over " + std::to_string(tensor_) +
                           " tensor-parallel ranks across its heads' blocks (along dim " + std::to_string(m.split_dim) +
                           "); each head must lie on one rank");
  }

  // The Newton–Schulz problems of a matrix as span lists along a dim: blocks (along qkv_dim), or
  // under blockwise each block's tensor-parallel parts; by heads, the heads (along block_dim), each
  // within one rank's part.
  std::vector<std::vector<Span>> problems(const Matrix& m, int& dim) const {
    std::vector<std::vector<Span>> out;
    if (m.by_head) {
      dim = m.block_dim;
      const int64_t len = (dim == 0 ? m.rows : m.cols) / m.blocks;
      for (int b = 0; b < m.blocks; ++b) out.push_back({Span{b * len, len}});
      return out;
    }
    const bool per_part = mode_ == TpMode::blockwise && m.split_dim >= 0;
    dim = per_part ? m.split_dim : m.qkv_dim;
    const int64_t extent = dim == 0 ? m.rows : m.cols;
    for (int b = 0; b < m.blocks; ++b) {
      for (int r = 0; r < (per_part ? tensor_ : 1); ++r) {
        std::vector<Span> spans;
        for (int k = b * m.qkv / m.blocks; k < (b + 1) * m.qkv / m.blocks; ++k) {
          spans.push_back(per_part ? tp_chunk(extent, m.qkv, tensor_, k, r) : tp_chunk(extent, m.qkv, 1, k, 0));
        }
        out.push_back(std::move(spans));
      }
    }
    return out;
  }

  double cost(const Matrix& m) const {
    int dim = 0;
    double c = 0;
    for (const auto& spans : problems(m, dim)) {
      int64_t len = 0;
      for (const Span& s : spans) len += s.length;
      c += newton_schulz_cost(dim == 0 ? len : m.rows, dim == 0 ? m.cols : len);
    }
    return c;
  }

  bool distributed(const Matrix& m) const { return mode_ == TpMode::distributed && m.split_dim >= 0; }
  // The momentum and update live in parts on the owning tensor-parallel group (distributed and
  // blockwise), not whole on one rank.
  bool on_parts(const Matrix& m) const { return mode_ != TpMode::duplicated && m.split_dim >= 0; }

  // The matrices' units of owned work (a whole matrix, or on parts one piece per tensor rank),
  // their owners (hooks.owners) and the state this rank keeps for them.
  void assign_and_allocate(const OptimizerHooks& hooks) {
    std::vector<OwnedUnit> units;
    int64_t max_work = 1, max_side = 1;
    bool parts = false;
    for (size_t i = 0; i < matrices_.size(); ++i) {
      Matrix& m = matrices_[i];
      const int64_t rows = m.rows, cols = m.cols;
      m.unit = i;
      max_work = std::max(max_work, rows * cols);
      OwnedUnit u{cost(m), {}};
      if (on_parts(m)) {
        parts = true;
        for (int r = 0; r < tensor_; ++r) {
          Piece p;
          p.whole = false;
          for (int k = 0; k < m.qkv; ++k) p.spans.push_back(tp_chunk(m.split_dim == 0 ? rows : cols, m.qkv, tensor_, k, r));
          p.shape = {rows, cols};
          p.shape[m.split_dim] /= tensor_;
          m.pieces.push_back(std::move(p));
        }
        max_side = std::max(max_side, m.split_dim == 1 ? rows : cols);
      } else {
        Piece p;
        p.shape = {rows, cols};
        m.pieces.push_back(std::move(p));
      }
      for (const Piece& p : m.pieces) u.parts.push_back(p.shape[0] * p.shape[1]);
      units.push_back(std::move(u));
    }
    // A matrix on parts is applied from whole pieces: its results then travel in one chunk.
    results_ = plan_owners(hooks, units, comm_dtype_, parts ? 0 : kGatherChunk, device_);
    for (size_t i = 0; i < matrices_.size(); ++i) {
      Matrix& m = matrices_[i];
      const int64_t rows = m.rows, cols = m.cols;
      m.holds_state = results_->holds(i);
      // Each rank's part of a matrix on parts is summed at the owning data index.
      roots_[m.index] = results_->root(i);
      matrix_index_[m.name] = i;
      if (m.holds_state) {
        // On parts: this rank's part only, shaped as its piece of the update.
        const std::vector<int64_t> shape = m.pieces[results_->part(i)].shape;
        momentum_handle_.push_back(momentum_.add(m.name, -1, shape));
        // NorMuon's v: this rank's neurons when its part cuts the neuron dim, else every neuron.
        const bool cut = on_parts(m) && m.split_dim == m.qkv_dim;
        if (normuon_) second_handle_.push_back(second_moment_.add(m.name, -1, {(cut ? shape : std::vector<int64_t>{rows, cols})[static_cast<size_t>(m.qkv_dim)]}));
        else second_handle_.push_back(SIZE_MAX);
      } else {
        momentum_handle_.push_back(SIZE_MAX);
        second_handle_.push_back(SIZE_MAX);
      }
    }
    // The matrices this rank orthogonalises whole as one Newton–Schulz problem, batched by shape.
    for (const Matrix& m : matrices_)
      if (m.holds_state && !on_parts(m) && m.blocks == 1) batches_.add(m.unit, m.rows, m.cols);
    batches_.allocate(device_);
    momentum_.allocate(device_);
    second_moment_.allocate(device_);
    int64_t longest = 1;
    for (const Matrix& m : matrices_) longest = std::max({longest, m.rows, m.cols});
    neuron_buf_ = kernels::Buffer(device_, static_cast<size_t>(longest) * sizeof(float));
    work_ = kernels::Buffer(device_, static_cast<size_t>(2 * max_work + 2 * max_side * max_side) * sizeof(float));
    for (size_t i = 0; i < matrices_.size(); ++i) {
      Matrix& m = matrices_[i];
      if (m.holds_state) m.momentum = momentum_.get(momentum_handle_[i]);
      if (m.holds_state && normuon_) m.second_moment = second_moment_.get(second_handle_[i]);
    }
  }


  // A distributed matrix's momentum (this rank's part, chunk k of every Q/K/V block packed at
  // k·chunk along the split dim) as its parts of the whole momentum: one per chunk.
  void append_parts(const Matrix& m, const NamedState& own, std::vector<NamedState>& out) const {
    const Piece& p = m.pieces[results_->part(m.unit)];
    const int64_t chunk = p.spans[0].length;
    for (size_t k = 0; k < p.spans.size(); ++k) {
      NamedState part = own;
      part.tensor = own.tensor.narrow(m.split_dim, static_cast<int64_t>(k) * chunk, chunk);
      part.offset = own.offset + (part.tensor.f32() - own.tensor.f32());
      part.global_shape = {m.rows, m.cols};
      part.global_offset = {0, 0};
      part.global_offset[static_cast<size_t>(m.split_dim)] = p.spans[k].start;
      out.push_back(std::move(part));
    }
  }

  // This rank's share of the Newton–Schulz work and the momentum it keeps, for the start-up log.
  std::string ownership_summary() const {
    int64_t mine = 0, held = 0, whole = 0;
    for (const Matrix& m : matrices_) {
      mine += m.holds_state;
      if (m.holds_state) held += m.momentum.numel(), whole += m.rows * m.cols;
    }
    return "muon: " + results_->who() + " orthogonalises " + std::to_string(mine) + " of " +
           std::to_string(matrices_.size()) + " matrices (tp_mode " + std::string(choice_name(mode_, kTpModes)) +
           ") and keeps " + std::to_string(held) + " momentum values of their " + std::to_string(whole);
  }

  // The memory of this rank's result of m: its piece on parts, else the whole matrix.
  Tensor own_view(const Matrix& m) {
    return make_view(results_->own(m.unit), m.pieces[results_->part(m.unit)].shape, device_);
  }

  // The momentum update from the gradient `grad` (what this rank holds of it on parts, else the
  // whole matrix's), and with Nesterov the direction to orthogonalise, into `into` (without it the
  // direction is the momentum).
  void momentum_and_direction(Matrix& m, const Tensor& grad, const StepContext& ctx, const Tensor& into) {
    PhaseTimer timer(phases_.other, device_);
    const float mu = static_cast<float>(config_.momentum);
    const float g_weight = momentum_form_ == MomentumForm::ema ? (1.0f - mu) * ctx.grad_scale : ctx.grad_scale;
    kernels::axpby(m.momentum, grad, g_weight, mu);
    if (!config_.nesterov) return;
    kernels::copy(into, grad);
    kernels::axpby(into, m.momentum, mu, g_weight);  // U = μM + (1−μ)sG
  }

  // NS of this rank's problems of m into its piece among its results.
  void orthogonalise(Matrix& m, const Tensor& u) {
    const int64_t rows = m.rows, cols = m.cols;
    float* work = static_cast<float*>(work_.data());
    if (on_parts(m)) {
      // Each Q/K/V block (or the whole matrix) is one problem; this rank's part of block k is
      // chunk k of its piece, and u is that piece. distributed: the group's parts together;
      // blockwise: this rank's part alone.
      const Piece& p = m.pieces[results_->part(m.unit)];
      Tensor packed = make_view(results_->own(m.unit), p.shape, device_);
      if (m.by_head) {  // this rank's part holds whole heads: its own problems, the single-process result
        orthogonalise_blocks(packed, u, m.block_dim, m.blocks / tensor_, work);
        return;
      }
      const int per = m.qkv / m.blocks;
      const int64_t chunk = p.spans[0].length;
      for (int b = 0; b < m.blocks; ++b) {
        std::vector<int64_t> shape = p.shape;
        shape[m.split_dim] = per * chunk;
        Tensor x = make_view(work, shape, device_);
        gather_spans(x, u, m.split_dim, {Span{b * per * chunk, per * chunk}});
        if (distributed(m)) {
          newton_schulz_distributed(x, m.split_dim, ns_, *tp_, work + rows * cols);
        } else {
          Tensor y = make_view(work + rows * cols, shape, device_);
          kernels::newton_schulz(y, x, ns_);
          kernels::copy(x, y);
        }
        scatter_spans(packed, x, m.split_dim, {Span{b * per * chunk, per * chunk}});
      }
      return;
    }
    Tensor o = make_view(results_->own(m.unit), {rows, cols}, device_);
    int dim = 0;
    const std::vector<std::vector<Span>> list = problems(m, dim);
    if (list.size() == 1) {
      kernels::newton_schulz(o, u, ns_);
      return;
    }
    if (mode_ != TpMode::blockwise || m.split_dim < 0 || m.by_head) {
      orthogonalise_blocks(o, u, m.block_dim, m.blocks, work);
      return;
    }
    for (const std::vector<Span>& spans : list) {
      int64_t len = 0;
      for (const Span& s : spans) len += s.length;
      Tensor x = make_view(work, {dim == 0 ? len : rows, dim == 0 ? cols : len}, device_);
      Tensor y = make_view(work + rows * cols, {x.shape[0], x.shape[1]}, device_);
      gather_spans(x, u, dim, spans);
      kernels::newton_schulz(y, x, ns_);
      scatter_spans(o, y, dim, spans);
    }
  }

  // o = NS of each of `count` equal blocks of u along `dim` (o and u (rows, cols) alike), as one batch:
  // rows of the storage, or of its transpose (in `scratch`, rows·cols floats) when the blocks are
  // columns; no row-by-row copies (they would be thousands of device copies).
  void orthogonalise_blocks(const Tensor& o, const Tensor& u, int dim, int64_t count, float* scratch) const {
    const int64_t rows = u.shape[0], cols = u.shape[1];
    const int64_t block = (dim == 0 ? rows : cols) / count;
    if (dim == 0) {
      kernels::newton_schulz(Tensor::view(o.data, {count, block, cols}, kernels::DType::f32, device_),
                             Tensor::view(u.data, {count, block, cols}, kernels::DType::f32, device_), ns_);
      return;
    }
    Tensor t = make_view(scratch, {cols, rows}, device_);
    kernels::transpose(t, u);
    kernels::newton_schulz(Tensor::view(t.data, {count, block, rows}, kernels::DType::f32, device_),
                           Tensor::view(t.data, {count, block, rows}, kernels::DType::f32, device_), ns_);
    kernels::transpose(o, t);
  }

  // NorMuon's step on this rank's O (its piece among its results; see the top of the file). With
  // tp_mode distributed the tensor-parallel group holds O in parts: a part that cuts the neuron dim
  // has whole neurons (its v is theirs) and only the blocks' norms are summed over the group; a
  // part that cuts the other dim has partial sums of every neuron, summed over the group first.
  void normalise(Matrix& m) {
    const int nd = m.qkv_dim;
    const bool parts = on_parts(m);
    const Piece& p = m.pieces[results_->part(m.unit)];
    Tensor o = make_view(results_->own(m.unit), p.shape, device_);
    const int64_t n = o.shape[nd];
    const int64_t across = nd == 0 ? m.cols : m.rows;  // the neuron's length in the whole matrix
    Tensor dev = make_view(static_cast<float*>(neuron_buf_.data()), {n}, device_);
    kernels::sum_squares_along(dev, o, nd);
    std::vector<float> sums(static_cast<size_t>(n)), v(sums.size());
    kernels::copy(Tensor::view(sums.data(), {n}), dev);
    const bool cut = parts && m.split_dim == nd;
    if (parts && !cut) tp_->sum(sums.data(), n);
    kernels::copy(Tensor::view(v.data(), {n}), m.second_moment);
    // The global neuron of local index i, and its block (the NS problem it belongs to).
    const int64_t extent = nd == 0 ? m.rows : m.cols, per_block = extent / m.blocks;
    auto global = [&](int64_t i) {
      if (!cut) return i;
      const int64_t chunk = p.spans[0].length;
      return p.spans[static_cast<size_t>(i / chunk)].start + i % chunk;
    };
    const float beta2 = static_cast<float>(config_.beta2), eps = static_cast<float>(config_.eps);
    std::vector<double> before(static_cast<size_t>(2 * m.blocks), 0.0);  // ‖O_b‖², then ‖Ô_b‖²
    std::vector<float> factor(sums.size());
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      v[k] = beta2 * v[k] + (1.0f - beta2) * (sums[k] / static_cast<float>(across));
      factor[k] = 1.0f / (std::sqrt(v[k]) + eps);
      const size_t b = static_cast<size_t>(global(i) / per_block);
      before[b] += sums[k];
      before[static_cast<size_t>(m.blocks) + b] += double(sums[k]) * factor[k] * factor[k];
    }
    kernels::copy(m.second_moment, Tensor::view(v.data(), {n}));
    if (cut) tp_->sum(before.data(), static_cast<int64_t>(before.size()));
    for (int64_t i = 0; i < n; ++i) {
      const size_t b = static_cast<size_t>(global(i) / per_block);
      const double normalised = std::sqrt(before[static_cast<size_t>(m.blocks) + b]);
      const double target = scale_ == Scale::rms_match ? 0.2 * std::sqrt(double(per_block * across))
                                                       : std::sqrt(before[b]);
      factor[static_cast<size_t>(i)] *= static_cast<float>(normalised > 0 ? target / normalised : 0.0);
    }
    kernels::copy(dev, Tensor::view(factor.data(), {n}));
    kernels::scale_along(o, dev, nd);
  }

  // A matrix's v as checkpoint entries: whole (written by the first tensor-parallel rank of the
  // owners when every one of them holds it whole), or this rank's neurons, one part per Q/K/V chunk.
  void append_second_moment(const Matrix& m, const NamedState& own, std::vector<NamedState>& out) const {
    if (!on_parts(m)) {
      out.push_back(own);
      return;
    }
    const int64_t extent = m.qkv_dim == 0 ? m.rows : m.cols;
    if (m.split_dim != m.qkv_dim) {
      NamedState whole = own;
      whole.primary = results_->part(m.unit) == 0;
      out.push_back(std::move(whole));
      return;
    }
    const Piece& p = m.pieces[results_->part(m.unit)];
    const int64_t chunk = p.spans[0].length;
    for (size_t k = 0; k < p.spans.size(); ++k) {
      NamedState part = own;
      part.tensor = own.tensor.narrow(0, static_cast<int64_t>(k) * chunk, chunk);
      part.offset = own.offset + static_cast<int64_t>(k) * chunk;
      part.global_shape = {extent};
      part.global_offset = {p.spans[k].start};
      out.push_back(std::move(part));
    }
  }

  MuonConfig config_;
  double lr_, weight_decay_;
  bool cautious_;  // optimizer.weight_decay_mode = "cautious"
  kernels::Device device_;
  kernels::NsOptions ns_;
  AdamWGroup adamw_;
  std::unique_ptr<OwnedResults> results_;  // the matrices' owners and their updates' way to every rank
  std::shared_ptr<ShareGroup> tp_;
  int tensor_ = 1;
  MomentumForm momentum_form_ = MomentumForm::ema;
  Scale scale_ = Scale::shape;
  TpMode mode_ = TpMode::duplicated;  // optimizer.muon.tp_mode with tensor parallelism, else duplicated
  kernels::DType comm_dtype_ = kernels::DType::f32;  // optimizer.muon.comm_dtype
  std::vector<Matrix> matrices_;
  std::vector<int> roots_;  // the matrices' owners (-1 for the other parameters)
  std::vector<int> merged_roots_;  // gradient_roots(): with the AdamW group's
  StateBuffer momentum_{"momentum"};
  std::vector<size_t> momentum_handle_;
  bool normuon_ = false;  // optimizer.muon.variant = "normuon"
  StateBuffer second_moment_{"second_moment"};  // NorMuon's per-neuron v
  std::vector<size_t> second_handle_;
  kernels::Buffer neuron_buf_;  // one value per neuron of a matrix (sums of squares, then factors)
  std::map<std::string, size_t> matrix_index_;  // matrices_ by parameter name
  kernels::Buffer work_;
  NsBatches batches_;  // the same-shape matrices orthogonalised together
  PhaseSeconds phases_;
};

}  // namespace

std::unique_ptr<Optimizer> make_muon(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                     kernels::Device device, const OptimizerHooks& hooks) {
  return std::make_unique<Muon>(config, params, device, hooks);
}

}  // namespace precon::worker::optim
