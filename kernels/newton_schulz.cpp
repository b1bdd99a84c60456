// Newton–Schulz orthogonalization composed from the dispatched primitives, so it runs on any
// backend. The symmetric products (X Xᵀ and A² = A Aᵀ) use syrk: about half a GEMM's work.
#include "kernels/newton_schulz.h"

#include <cmath>
#include <string>

#include "kernels/backend.h"
#include "kernels/check.h"
#include "kernels/linalg.h"
#include "kernels/scratch.h"

namespace precon::kernels {

const std::vector<std::string>& ns_coefficient_set_names() {
  static const std::vector<std::string> names = {"keller", "polar-express"};
  return names;
}

std::vector<NsCoefficients> ns_coefficient_set(std::string_view name) {
  if (name == "keller") return {{3.4445f, -4.7750f, 2.0315f}};
  if (name == "polar-express") {
    // Amsel et al. 2025, per-step minimax tuples with the 1.01 safety factor folded in.
    return {{8.2051f, -22.9019f, 16.4607f}, {4.0664f, -2.8612f, 0.5184f}, {3.9096f, -2.8234f, 0.5250f},
            {3.2856f, -2.4153f, 0.4853f},   {2.2779f, -1.6198f, 0.3985f}, {1.8726f, -1.2307f, 0.3585f},
            {1.8564f, -1.2132f, 0.3568f},   {1.8750f, -1.2500f, 0.3750f}};
  }
  std::string known;
  for (const std::string& n : ns_coefficient_set_names()) known += n + ", ";
  PRECON_THROW(UnsupportedError, "ns_coefficient_set",
               "unknown coefficient set '" + std::string(name) + "' (known: " + known +
                   "or an explicit list of [a, b, c] tuples)");
}

std::vector<NsCoefficients> ns_schedule(const std::vector<NsCoefficients>& set, int steps) {
  PRECON_REQUIRE(!set.empty(), UnsupportedError, "ns_schedule", "empty coefficient set");
  PRECON_REQUIRE(steps >= 0, UnsupportedError, "ns_schedule", "steps must be >= 0, got " + std::to_string(steps));
  std::vector<NsCoefficients> schedule;
  for (int i = 0; i < steps; ++i) schedule.push_back(set[std::min<size_t>(i, set.size() - 1)]);
  return schedule;
}

namespace {

// One matrix: g (rows, cols) -> out (rows, cols).
void newton_schulz_one(Tensor out, const Tensor& g, const NsOptions& options) {
  const Device dev = g.device;
  const DType dt = options.compute;
  const int64_t rows = g.shape[0], cols = g.shape[1];
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;

  Tensor x = scratch(dev, 0, {m, n}, dt);
  Tensor y = scratch(dev, 1, {m, n}, dt);
  Tensor a = scratch(dev, 2, {m, m}, dt);
  Tensor b = scratch(dev, 3, {m, m}, dt);

  // x = g in the wide orientation and the compute precision.
  Tensor src = g;
  if (g.dtype != dt) {
    Tensor converted = scratch(dev, 4, {rows, cols}, dt);
    cast(converted, g);
    src = converted;
  }
  if (tall) transpose(x, src);
  else copy(x, src);

  const double norm_sq = sum_squares(x);
  if (!std::isfinite(norm_sq)) {
    PRECON_THROW(NonFiniteError, "newton_schulz", "input " + g.describe() + " contains NaN or Inf");
  }
  const double denom = std::sqrt(norm_sq) + options.eps;
  if (denom == 0.0) {  // all-zero input with eps = 0: the orthogonalization of 0 is 0
    fill_zero(out);
    return;
  }
  scale(x, static_cast<float>(1.0 / denom));

  for (const NsCoefficients& k : options.schedule) {
    syrk(a, x, Trans::no, 1.0f, 0.0f);  // A = X Xᵀ
    copy(b, a);
    syrk(b, a, Trans::no, k.c, k.b);    // B = c A Aᵀ + b A  (A symmetric, so A Aᵀ = A²)
    copy(y, x);
    gemm(y, b, x, Trans::no, Trans::no, 1.0f, k.a);  // Y = B X + a X
    std::swap(x, y);
  }

  Tensor result = x;
  if (tall) {
    result = scratch(dev, 5, {n, m}, dt);
    transpose(result, x);
  }
  if (out.dtype == dt) copy(out, result);
  else cast(out, result);
}

}  // namespace

void newton_schulz(Tensor out, const Tensor& g, const NsOptions& options) {
  const char* op = "newton_schulz";
  Device device = require_same_device(op, {&out, &g});
  require_ndim(op, "G", g, {2, 3});
  require_contiguous(op, "G", g);
  require_contiguous(op, "out", out);
  require_same_shape(op, "out", out, "G", g);
  require_dtype(op, "out", out, {g.dtype});
  if (device == Device::cpu) {
    require_dtype(op, "G", g, {DType::f32});
    if (options.compute != DType::f32)
      PRECON_THROW(UnsupportedError, op, "CPU computes in f32 only; bf16 Newton–Schulz needs the CUDA backend");
  } else {
    require_dtype(op, "G", g, {DType::f32, DType::bf16});
    if (options.compute != DType::f32 && options.compute != DType::bf16)
      PRECON_THROW(UnsupportedError, op, "compute precision must be f32 or bf16");
  }
  if (!(options.eps >= 0.0f)) PRECON_THROW(UnsupportedError, op, "eps must be >= 0");
  for (const NsCoefficients& k : options.schedule)
    if (!std::isfinite(k.a) || !std::isfinite(k.b) || !std::isfinite(k.c))
      PRECON_THROW(UnsupportedError, op, "coefficients must be finite");
  if (g.numel() == 0) return;

  if (g.ndim == 2) {
    newton_schulz_one(out, g, options);
    return;
  }
  for (int64_t i = 0; i < g.shape[0]; ++i) newton_schulz_one(out.select(i), g.select(i), options);
}

}  // namespace precon::kernels
