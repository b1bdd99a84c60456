// The mixture-of-experts CUDA ops (router, gather/scatter of rows, combine) against the CPU ops on
// the same inputs, as test_cuda_nn_llama.cpp does for the Llama ops: the router in fp32, the row
// ops in fp32 and bf16; backward outputs start from random values on both sides (the +=
// convention). Skipped without a GPU.
#include <gtest/gtest.h>

#include <tuple>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/nn.h"
#include "tests/common/test_util.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/test_nn_util.h"

namespace precon::kernels {
namespace {

using testing::compare;
using testing::hv;
using testing::kDtypes;
using testing::str;
using testing::tol;
using testing::upload_pair;

// An i32 tensor on both sides: the host values and a device copy.
struct CudaMoeInts {
  std::vector<int32_t> host;
  Buffer buffer;
  Tensor dev;
  Tensor cpu(std::initializer_list<int64_t> shape) { return Tensor::view(host.data(), shape, DType::i32); }
  std::vector<int32_t> from_device() const {
    std::vector<int32_t> v(host.size());
    copy(Tensor::view(v.data(), {static_cast<int64_t>(v.size())}, DType::i32), dev.reshape({dev.numel()}));
    return v;
  }
};

CudaMoeInts cuda_moe_ints(std::vector<int32_t> v, std::initializer_list<int64_t> shape) {
  CudaMoeInts p;
  p.host = std::move(v);
  p.buffer = Buffer(Device::cuda, p.host.size() * sizeof(int32_t));
  p.dev = p.buffer.view(shape, DType::i32);
  copy(p.dev, Tensor::view(p.host.data(), shape, DType::i32));
  return p;
}

TEST(CudaNN, MoeRouter) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  // E = 1 and E = 6 leave lanes idle; E = 160 gives each lane several experts.
  for (auto [N, E, K] : {std::tuple<int64_t, int64_t, int64_t>{7, 8, 2}, {1, 1, 1}, {5, 6, 6}, {33, 64, 1},
                         {300, 64, 8}, {20, 160, 40}}) {
    SCOPED_TRACE(str("N", N, " E", E, " K", K));
    auto logits = upload_pair(test::nn::separated_logits(N, E, seed), {N, E}, DType::f32);
    auto probs = upload_pair(std::vector<float>(N * E), {N, E}, DType::f32);
    auto w = upload_pair(std::vector<float>(N * K), {N, K}, DType::f32);
    auto idx = cuda_moe_ints(std::vector<int32_t>(N * K, -1), {N, K});
    moe_router_forward(hv(probs, {N, E}), idx.cpu({N, K}), hv(w, {N, K}), hv(logits, {N, E}));
    moe_router_forward(probs.dev, idx.dev, w.dev, logits.dev);
    EXPECT_LE(compare(probs), tol(DType::f32)) << "probs";
    EXPECT_LE(compare(w), tol(DType::f32)) << "topk_w";
    EXPECT_EQ(idx.from_device(), idx.host) << "topk_idx";

    auto dw = upload_pair(test::random_normal(N * K, seed + 1), {N, K}, DType::f32);
    auto aux = upload_pair(test::random_normal(E, seed + 2), {E}, DType::f32);
    for (bool with_aux : {false, true}) {
      SCOPED_TRACE(with_aux ? "with aux" : "without aux");
      auto dlogits = upload_pair(test::random_normal(N * E, seed + 3), {N, E}, DType::f32);
      moe_router_backward(hv(dlogits, {N, E}), hv(dw, {N, K}), hv(probs, {N, E}), idx.cpu({N, K}), hv(w, {N, K}),
                          with_aux ? aux.cpu() : Tensor{});
      moe_router_backward(dlogits.dev, dw.dev, probs.dev, idx.dev, w.dev, with_aux ? aux.dev : Tensor{});
      EXPECT_LE(compare(dlogits), tol(DType::f32)) << "dlogits";
    }
  }
}

TEST(CudaNN, MoeGatherScatterRows) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  for (auto [N, M, C] : {std::tuple<int64_t, int64_t, int64_t>{6, 20, 13}, {1, 1, 1}, {1, 64, 3}, {512, 4096, 100}}) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(str("N", N, " M", M, " C", C, " ", dtype_name(dt)));
      auto rows = cuda_moe_ints(test::nn::random_ints(M, seed, 0, int32_t(N - 1)), {M});  // M > N: rows repeat
      auto inp = upload_pair(test::random_normal(N * C, seed + 1), {N, C}, dt);
      auto out = upload_pair(std::vector<float>(M * C), {M, C}, dt);
      gather_rows(hv(out, {M, C}), hv(inp, {N, C}), rows.cpu({M}));
      gather_rows(out.dev, inp.dev, rows.dev);
      EXPECT_EQ(test::max_abs_diff(test::to_host(out.dev), out.host), 0.0) << "out (a copy)";

      auto dout = upload_pair(test::random_normal(M * C, seed + 2), {M, C}, dt);
      auto dinp = upload_pair(test::random_normal(N * C, seed + 3), {N, C}, dt);
      scatter_add_rows(hv(dinp, {N, C}), hv(dout, {M, C}), rows.cpu({M}));
      scatter_add_rows(dinp.dev, dout.dev, rows.dev);
      EXPECT_LE(compare(dinp), tol(dt)) << "dinp";  // bf16: fp32 sums, rounded once
    }
  }
}

TEST(CudaNN, MoeCombine) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = test::test_seed();
  SCOPED_TRACE(str("seed ", seed));
  // spare: rows of y that no token names (their dy must stay as it was).
  for (auto [N, K, C, spare] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{7, 2, 13, 0}, {1, 1, 1, 0},
                                {5, 8, 33, 4}, {256, 8, 512, 0}}) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(str("N", N, " K", K, " C", C, " spare", spare, " ", dtype_name(dt)));
      const int64_t M = N * K + spare;
      auto pos = cuda_moe_ints(test::nn::random_injection(N * K, M, seed), {N, K});
      auto y = upload_pair(test::random_normal(M * C, seed + 1), {M, C}, dt);
      auto w = upload_pair(test::random_uniform(N * K, seed + 2, 0.0f, 1.0f), {N, K}, DType::f32);
      auto out = upload_pair(std::vector<float>(N * C, 7.0f), {N, C}, dt);
      moe_combine_forward(hv(out, {N, C}), hv(y, {M, C}), pos.cpu({N, K}), hv(w, {N, K}));
      moe_combine_forward(out.dev, y.dev, pos.dev, w.dev);
      EXPECT_LE(compare(out), tol(dt)) << "out";

      auto dout = upload_pair(test::random_normal(N * C, seed + 3), {N, C}, dt);
      auto dy = upload_pair(test::random_normal(M * C, seed + 4), {M, C}, dt);
      auto dw = upload_pair(test::random_normal(N * K, seed + 5), {N, K}, DType::f32);
      moe_combine_backward(hv(dy, {M, C}), hv(dw, {N, K}), hv(dout, {N, C}), hv(y, {M, C}), pos.cpu({N, K}),
                           hv(w, {N, K}));
      moe_combine_backward(dy.dev, dw.dev, dout.dev, y.dev, pos.dev, w.dev);
      EXPECT_LE(compare(dy), tol(dt)) << "dy";
      EXPECT_LE(compare(dw), tol(DType::f32)) << "dw";  // fp32 dot products of the same (rounded) inputs
    }
  }
}

}  // namespace
}  // namespace precon::kernels
