// Helpers shared by the CUDA-against-CPU tests: trace messages, the skip without a GPU, bf16
// rounding of host inputs so both sides see the same values, and host/device input pairs.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
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

// Inputs for one CUDA-against-CPU comparison: the host values (rounded when the GPU side is bf16)
// and a device copy in the dtype under test.
struct Pair {
  std::vector<float> host;
  Buffer buffer;
  Tensor dev;
  Tensor cpu() { return Tensor::view(host.data(), {static_cast<int64_t>(host.size())}); }
};

inline Pair upload_pair(std::vector<float> v, std::initializer_list<int64_t> shape, DType dtype) {
  if (dtype == DType::bf16) v = round_bf16(std::move(v));
  Pair p;
  p.host = std::move(v);
  p.buffer = Buffer(Device::cuda, p.host.size() * dtype_size(dtype));
  p.dev = p.buffer.view(shape, dtype);
  if (dtype == DType::f32) {
    copy(p.dev, Tensor::view(p.host.data(), shape));
  } else {
    std::vector<bf16> raw(p.host.size());
    for (size_t i = 0; i < raw.size(); ++i) raw[i] = float_to_bf16(p.host[i]);
    copy(p.dev, Tensor::view(raw.data(), shape, DType::bf16));
  }
  return p;
}

// A host view with the given shape over p.host.
inline Tensor hv(Pair& p, std::initializer_list<int64_t> shape) { return Tensor::view(p.host.data(), shape); }

inline double compare(const Pair& p) { return test::rel_frobenius(test::to_host(p.dev), p.host); }

inline constexpr DType kDtypes[] = {DType::f32, DType::bf16};
// rel_frobenius bounds: fp32 differs by summation order; bf16 by rounding results to 2^-9.
inline double tol(DType dt) { return dt == DType::f32 ? 1e-5 : 1e-2; }

}  // namespace precon::kernels::testing

#define SKIP_WITHOUT_CUDA() \
  if (!::precon::kernels::cuda_available()) GTEST_SKIP() << "no CUDA device"
