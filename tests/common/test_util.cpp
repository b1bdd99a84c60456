#include "tests/common/test_util.h"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include <cmath>
#include <cstdlib>
#include <random>

namespace precon::test {

uint64_t test_seed() {
  if (const char* s = std::getenv("PRECON_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

std::vector<float> random_normal(size_t n, uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> random_uniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Tensor host_view(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return Tensor::view(v.data(), shape, kernels::DType::f32, kernels::Device::cpu);
}

Tensor host_view_i32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return Tensor::view(v.data(), shape, kernels::DType::i32, kernels::Device::cpu);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d <= m)) m = d;  // NaN propagates as the max
  }
  return m;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, double floor) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(double(a[i]) - double(b[i])) / std::max(std::fabs(double(b[i])), floor);
    if (!(d <= m)) m = d;
  }
  return m;
}

double rel_frobenius(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

kernels::Buffer to_device(const std::vector<float>& v, kernels::Device device) {
  kernels::Buffer buf(device, v.size() * sizeof(float));
  std::vector<float> copy_src = v;
  kernels::copy(buf.view({static_cast<int64_t>(v.size())}),
                Tensor::view(copy_src.data(), {static_cast<int64_t>(v.size())}));
  return buf;
}

std::vector<float> to_host(const Tensor& t) {
  std::vector<float> out(t.numel());
  if (t.dtype == kernels::DType::f32) {
    Tensor dst = Tensor::view(out.data(), {t.numel()});
    kernels::copy(dst, t.reshape({t.numel()}));
  } else {
    std::vector<kernels::bf16> raw(t.numel());
    kernels::copy(Tensor::view(raw.data(), {t.numel()}, kernels::DType::bf16), t.reshape({t.numel()}));
    for (size_t i = 0; i < raw.size(); ++i) out[i] = kernels::bf16_to_float(raw[i]);
  }
  return out;
}

CommandResult run_command(const std::string& command_line) {
  CommandResult r;
  FILE* p = ::popen((command_line + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int raw = ::pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace precon::test
