// A vectorisable expf for the CPU kernels' loops. libm's expf is a call per element and keeps
// softmax/cross-entropy/GELU scalar; this one is branch-free arithmetic that `#pragma omp simd`
// loops vectorise (it is inlined into them). Error: within 2 ulp of expf on [-87.3, 88.3];
// below that it returns 0 (the true value is subnormal or 0), above it +inf (expf itself
// overflows from 88.72). The kernels call it on x - max <= 0 (softmax) or where an overflow
// means 0 (GELU's sigmoid). NaN propagates.
#pragma once

#include <cstdint>
#include <cstring>

namespace precon::kernels::cpu {

inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding and subtracting it rounds to an integer
  const float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  // Minimax polynomial for e^r on [-ln2/2, ln2/2] (Cephes expf coefficients).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float result = y * scale;
  result = x < -87.3f ? 0.0f : result;
  result = x > 88.3f ? __builtin_inff() : result;
  return x != x ? x : result;
}

}  // namespace precon::kernels::cpu
