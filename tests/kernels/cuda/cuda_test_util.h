// Helpers shared by the CUDA-against-CPU tests: trace messages, the skip without a GPU, and
// bf16 rounding of host inputs so both sides see the same values.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "tests/common/test_util.h"

namespace precon::kernels::testing {

// Concatenates streamable values (trace messages).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

}  // namespace precon::kernels::testing

#define SKIP_WITHOUT_CUDA() \
  if (!::precon::kernels::cuda_available()) GTEST_SKIP() << "no CUDA device"
