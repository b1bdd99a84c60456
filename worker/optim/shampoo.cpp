// Shampoo with Distributed Shampoo's semantics (docs/optimizers.md, Shampoo), per block G of a
// routed 2-D weight (s = ctx.grad_scale, t = ctx.step):
//   L ← β2·L + w·(sG)(sG)ᵀ ; R ← β2·R + w·(sG)ᵀ(sG)     w = 1 − β2, or 1 when β2 = 1 (running sum)
//   bc2 = bias_correction and β2 < 1 ? 1 − β2^t : 1    (a running sum is not bias-corrected)
//   refresh when (t % frequency == 0 and t > start) or t == start:
//     L⁻ = (L/bc2 + εI)^(−e), R⁻ likewise  (e = exponent, default 1/4; a failure keeps the old root)
//   M ← β1·M + (1−β1)·sG ;  Ĝ = M / bc1,  bc1 = bias_correction ? 1 − β1^t : 1
//   grafting direction P_graft (βg = grafting_beta2, εg = grafting_epsilon, V starts at 0):
//     adam:    V ← βg·V + (1−βg)·(sG)² ; P_graft = Ĝ / (√(V / (1 − βg^t)) + εg)
//     rmsprop: V ← βg·V + (1−βg)·(sG)² ; P_graft = Ĝ / (√V + εg)
//     adagrad: V ← V + (sG)²           ; P_graft = Ĝ / (√V + εg)
//     sgd:     P_graft = Ĝ
//     none:    P_graft = Ĝ, and the preconditioned P is not rescaled
//   P = t < start ? P_graft : L⁻ Ĝ R⁻ · ‖P_graft‖_F / (‖L⁻ Ĝ R⁻‖_F + 1e-16)
//   W ← W·(1 − lr·wd) − lr·P
// Blocks: each dim is cut into chunks of max_preconditioner_dim (the last one shorter); every
// block has its own M, V, L, R, L⁻, R⁻ and failure count, and its own grafting norm. Each of these
// state kinds is one allocation holding every block's tensor, blocks in parameter-table order.
// With several ranks each block is one unit of owned work (OptimizerHooks::owners, costed by its
// refresh): only the rank told it owns a block holds and updates its state and computes its
// direction into the memory it is given; worker/parallel hands all directions to all
// (optimizer.shampoo.comm_dtype) and every rank applies them; a refresh ends with one max over the
// blocks' failure flags, so failures count globally.
#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/error.h"
#include "kernels/inverse_root.h"
#include "kernels/linalg.h"
#include "kernels/nn.h"
#include "worker/config/choice.h"
#include "worker/optim/optim_internal.h"
#include "worker/optim/parts.h"

namespace precon::worker::optim {

using kernels::Tensor;
using kernels::Trans;

namespace {

enum class Grafting : uint8_t { adam, rmsprop, adagrad, sgd, none };

constexpr Choice<Grafting> kGraftings[] = {{"adam", Grafting::adam},
                                            {"rmsprop", Grafting::rmsprop},
                                            {"adagrad", Grafting::adagrad},
                                            {"sgd", Grafting::sgd},
                                            {"none", Grafting::none}};

constexpr Choice<kernels::RootMethod> kRootMethods[] = {{"eigh", kernels::RootMethod::eigh},
                                                        {"newton", kernels::RootMethod::newton}};

// optimizer.shampoo.params: the hidden matrices only, or also the 2-D embeddings.
constexpr Choice<bool> kAllMatrices[] = {{"hidden", false}, {"all-matrices", true}};

bool has_grafting_state(Grafting g) { return g == Grafting::adam || g == Grafting::rmsprop || g == Grafting::adagrad; }

bool routed(const ParamSpec& s, bool all_matrices) {
  if (s.kind == ParamKind::matrix) return true;
  return all_matrices && s.shape.size() == 2 &&
         (s.kind == ParamKind::embedding || s.kind == ParamKind::position);
}

std::vector<std::pair<int64_t, int64_t>> chunks(int64_t n, int64_t size) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t start = 0; start < n; start += size) out.emplace_back(start, std::min(size, n - start));
  return out;
}

// adagrad on CPU tensors: V += (sG)² ; P = (M / bc1) / (√V + ε). No kernel composes "+= x²".
void adagrad_direction(Tensor p, Tensor v, const Tensor& g, const Tensor& m, float s, float inv_bc1, float eps) {
  const int64_t n = p.numel();
  float* pp = p.f32();
  float* pv = v.f32();
  const float* pg = g.f32();
  const float* pm = m.f32();
  for (int64_t i = 0; i < n; ++i) {
    const float gi = s * pg[i];
    pv[i] += gi * gi;
    pp[i] = (pm[i] * inv_bc1) / (std::sqrt(pv[i]) + eps);
  }
}

class Shampoo final : public Optimizer {
 public:
  Shampoo(const OptimizerConfig& config, const std::vector<OptimParam>& params, kernels::Device device,
          const OptimizerHooks& hooks)
      : config_(config.shampoo),  // checked by make_optimizer against the key table
        grafting_(parse_choice<OptimizerError>("optimizer.shampoo.grafting", config_.grafting, kGraftings)),
        lr_(config.lr),
        weight_decay_(config.weight_decay), cautious_(cautious_decay(config)),
        start_(config_.start_preconditioning_step > 0 ? config_.start_preconditioning_step
                                                       : config_.precondition_frequency),
        device_(device),
        hooks_(hooks),
        all_matrices_(parse_choice<OptimizerError>("optimizer.shampoo.params", config_.params, kAllMatrices)),
        adamw_(side_params(params, all_matrices_), adamw_hyper(config, false), device,
               hooks.distribute_elementwise ? hooks.ranges : nullptr) {
    if (grafting_ == Grafting::adagrad && device == kernels::Device::cuda) {
      throw OptimizerError("optimizer.shampoo.grafting = \"adagrad\" runs on CPU tensors only; "
                           "use adam, rmsprop, sgd or none on CUDA");
    }
    const kernels::DType comm = comm_dtype("optimizer.shampoo.comm_dtype", config_.comm_dtype);
    root_.root = 1.0 / (config_.exponent > 0 ? config_.exponent : 0.25);
    root_.epsilon = static_cast<float>(config_.epsilon);
    root_.method = parse_choice<OptimizerError>("optimizer.shampoo.root_method", config_.root_method, kRootMethods);
    for (const OptimParam& p : params) {
      const ParamSpec& s = *p.spec;
      if (!routed(s, all_matrices_)) continue;
      if (s.shape.size() != 2) throw OptimizerError("shampoo: " + s.name + " is routed but not 2-D");
      matrices_.push_back({s.name, visible(p.param, held_spec(p)), p, s.shape[1]});
      int index = 0;
      for (auto [r0, rn] : chunks(s.shape[0], config_.max_preconditioner_dim)) {
        for (auto [c0, cn] : chunks(s.shape[1], config_.max_preconditioner_dim)) {
          Block b;
          b.matrix = matrices_.size() - 1;
          b.unit = blocks_.size();
          b.index = index++;
          b.name = s.name + ".block" + std::to_string(b.index);
          b.r0 = r0, b.rn = rn, b.c0 = c0, b.cn = cn;
          blocks_.push_back(std::move(b));
        }
      }
    }
    // Each block is a unit of owned work, costed by its refresh (two inverse roots, ≈ n³ each);
    // only its owner keeps its state and computes its direction.
    std::vector<OwnedUnit> units;
    for (const Block& b : blocks_)
      units.push_back({std::pow(static_cast<double>(b.rn), 3) + std::pow(static_cast<double>(b.cn), 3), {b.rn * b.cn}});
    results_ = plan_owners(hooks, units, comm, 0, device);
    int64_t max_block = 1, max_side = 1;
    std::vector<size_t> handle(blocks_.size(), SIZE_MAX);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      Block& b = blocks_[i];
      const std::string& name = matrices_[b.matrix].name;
      max_block = std::max(max_block, b.rn * b.cn);
      max_side = std::max({max_side, b.rn, b.cn});
      if (!mine(b)) continue;
      b.out = results_->own(i);
      handle[i] = momentum_.add(name, b.index, {b.rn, b.cn});
      if (has_grafting_state(grafting_)) grafting_state_.add(name, b.index, {b.rn, b.cn});
      L_.add(name, b.index, {b.rn, b.rn});
      R_.add(name, b.index, {b.cn, b.cn});
      L_inv_.add(name, b.index, {b.rn, b.rn});
      R_inv_.add(name, b.index, {b.cn, b.cn});
    }
    for (StateBuffer* state : state_buffers()) state->allocate(device);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      if (handle[i] == SIZE_MAX) continue;
      Block& b = blocks_[i];
      const size_t h = handle[i];  // every kind holds this rank's blocks in the same order
      b.momentum = momentum_.get(h);
      if (has_grafting_state(grafting_)) b.grafting = grafting_state_.get(h);
      b.L = L_.get(h);
      b.R = R_.get(h);
      b.L_inv = L_inv_.get(h);
      b.R_inv = R_inv_.get(h);
      set_identity(b.L_inv);
      set_identity(b.R_inv);
    }
    // Scratch: four block-sized views, then the factor copy and the identity (max_side² each).
    work_ = kernels::Buffer(device, static_cast<size_t>(4 * max_block + 2 * max_side * max_side) * sizeof(float));
    float* base = static_cast<float*>(work_.data());
    scratch_ = {base, base + max_block, base + 2 * max_block, base + 3 * max_block, base + 4 * max_block};
    eye_ = Tensor::view(base + 4 * max_block + max_side * max_side, {max_side, max_side}, kernels::DType::f32, device);
    set_identity(eye_);
    roots_ = merge_roots(params, {}, adamw_);
    adamw_primary_ = results_->primary();
  }

  // Owners update their blocks' statistics, roots and grafting state and put each block's search
  // direction where they are told; the results' share (every rank, every step, also one owning no
  // block) hands all directions to all, and every rank applies every block alike.
  void step(const StepContext& ctx) override {
    {
      PhaseTimer timer(phases_.adamw, device_);
      adamw_.step(ctx);
    }
    const int64_t t = ctx.step;
    const bool refresh_now = (t % config_.precondition_frequency == 0 && t > start_) || t == start_;
    // First every tensor-parallel matrix's whole gradient, gathered with every rank of the group
    // matrix by matrix, then every block's work: gathering each matrix just before its blocks' work
    // would make each rank wait out the others' blocks at its next gather. An owner keeps its
    // blocks' gradients in the memory of their results until their directions are computed there
    // (the direction reads the gradient before it writes).
    for (size_t mi = 0, bi = 0; mi < matrices_.size(); ++mi) {
      const bool split = matrices_[mi].src.split();
      Tensor whole;
      if (split) {
        PhaseTimer timer(phases_.communication, device_);
        whole = results_->whole_gradient(matrices_[mi].src);
      }
      for (; bi < blocks_.size() && blocks_[bi].matrix == mi; ++bi) {
        Block& b = blocks_[bi];
        if (!split || !mine(b)) continue;
        PhaseTimer timer(phases_.statistics, device_);
        kernels::copy(scratch(b.out, b.rn, b.cn), block_grad(b, whole));
      }
    }
    size_t bi = 0;
    for (size_t mi = 0; mi < matrices_.size(); ++mi) {
      const bool split = matrices_[mi].src.split();
      const Tensor whole = split ? Tensor{} : results_->whole_gradient(matrices_[mi].src);  // no communication
      for (; bi < blocks_.size() && blocks_[bi].matrix == mi; ++bi) {
        Block& b = blocks_[bi];
        if (!mine(b)) continue;
        Tensor g;
        {
          PhaseTimer timer(phases_.statistics, device_);
          g = split ? scratch(b.out, b.rn, b.cn) : block_grad(b, whole);
          accumulate_statistics(b, g, ctx.grad_scale);
        }
        if (refresh_now) {
          PhaseTimer timer(phases_.inverse_root, device_);
          b.why = compute_roots(b, bias_correction2(t));
        }
        direction(b, g, ctx);
      }
    }
    if (refresh_now) account_refresh(t);
    const double lr = lr_ * ctx.lr_scale;
    // Each direction arrives whole (one chunk): the blocks are applied as 2-D boxes.
    results_->share(
        [&](size_t unit, size_t, int64_t, int64_t, const float* values) {
          const Block& b = blocks_[unit];
          apply(b, scratch(const_cast<float*>(values), b.rn, b.cn), lr);
        },
        phases_.communication, phases_.other);
  }

  // This rank's share of the blocks, for the start-up log.
  std::string ownership_summary() const {
    int64_t n = 0;
    for (const Block& b : blocks_) n += mine(b);
    return "shampoo: " + results_->who() + " computes the inverse roots of " + std::to_string(n) +
           " of " + std::to_string(blocks_.size()) + " blocks";
  }

  std::vector<NamedState> state_tensors() override {
    return owner_state_tensors(std::as_const(*this).state_buffers(), adamw_, adamw_primary_);
  }
  std::vector<StateKind> state_kinds() const override { return owner_state_kinds(state_buffers(), adamw_); }

  // {"consecutive_root_failures": {"<param>.block<i>": n, ...}}
  nlohmann::json state_scalars() const override {
    nlohmann::json failures = nlohmann::json::object();
    for (const Block& b : blocks_) failures[b.name] = b.failures;
    return {{"consecutive_root_failures", failures}, {"inverse_root_failures", root_failures_}};
  }

  void load_state_scalars(const nlohmann::json& scalars) override {
    root_failures_ = scalars.value("inverse_root_failures", int64_t{0});  // absent in older checkpoints
    if (!scalars.contains("consecutive_root_failures")) return;
    for (Block& b : blocks_) b.failures = 0;
    for (const auto& [name, value] : scalars.at("consecutive_root_failures").items()) {
      auto it = std::find_if(blocks_.begin(), blocks_.end(), [&](const Block& b) { return b.name == name; });
      if (it == blocks_.end()) {
        throw OptimizerError("shampoo state names block '" + name +
                             "', which this model/blocking does not have: was the checkpoint written with another "
                             "model shape or max_preconditioner_dim?");
      }
      it->failures = value.get<int64_t>();
    }
  }

  PhaseSeconds phase_seconds() const override { return phases_; }
  int64_t inverse_root_failures() const override { return root_failures_; }
  int64_t comm_bytes() const override { return results_->comm_bytes() + adamw_.comm_bytes(); }
  // The matrices' gradients are read by every rank (their blocks' owners are spread over rows and
  // columns); the AdamW group's by the rank whose range holds them when it is sharded.
  std::vector<int> gradient_roots() const override { return roots_; }

  std::string routing_summary() const override {
    int64_t n = 0;
    for (const Matrix& m : matrices_) n += m.src.spec->numel();
    return route_text("shampoo", matrices_.size(), n) + " in " + std::to_string(blocks_.size()) + " blocks; " +
           route_text("adamw", adamw_.tensors(), adamw_.numel()) +
           (results_->distributed() ? "; " + ownership_summary() : "");
  }

 private:
  struct Matrix {
    std::string name;
    Tensor param;     // what this rank holds (its part of a tensor-parallel matrix)
    OptimParam src;   // as given
    int64_t cols = 0; // of the whole visible matrix
  };
  struct Block {
    size_t matrix = 0;
    size_t unit = 0;   // in blocks_: its unit of owned work
    int index = 0;     // within its parameter
    std::string name;  // "<param>.block<i>", blocks numbered row-major
    int64_t r0 = 0, rn = 0, c0 = 0, cn = 0;
    Tensor momentum, grafting, L, R, L_inv, R_inv;  // on the owner only
    int64_t failures = 0;  // consecutive failed refreshes (known on every rank)
    float* out = nullptr;  // on the owner: where its direction goes (results_->own)
    std::string why;       // on the owner: why the last refresh failed ("" = it did not)
  };

  bool mine(const Block& b) const { return results_->mine(b.unit); }

  static std::vector<OptimParam> side_params(const std::vector<OptimParam>& params, bool all_matrices) {
    std::vector<OptimParam> out;
    for (const OptimParam& p : params) {
      if (!routed(*p.spec, all_matrices)) out.push_back(p);
    }
    return out;
  }

  void set_identity(Tensor t) {
    const int64_t n = t.shape[0];
    std::vector<float> host(static_cast<size_t>(n * n), 0.0f);
    for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i * n + i)] = 1.0f;
    kernels::copy(t, Tensor::view(host.data(), {n, n}));
  }

  // The per-block state kinds, in the order they are checkpointed.
  std::vector<StateBuffer*> state_buffers() { return {&momentum_, &grafting_state_, &L_, &R_, &L_inv_, &R_inv_}; }
  std::vector<const StateBuffer*> state_buffers() const {
    return {&momentum_, &grafting_state_, &L_, &R_, &L_inv_, &R_inv_};
  }

  Tensor scratch(float* base, int64_t rows, int64_t cols) const {
    return Tensor::view(base, {rows, cols}, kernels::DType::f32, device_);
  }

  // Refreshes one factor's inverse root; returns an empty string or why it failed.
  std::string refresh_root(Tensor inv, const Tensor& factor, double bc2) {
    const int64_t n = factor.shape[0];
    Tensor a = scratch(scratch_.factor, n, n);
    kernels::copy(a, factor);
    if (bc2 != 1.0) kernels::scale(a, static_cast<float>(1.0 / bc2));
    try {
      kernels::matrix_inverse_root(inv, a, root_);
    } catch (const kernels::NumericalError& e) {
      return e.what();
    } catch (const kernels::NonFiniteError& e) {
      return e.what();
    }
    return {};
  }

  // Both inverse roots of a block; "" or why one failed ("L: ..." / "R: ...").
  std::string compute_roots(Block& b, double bc2) {
    std::string why = refresh_root(b.L_inv, b.L, bc2);
    if (!why.empty()) return "L: " + why;
    why = refresh_root(b.R_inv, b.R, bc2);
    return why.empty() ? "" : "R: " + why;
  }

  // After a refresh: one max over every block's failure flag (every rank, also one without
  // blocks), so each rank counts every failure and all stop at the same step if they must.
  void account_refresh(int64_t t) {
    std::vector<int64_t> failed(blocks_.size(), 0);
    for (size_t i = 0; i < blocks_.size(); ++i) failed[i] = mine(blocks_[i]) && !blocks_[i].why.empty();
    {
      PhaseTimer comm(phases_.communication, device_);
      results_->max(failed.data(), static_cast<int64_t>(failed.size()));
    }
    for (size_t i = 0; i < blocks_.size(); ++i) {
      Block& b = blocks_[i];
      const std::string why = failed[i] ? (mine(b) ? b.why : "on rank " + std::to_string(results_->owner(b.unit))) : "";
      account(b, t, why, mine(b));
    }
  }

  // Counts a refresh's outcome (`warn`: this rank says so in the log); throws after too many
  // consecutive failures.
  void account(Block& b, int64_t t, std::string why, bool warn = true) {
    const char* which = why.rfind("R: ", 0) == 0 ? "R" : "L";
    if (why.rfind("L: ", 0) == 0 || why.rfind("R: ", 0) == 0) why = why.substr(3);
    if (why.empty()) {
      b.failures = 0;
      return;
    }
    ++b.failures;
    ++root_failures_;
    const std::string what = "shampoo: inverse root of " + std::string(which) + " for " + matrices_[b.matrix].name +
                             " block " + b.name.substr(b.name.rfind(".block") + 6) + " failed at step " +
                             std::to_string(t) + " (" + why + ")";
    if (b.failures > config_.max_root_failures) {
      throw OptimizerError(what + "; " + std::to_string(b.failures) +
                           " consecutive failures exceed optimizer.shampoo.max_root_failures = " +
                           std::to_string(config_.max_root_failures) +
                           ". Non-finite gradients or ill-conditioned statistics: lower the learning rate, enable "
                           "gradient clipping or raise optimizer.shampoo.epsilon");
    }
    if (hooks_.warn && warn) {
      hooks_.warn(what + "; keeping the previous root (" + std::to_string(b.failures) + " in a row, at most " +
                  std::to_string(config_.max_root_failures) + ")");
    }
  }

  double bias_correction2(int64_t t) const {
    const double beta2 = config_.beta2;
    return config_.bias_correction && beta2 < 1.0 ? 1.0 - std::pow(beta2, static_cast<double>(t)) : 1.0;
  }

  // The block's gradient from the whole matrix's: a view when it is a contiguous row range, else a copy.
  Tensor block_grad(const Block& b, const Tensor& whole) {
    Tensor gv = whole.narrow(0, b.r0, b.rn);
    if (b.cn == whole.shape[1]) return gv;
    Tensor g = scratch(scratch_.block_grad, b.rn, b.cn);
    Tensor gt = scratch(scratch_.product, b.cn, b.rn);
    kernels::transpose(gt, gv.narrow(1, b.c0, b.cn));
    kernels::transpose(g, gt);
    return g;
  }

  void accumulate_statistics(Block& b, const Tensor& g, float s) {
    const double beta2 = config_.beta2;
    const float w = static_cast<float>((beta2 == 1.0 ? 1.0 : 1.0 - beta2) * double(s) * double(s));
    kernels::syrk(b.L, g, Trans::no, w, static_cast<float>(beta2));
    kernels::syrk(b.R, g, Trans::yes, w, static_cast<float>(beta2));
  }

  // The block's search direction (grafted and rescaled), into its place among this rank's results.
  void direction(Block& b, const Tensor& g, const StepContext& ctx) {
    const int64_t t = ctx.step;
    const float s = ctx.grad_scale;
    const double bc1 = config_.bias_correction ? 1.0 - std::pow(config_.beta1, static_cast<double>(t)) : 1.0;
    Tensor ghat = scratch(scratch_.momentum_hat, b.rn, b.cn);
    Tensor pg = scratch(scratch_.graft_dir, b.rn, b.cn);
    Tensor p = scratch(b.out, b.rn, b.cn);
    Tensor tmp = scratch(scratch_.product, b.rn, b.cn);
    double graft_norm = 0.0;
    {
      PhaseTimer timer(phases_.grafting, device_);
      graft(b, g, pg, t, s, bc1);
      kernels::copy(ghat, b.momentum);
      if (bc1 != 1.0) kernels::scale(ghat, static_cast<float>(1.0 / bc1));
      if (grafting_ != Grafting::none) graft_norm = std::sqrt(kernels::sum_squares(has_grafting_state(grafting_) ? pg : ghat));
    }
    PhaseTimer timer(phases_.other, device_);
    if (t < start_) {
      kernels::copy(p, has_grafting_state(grafting_) ? pg : ghat);
      return;
    }
    kernels::gemm(tmp, b.L_inv, ghat);
    kernels::gemm(p, tmp, b.R_inv);
    if (grafting_ != Grafting::none) kernels::scale(p, static_cast<float>(graft_norm / (std::sqrt(kernels::sum_squares(p)) + 1e-16)));
  }

  // W ← W·(1 − lr·wd) − lr·P for one block, on every rank.
  void apply(const Block& b, const Tensor& direction, double lr) {
    const Matrix& mat = matrices_[b.matrix];
    const float alpha = static_cast<float>(-lr), decay = static_cast<float>(1.0 - lr * weight_decay_);
    if (mat.src.split()) {  // this rank's part of the block
      apply_box_to_part(mat.src, b.r0, b.c0, direction, alpha, decay, cautious_);
      return;
    }
    Tensor wv = mat.param.narrow(0, b.r0, b.rn);
    if (cautious_) {
      // Row by row (a column block's rows are contiguous pieces of the storage's).
      for (int64_t r = 0; r < b.rn; ++r)
        kernels::cautious_axpby(wv.select(r).narrow(0, b.c0, b.cn), direction.select(r), alpha, decay);
    } else if (b.cn == mat.cols) {
      kernels::axpby(wv, direction, alpha, decay);
    } else {
      // A column block of the storage is strided and axpby needs contiguous operands: W = I·P·α + W·β.
      kernels::gemm(wv.narrow(1, b.c0, b.cn), eye_.narrow(0, 0, b.rn).narrow(1, 0, b.rn), direction, Trans::no,
                    Trans::no, alpha, decay);
    }
  }

  // Momentum and the grafting direction pg (adam and rmsprop fused in one adamw_update call:
  // with lr = −1 and no weight decay it leaves −lr·m/bc1/(√(v/bc2)+ε) in a zeroed "parameter").
  void graft(Block& b, const Tensor& g, Tensor pg, int64_t t, float s, double bc1) {
    const float beta1 = static_cast<float>(config_.beta1);
    if (grafting_ == Grafting::adam || grafting_ == Grafting::rmsprop) {
      kernels::AdamWParams hp;
      hp.beta1 = beta1;
      hp.beta2 = static_cast<float>(config_.grafting_beta2);
      hp.eps = static_cast<float>(config_.grafting_epsilon);
      hp.weight_decay = 0.0f;
      hp.step = static_cast<int>(t);
      hp.grad_scale = s;
      // adam: the kernel applies 1 − β1^t and 1 − βg^t; lr = −bc1·(1/(1 − β1^t)) undoes the
      // former when bias_correction is off. rmsprop: no kernel corrections, lr = −1/bc1.
      hp.bias_correction = grafting_ == Grafting::adam;
      const double kernel_bc1 = 1.0 - std::pow(config_.beta1, static_cast<double>(t));
      hp.lr = grafting_ == Grafting::adam ? static_cast<float>(-bc1 / kernel_bc1) : static_cast<float>(-1.0 / bc1);
      kernels::fill_zero(pg);
      kernels::adamw_update(pg, g, b.momentum, b.grafting, hp);
      return;
    }
    kernels::axpby(b.momentum, g, (1.0f - beta1) * s, beta1);
    if (grafting_ == Grafting::adagrad) {
      adagrad_direction(pg, b.grafting, g, b.momentum, s, static_cast<float>(1.0 / bc1),
                        static_cast<float>(config_.grafting_epsilon));
    }
  }

  ShampooConfig config_;
  Grafting grafting_;
  double lr_, weight_decay_;
  bool cautious_;  // optimizer.weight_decay_mode = "cautious"
  int64_t start_;
  kernels::Device device_;
  OptimizerHooks hooks_;
  bool all_matrices_;  // optimizer.shampoo.params = "all-matrices"
  AdamWGroup adamw_;
  kernels::InverseRootOptions root_;
  std::vector<Matrix> matrices_;
  std::vector<Block> blocks_;
  // One allocation per state kind, blocks in parameter-table order (see StateKind).
  StateBuffer momentum_{"momentum"}, grafting_state_{"grafting_" + config_.grafting};
  StateBuffer L_{"L"}, R_{"R"}, L_inv_{"L_inv_root"}, R_inv_{"R_inv_root"};
  // Scratch views of one block's update, carved out of work_ (rn x cn unless noted).
  struct Scratch {
    float* block_grad;    // the block's gradient, copied when it is a column range of the storage
    float* momentum_hat;  // Ĝ = M / bc1
    float* graft_dir;     // P_graft
    float* product;       // L⁻ Ĝ; before that, the transposed column block (cn x rn)
    float* factor;        // L or R scaled by 1/bc2 for its inverse root (n x n)
  };
  kernels::Buffer work_;
  Scratch scratch_{};
  Tensor eye_;
  PhaseSeconds phases_;
  int64_t root_failures_ = 0;  // every failed refresh over the run, on every rank (checkpointed)
  std::unique_ptr<OwnedResults> results_;  // the blocks' owners and their directions' way to every rank
  std::vector<int> roots_;
  bool adamw_primary_ = true;             // this rank writes the replicated AdamW state (data index 0)
};

}  // namespace

std::unique_ptr<Optimizer> make_shampoo(const OptimizerConfig& config, const std::vector<OptimParam>& params,
                                        kernels::Device device, const OptimizerHooks& hooks) {
  return std::make_unique<Shampoo>(config, params, device, hooks);
}

}  // namespace precon::worker::optim
