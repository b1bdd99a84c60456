// A naive reference for metric downsampling (Store::metrics, downsample()), written from its
// documentation, shared by the store and series-cache tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

namespace precon::orch::testing {

inline std::vector<size_t> reference_downsample(const std::vector<double>& v, size_t m) {
  const size_t n = v.size();
  std::vector<size_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = i;
  if (m == 0 || n <= m) return all;
  auto extremes = [&](size_t lo, size_t hi) {
    std::vector<size_t> ok;
    for (size_t i = lo; i < hi; ++i)
      if (!std::isnan(v[i])) ok.push_back(i);
    auto less = [&](size_t a, size_t b) { return v[a] < v[b]; };
    std::vector<size_t> r;
    if (!ok.empty()) {
      r.push_back(*std::min_element(ok.begin(), ok.end(), less));
      r.push_back(*std::max_element(ok.begin(), ok.end(), less));
    }
    return r;
  };
  std::set<size_t> keep;
  if (m < 4) {
    std::vector<size_t> order = extremes(0, n);
    order.push_back(n - 1);
    order.push_back(0);
    for (size_t i : order)
      if (keep.size() < m) keep.insert(i);
  } else {
    const size_t buckets = m / 4;
    for (size_t b = 0; b < buckets; ++b) {
      const size_t lo = b * n / buckets, hi = (b + 1) * n / buckets;
      keep.insert(lo);
      keep.insert(hi - 1);
      for (size_t i : extremes(lo, hi)) keep.insert(i);
    }
  }
  return {keep.begin(), keep.end()};
}

}  // namespace precon::orch::testing
