// Helpers shared by the tests: seeded random inputs, host views, comparisons, GPU round trips.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace precon::test {

using kernels::Tensor;

// A fresh seed per call unless PRECON_TEST_SEED is set (printed on failure by the caller).
uint64_t test_seed();

std::vector<float> random_normal(size_t n, uint64_t seed, float stddev = 1.0f);
std::vector<float> random_uniform(size_t n, uint64_t seed, float lo, float hi);

// A contiguous fp32 CPU view over a vector (the vector must outlive the view).
Tensor host_view(std::vector<float>& v, std::initializer_list<int64_t> shape);
Tensor host_view_i32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape);

// max_i |a_i - b_i|
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);
// max_i |a_i - b_i| / max(|b_i|, floor): relative error with an absolute floor for tiny values.
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, double floor);
// ‖a - b‖_F / ‖b‖_F
double rel_frobenius(const std::vector<float>& a, const std::vector<float>& b);

// Copies a host vector to a new device buffer (viewed with `shape`) and back.
kernels::Buffer to_device(const std::vector<float>& v, kernels::Device device);
std::vector<float> to_host(const Tensor& t);  // f32 or bf16 (converted), any device

// Runs a shell command line; its exit status (-1 if it did not exit) and stdout + stderr.
struct CommandResult {
  int status = -1;
  std::string output;
};
CommandResult run_command(const std::string& command_line);

// A file's whole content ("" when it cannot be read).
std::string slurp(const std::filesystem::path& p);

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Whether this build runs under AddressSanitizer or ThreadSanitizer (which replace some of the
// programs' own behaviour, such as precon-train's fatal-signal report).
constexpr bool sanitized_build() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

}  // namespace precon::test
