// The rotary embeddings' frequencies (rope_forward / rope_backward), plain or YaRN-scaled as
// DeepSeek-V3 defines YaRN. A plain value type, usable in CUDA device code (the frequency is
// computed per element there).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PRECON_HOST_DEVICE __host__ __device__
#else
#define PRECON_HOST_DEVICE
#endif

namespace precon::kernels {

// Pair i < hd/2 of a head of hd channels turns by t · inv_freq(i, hd) at position t, and cos and
// sin are multiplied by attention_factor.
// Plain (factor = 1): inv_freq = theta^(−2i/hd).
// YaRN (factor > 1): the extrapolated theta^(−2i/hd) and the interpolated theta^(−2i/hd) / factor
// blended by a ramp over i: dim(r) = hd · ln(original_max / (2π r)) / (2 ln theta) is the pair that
// turns r times over original_max positions; low = max(⌊dim(beta_fast)⌋, 0), high =
// min(⌈dim(beta_slow)⌉, hd − 1) (+0.001 when equal); ramp = clamp((i − low) / (high − low), 0, 1);
// inv_freq = interpolated · ramp + extrapolated · (1 − ramp).
struct Rope {
  double theta = 10000;
  double factor = 1;            // YaRN's context extension; 1 = plain rotary embeddings
  double original_max = 0;      // YaRN: the context the frequencies were made for (positions)
  double beta_fast = 32;        // YaRN: rotations over original_max where the ramp starts (pairs below extrapolate)
  double beta_slow = 1;         // YaRN: rotations where it ends (pairs above interpolate)
  double attention_factor = 1;  // cos and sin multiplied by it

  Rope() = default;
  Rope(double theta_) : theta(theta_) {}  // NOLINT: implicit, plain rotary embeddings of base theta

  PRECON_HOST_DEVICE double inv_freq(int64_t i, int64_t hd) const {
    const double extrapolated = pow(theta, -2.0 * double(i) / double(hd));
    if (!(factor > 1.0)) return extrapolated;
    const double two_pi = 6.283185307179586476925;
    const double scale = double(hd) / (2.0 * log(theta));
    double low = floor(scale * log(original_max / (beta_fast * two_pi)));
    double high = ceil(scale * log(original_max / (beta_slow * two_pi)));
    if (low < 0.0) low = 0.0;
    if (high > double(hd - 1)) high = double(hd - 1);
    if (low == high) high += 0.001;
    double ramp = (double(i) - low) / (high - low);
    ramp = ramp < 0.0 ? 0.0 : (ramp > 1.0 ? 1.0 : ramp);
    return extrapolated / factor * ramp + extrapolated * (1.0 - ramp);
  }
};

}  // namespace precon::kernels
