// Newton–Schulz orthogonalization composed from the dispatched primitives, so it runs on any
// backend. The symmetric products (X Xᵀ and A² = A Aᵀ) use syrk: about half a GEMM's work.
#include "kernels/newton_schulz.h"

#include <omp.h>

#include <cmath>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/check.h"
#include "kernels/linalg.h"
#include "kernels/scratch.h"

namespace precon::kernels {

const std::vector<std::string>& ns_coefficient_set_names() {
  static const std::vector<std::string> names = {"simple", "quintic",  "polar_express", "cans",
                                                 "aol",    "deepseekv4", "cubic5",      "keller",
                                                 "polar-express"};
  return names;
}

namespace {

// The canonical name of an alias.
std::string_view canonical(std::string_view name) {
  if (name == "keller") return "simple";
  if (name == "polar-express") return "polar_express";
  return name;
}

// Past its last tuple a set starts again from its first (cycle) or keeps its last (repeat_last).
bool cycles(std::string_view name) { return name == "simple" || name == "quintic" || name == "aol" || name == "cubic5"; }

}  // namespace

std::vector<NsCoefficients> ns_coefficient_set(std::string_view alias) {
  // The numbers of Emerging-Optimizers' muon_utils.py _COEFFICIENT_SETS (see the header).
  const std::string_view name = canonical(alias);
  if (name == "simple") return {{3.4445f, -4.7750f, 2.0315f}};
  if (name == "quintic") {
    return {{4.0848f, -6.8946f, 2.9270f}, {3.9505f, -6.3029f, 2.6377f}, {3.7418f, -5.5913f, 2.3037f},
            {2.8769f, -3.1427f, 1.2046f}, {2.8366f, -3.0525f, 1.2012f}};
  }
  if (name == "polar_express") {
    return {{8.2051f, -22.9019f, 16.4607f}, {4.0664f, -2.8612f, 0.5184f}, {3.9096f, -2.8234f, 0.5250f},
            {3.2856f, -2.4153f, 0.4853f},   {2.2779f, -1.6198f, 0.3985f}, {1.8726f, -1.2307f, 0.3585f},
            {1.8564f, -1.2132f, 0.3568f},   {1.8750f, -1.2500f, 0.3750f}};
  }
  if (name == "cans") {
    return {{8.4703f, -25.1081f, 18.6293f}, {4.1828f, -3.1087f, 0.5806f}, {3.9619f, -2.9541f, 0.5630f},
            {3.2866f, -2.4647f, 0.5074f}, {2.2737f, -1.6447f, 0.4162f}};
  }
  if (name == "aol") {
    return {{4.0098f, -7.0585f, 2.4635f}, {3.4585f, -5.5479f, 2.5959f}, {2.7573f, -3.2939f, 1.4254f},
            {2.7215f, -3.0494f, 1.3169f}};
  }
  if (name == "deepseekv4") {
    std::vector<NsCoefficients> set(8, {3.4445f, -4.7750f, 2.0315f});
    set.insert(set.end(), 2, {2.0f, -1.5f, 0.5f});
    return set;
  }
  if (name == "cubic5") {
    return {{3.3656576f, -3.3420992f, 0.0f}, {2.5744352f, -1.4957376f, 0.0f}, {2.5368962f, -1.4312570f, 0.0f},
            {2.4418906f, -1.2764040f, 0.0f}, {2.2230472f, -0.9630650f, 0.0f}};
  }
  std::string known;
  for (const std::string& n : ns_coefficient_set_names()) known += n + ", ";
  PRECON_THROW(UnsupportedError, "ns_coefficient_set",
               "unknown coefficient set '" + std::string(name) + "' (known: " + known +
                   "or an explicit list of [a, b, c] tuples)");
}

int ns_required_steps(std::string_view name) { return canonical(name) == "cubic5" ? 5 : 0; }

std::vector<NsCoefficients> ns_schedule(std::string_view alias, int steps) {
  const std::vector<NsCoefficients> set = ns_coefficient_set(alias);
  const int required = ns_required_steps(alias);
  PRECON_REQUIRE(required == 0 || steps == required, UnsupportedError, "ns_schedule",
                 std::string(alias) + " is a fixed " + std::to_string(required) + "-step schedule; got " +
                     std::to_string(steps) + " steps");
  if (!cycles(canonical(alias))) return ns_schedule(set, steps);
  PRECON_REQUIRE(steps >= 0, UnsupportedError, "ns_schedule", "steps must be >= 0, got " + std::to_string(steps));
  std::vector<NsCoefficients> schedule;
  for (int i = 0; i < steps; ++i) schedule.push_back(set[static_cast<size_t>(i) % set.size()]);
  return schedule;
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

  x = newton_schulz_steps(x, y, a, b, options.schedule, true);

  Tensor result = x;
  if (tall) {
    result = scratch(dev, 5, {n, m}, dt);
    transpose(result, x);
  }
  if (out.dtype == dt) copy(out, result);
  else cast(out, result);
}

// A batch on the CPU with at least as many matrices as threads: one matrix per OpenMP thread, its
// products then on that thread alone (the OpenMP OpenBLAS does not nest inside a parallel region),
// so many small matrices keep every core busy instead of each small product being split across
// them. Each matrix runs the same operations as alone (scratch is per thread). An error inside the
// loop is kept and rethrown after it (an exception must not leave an OpenMP region).
void newton_schulz_threads(Tensor out, const Tensor& g, const NsOptions& options) {
  std::exception_ptr error;
  const int64_t n = g.shape[0];
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    try {
      newton_schulz_one(out.select(i), g.select(i), options);
    } catch (...) {
#pragma omp critical(precon_newton_schulz_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// The arguments' checks shared by both entry points; returns the device.
Device check_ns_args(const Tensor& out, const Tensor& g, const NsOptions& options, std::initializer_list<int> ndims) {
  const char* op = "newton_schulz";
  const Device device = require_same_device(op, {&out, &g});
  require_ndim(op, "G", g, ndims);
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
  return device;
}

}  // namespace

void newton_schulz_batch_gemm(Tensor out, const Tensor& g, const NsOptions& options) {
  const Device dev = check_ns_args(out, g, options, {3});
  const DType dt = options.compute;
  const int64_t batch = g.shape[0], rows = g.shape[1], cols = g.shape[2];
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  if (g.numel() == 0) return;

  // The norms from g in f32 (a matrix and its transpose have one norm), to the host once.
  Tensor g32 = g;
  if (g.dtype != DType::f32) {
    g32 = scratch(dev, 6, {batch, rows, cols});
    cast(g32, g);
  }
  Tensor factors = scratch(dev, 7, {batch});
  sum_squares_along(factors, g32.reshape({batch, rows * cols}), 0);
  std::vector<float> host(static_cast<size_t>(batch));
  copy(Tensor::view(host.data(), {batch}), factors);
  for (int64_t i = 0; i < batch; ++i) {
    float& f = host[static_cast<size_t>(i)];
    if (!std::isfinite(f)) {
      PRECON_THROW(NonFiniteError, "newton_schulz",
                   "input " + g.describe() + " contains NaN or Inf (matrix " + std::to_string(i) + " of the batch)");
    }
    const double denom = std::sqrt(static_cast<double>(f)) + options.eps;
    f = denom == 0.0 ? 0.0f : static_cast<float>(1.0 / denom);  // an all-zero matrix stays zero
  }
  copy(factors, Tensor::view(host.data(), {batch}));

  // X = G / ‖G‖ in the wide orientation, then in the compute precision.
  Tensor xf = scratch(dev, 8, {batch, m, n});
  if (tall) copy_strided(xf, g32.transposed());
  else copy(xf, g32);
  scale_along(xf.reshape({batch, m * n}), factors, 0);
  Tensor x = xf;
  if (dt != DType::f32) {
    x = scratch(dev, 0, {batch, m, n}, dt);
    cast(x, xf);
  }
  Tensor y = scratch(dev, 1, {batch, m, n}, dt);
  Tensor a = scratch(dev, 2, {batch, m, m}, dt);
  Tensor b = scratch(dev, 3, {batch, m, m}, dt);
  for (const NsCoefficients& k : options.schedule) {
    gemm(a, x, x, Trans::no, Trans::yes, 1.0f, 0.0f);  // A = X Xᵀ
    copy(b, a);
    if (k.c == 0.0f) scale(b, k.b);
    else gemm(b, a, a, Trans::no, Trans::no, k.c, k.b);  // B = c A² + b A
    copy(y, x);
    gemm(y, b, x, Trans::no, Trans::no, 1.0f, k.a);  // Y = B X + a X
    std::swap(x, y);
  }

  // Back to out's orientation and dtype.
  if (x.dtype != DType::f32) {
    cast(xf, x);
    x = xf;
  }
  Tensor o32 = out.dtype == DType::f32 ? out : scratch(dev, 6, {batch, rows, cols});
  if (tall) copy_strided(o32, x.transposed());
  else copy(o32, x);
  if (o32.data != out.data) cast(out, o32);
}

Tensor newton_schulz_steps(Tensor x, Tensor y, Tensor a, Tensor b, const std::vector<NsCoefficients>& schedule,
                           bool gram_of_rows, const std::function<void(Tensor&)>& reduce_gram) {
  for (const NsCoefficients& k : schedule) {
    syrk(a, x, gram_of_rows ? Trans::no : Trans::yes, 1.0f, 0.0f);  // A = X Xᵀ (or Xᵀ X)
    if (reduce_gram) reduce_gram(a);
    copy(b, a);
    if (k.c == 0.0f) scale(b, k.b);        // a cubic step: B = b A, no Gram-square product
    else syrk(b, a, Trans::no, k.c, k.b);  // B = c A Aᵀ + b A  (A symmetric, so A Aᵀ = A²)
    copy(y, x);
    if (gram_of_rows) gemm(y, b, x, Trans::no, Trans::no, 1.0f, k.a);  // Y = B X + a X
    else gemm(y, x, b, Trans::no, Trans::no, 1.0f, k.a);               // Y = X B + a X
    std::swap(x, y);
  }
  return x;
}

void newton_schulz(Tensor out, const Tensor& g, const NsOptions& options) {
  const Device device = check_ns_args(out, g, options, {2, 3});
  if (g.numel() == 0) return;

  if (g.ndim == 2) {
    newton_schulz_one(out, g, options);
    return;
  }
  if (device != Device::cpu && g.shape[0] > 1) {
    newton_schulz_batch_gemm(out, g, options);
    return;
  }
  if (g.shape[0] > 1 && g.shape[0] >= omp_get_max_threads()) {
    newton_schulz_threads(out, g, options);
    return;
  }
  for (int64_t i = 0; i < g.shape[0]; ++i) newton_schulz_one(out.select(i), g.select(i), options);
}

}  // namespace precon::kernels
