// The sweep's random numbers: xoshiro256** seeded through splitmix64, fully specified, so that a
// seed means the same draws on every compiler and standard library (<random>'s distributions are
// implementation-defined). Not thread-safe: one generator per use.
#pragma once

#include <cstdint>

namespace precon::orch {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) s = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // [0, n) without modulo bias; n = 0 means the full 64-bit range.
  uint64_t below(uint64_t n) {
    if (n == 0) return next();
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace precon::orch
