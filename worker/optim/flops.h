// The optimizers' own FLOPs per step, over the whole model (every rank together: the owners of
// the distributed optimizers split the work, the total is the same), to set beside the model's
// forward + backward FLOPs (Model::flops_per_token) so that optimizers compare at equal compute.
// The trainer reports the cumulative count as optim_flops and flops + optim_flops as compute_flops.
//
// What is counted: the algorithm as worker/optim/*.cpp states it at the top of each file, over
// the parameters routed as the optimizer routes them (Muon and SOAP: ParamKind::matrix; Shampoo:
// also the 2-D embeddings under params = "all-matrices"; everything else to the AdamW group).
//   - Matrix products: 2·m·n·k for each (m×k)(k×n) product, dense, as written (X Xᵀ, A², G Gᵀ count
//     as full products although the kernels halve them with SYRK). This is what PyTorch's flop
//     counters count (FlopCounterMode, the profiler's with_flops), and tests check it against them.
//   - Decompositions at the textbook counts of Golub & Van Loan, Matrix Computations (4th ed.;
//     a multiply-add counts 2), whatever LAPACK/cuSOLVER routine runs them: see kEighCube, kQrCube.
//   - Element-wise work at the per-element constants below (sqrt and division count 1 each).
//   - Not counted: copies, transposes, permutations, communication, work repeated on several ranks
//     (Muon's tp_mode = distributed forms its Gram matrix over the unsplit dim and squares it on
//     every tensor-parallel rank), products with an identity done for layout reasons, fp64 retries.
// Thread-safety: the functions are pure; an OptimizerFlopCount is immutable once built.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/newton_schulz.h"
#include "worker/config/config.h"
#include "worker/model/params.h"

namespace precon::worker {

// Textbook decomposition counts, as multiples of n³ for an n×n matrix.
// Symmetric eigendecomposition with the eigenvectors (Shampoo's eigh roots, SOAP's first basis):
// the symmetric QR algorithm with Q accumulated, ≈ 9n³ (G&VL §8.3, Algorithm 8.3.3; 4/3·n³ for
// the eigenvalues alone). Divide and conquer (LAPACK's syevd, used here) is often faster; the
// convention keeps counts comparable across libraries.
constexpr double kEighCube = 9.0;
// Shampoo's eigh root then forms Q diag(d) Qᵀ: one dense n×n×n product.
constexpr double kEigenReconstructCube = 2.0;
// SOAP's refresh, QR of an n×n matrix with Q formed explicitly: Householder factorisation
// 2n²(m − n/3) = 4/3·n³ (G&VL Algorithm 5.2.1) plus backward accumulation of Q
// 4(m²n − mn² + n³/3) = 4/3·n³ (G&VL §5.1.6), m = n.
constexpr double kQrCube = 8.0 / 3.0;

// Element-wise FLOPs per element, from the kernels that run.
constexpr double kAdamWPerElement = 15;     // kernels::adamw_update: s·g 1, m 3, v 4, update 5, decay 2
constexpr double kAxpbyPerElement = 3;      // y ← αx + βy: momenta, Nesterov, W ← decay·W − lr·O
constexpr double kCautiousPerElement = 2;   // weight_decay_mode = cautious adds the sign test
constexpr double kNormPerElement = 2;       // ‖X‖² (a multiply and an add)
constexpr double kScalePerElement = 1;      // X ← αX
constexpr double kAdagradPerElement = 7;    // Shampoo's adagrad grafting after the momentum
constexpr double kFactorEmaPerElement = 3;  // L ← β·L + w·G Gᵀ (scale, scale, add)
constexpr double kNorMuonPerElement = 3;    // row sums of squares 2, row scaling 1
constexpr double kNorMuonPerNeuron = 10;    // v's EMA, √v + ε, the per-block norms and factors
constexpr double kEigenvaluePerValue = 3;   // eigh root: clamp, + ε, power per eigenvalue
constexpr double kSoapEstimatePerElement = 2;  // λ̃_j = Σ_i Q[i,j]·P[i,j]

// FLOPs of a piece of work, split by kind.
struct FlopSplit {
  double matmul = 0;         // matrix products, 2·m·n·k each
  double decomposition = 0;  // eigendecompositions and QRs at the counts above
  double elementwise = 0;    // element-wise work at the constants above
  double total() const { return matmul + decomposition + elementwise; }
  FlopSplit& operator+=(const FlopSplit& o);
};
FlopSplit operator+(FlopSplit a, const FlopSplit& b);
FlopSplit operator*(double k, const FlopSplit& a);

// ---- One piece of an optimizer step (checked against PyTorch by the tests) ----

// One Newton–Schulz orthogonalisation of a rows × cols matrix, on the wide orientation (m = the
// shorter side, n = the longer): ‖X‖ and the scaling 3mn; per step (a, b, c): A = X Xᵀ 2m²n,
// A² 2m³ (none when c = 0), B = bA + cA² 3m² (m² when c = 0), BX 2m²n, + aX 2mn.
FlopSplit newton_schulz_flops(int64_t rows, int64_t cols, const std::vector<kernels::NsCoefficients>& schedule);

// Shampoo's statistics of one rows × cols block: L ← β·L + w·G Gᵀ and R ← β·R + w·Gᵀ G.
FlopSplit shampoo_statistics_flops(int64_t rows, int64_t cols);
// Shampoo's preconditioned direction of one block: L⁻ Ĝ R⁻ (the products only).
FlopSplit shampoo_precondition_flops(int64_t rows, int64_t cols);

// One inverse root (A/bc2 + εI)^(−1/p) of an n × n factor. eigh: the decomposition, the map of
// the eigenvalues, Q diag(d) Qᵀ. newton (p an integer): per iteration X·T, T^p by repeated
// squaring (⌊log₂p⌋ + popcount(p) − 1 products), T^p·M, and the element-wise T and residual.
struct RootFlopOptions {
  bool newton = false;            // optimizer.shampoo.root_method = "newton"
  double p = 4;                   // the root: 1 / optimizer.shampoo.exponent (default 1/4)
  int64_t newton_iterations = 20; // see FlopOptions
  bool bias_corrected = false;    // the factor is divided by bc2 first (n² more)
};
FlopSplit inverse_root_flops(int64_t n, const RootFlopOptions& options);

// SOAP: one rotation of a rows × cols matrix into the eigenbases (Q_Lᵀ X Q_R) or out of them
// (Q_L X Q_Rᵀ), over the rotated sides only.
FlopSplit soap_rotation_flops(int64_t rows, int64_t cols, bool left, bool right);
// SOAP: the refresh of one rotated side of n: the power step L·Q, the eigenvalue estimates, QR.
FlopSplit soap_refresh_side_flops(int64_t n);

// ---- A whole optimizer over a model ----

struct FlopOptions {
  int64_t tensor = 1;  // parallel.tensor: with Muon's tp_mode = blockwise each part is its own problem
  // Shampoo's root_method = newton iterates until a tolerance, a count that depends on the data. A
  // fixed nominal count: the smallest eigenvalues of the scaled factor grow by ((p+1)/p)^p ≈ 2.4 per
  // iteration until they near 1, then a few quadratic steps: ≈ 20 for a condition number of 10⁶.
  int64_t newton_iterations = 20;
};

// The steady state of a run and its exceptions, per step.
struct OptimizerFlops {
  FlopSplit step;              // a step without a refresh (Shampoo: once preconditioning has started)
  FlopSplit refresh;           // added on a refresh step: Shampoo's inverse roots, SOAP's eigenbases
  int64_t refresh_every = 0;   // steps between refreshes; 0: the optimizer has none
  FlopSplit first;             // step 1 as a whole (SOAP: the factors and their eigh, no update)
  double matrix() const { return step.matmul; }             // per step, without refreshes
  double elementwise() const { return step.elementwise; }   // per step, without refreshes
  // Per step, averaged over a refresh period.
  double per_step() const { return step.total() + (refresh_every > 0 ? refresh.total() / static_cast<double>(refresh_every) : 0.0); }
};

// The FLOPs of config.name's optimizer over the parameters of `table` (the whole model's, e.g.
// model_param_table(config.model)), step by step. Throws OptimizerError for an unknown optimizer.
class OptimizerFlopCount {
 public:
  OptimizerFlopCount(const OptimizerConfig& config, const std::vector<ParamSpec>& table,
                     const FlopOptions& options = {});
  // The work of 1-based step `step`.
  FlopSplit at(int64_t step) const;
  double optimizer_flops(int64_t step) const { return at(step).total(); }
  // Steps 1..step together (0 for step <= 0): Σ at(t), counted by kind of step, exact at any step
  // whatever the refresh schedule.
  FlopSplit through(int64_t step) const;
  double optimizer_flops_through(int64_t step) const { return through(step).total(); }
  OptimizerFlops summary() const;

 private:
  enum class Schedule : uint8_t { none, shampoo, soap };
  bool refresh_at(int64_t step) const;
  int64_t refreshes_through(int64_t step) const;

  FlopSplit every_;        // every step
  FlopSplit from_start_;   // every step from start_ on
  FlopSplit first_extra_;  // step 1 only
  FlopSplit refresh_;      // refresh steps
  int64_t start_ = 1;
  Schedule schedule_ = Schedule::none;
  int64_t frequency_ = 0;
};

}  // namespace precon::worker
