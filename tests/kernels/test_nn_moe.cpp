// The mixture-of-experts ops (moe_router_forward/backward, gather_rows, scatter_add_rows,
// moe_combine_forward/backward) against the double reference, the reference's gradients against
// finite differences, the tie rule of the top-k choice, and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "kernels/error.h"
#include "kernels/nn.h"
#include "kernels/reference/nn_reference.h"
#include "tests/kernels/test_nn_util.h"

namespace precon::test {
namespace {

using kernels::ShapeError;
using kernels::UnsupportedError;
using namespace precon::test::nn;
namespace ref = kernels::reference;

struct MoeRouterShape {
  int N, E, K;
};
// N = 1, K = 1, K = E, E = 8 with K = 2, and E = 64 with K = 8 as in the Qwen/DeepSeek configs.
constexpr MoeRouterShape kMoeRouterShapes[] = {{1, 1, 1}, {1, 8, 2}, {7, 8, 2}, {5, 6, 1},
                                               {5, 6, 6}, {3, 40, 40}, {300, 64, 8}};

std::string moe_trace(const MoeRouterShape& s) {
  return "N=" + std::to_string(s.N) + " E=" + std::to_string(s.E) + " K=" + std::to_string(s.K);
}

// The fp32 router forward on host vectors.
struct MoeRouting {
  std::vector<float> probs, w;
  std::vector<int32_t> idx;
};
MoeRouting moe_route(std::vector<float>& logits, int N, int E, int K) {
  MoeRouting r{std::vector<float>(size_t(N) * E), std::vector<float>(size_t(N) * K),
               std::vector<int32_t>(size_t(N) * K, -1)};
  kernels::moe_router_forward(host_view(r.probs, {N, E}), host_view_i32(r.idx, {N, K}), host_view(r.w, {N, K}),
                              host_view(logits, {N, E}));
  return r;
}

TEST(NnMoeRouter, ForwardMatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (MoeRouterShape s : kMoeRouterShapes) {
    SCOPED_TRACE(moe_trace(s));
    auto logits = separated_logits(s.N, s.E, seed + 1);
    const MoeRouting got = moe_route(logits, s.N, s.E, s.K);
    std::vector<double> probs_r(size_t(s.N) * s.E), w_r(size_t(s.N) * s.K);
    std::vector<int32_t> idx_r(size_t(s.N) * s.K);
    ref::moe_router_forward(probs_r.data(), idx_r.data(), w_r.data(), to_double(logits).data(), s.N, s.E, s.K);
    EXPECT_EQ(got.idx, idx_r);
    // fast_exp within 2 ulp, one division (probs) and a K-term sum with a division (w): observed
    // up to 8e-7 relative over 100 seeds.
    EXPECT_LE(max_rel(got.probs, probs_r, 1e-30), 2e-6);
    EXPECT_LE(max_rel(got.w, w_r, 1e-30), 2e-6);
  }
}

TEST(NnMoeRouter, TiesGoToTheLowerExpert) {
  // Equal logits: experts 0..K-1 in order, each with weight 1/K (1/8 each, exactly, before).
  const int N = 3, E = 8;
  for (int K : {1, 2, 3, 8}) {
    SCOPED_TRACE("K=" + std::to_string(K));
    std::vector<float> logits(size_t(N) * E, 0.7f);
    const MoeRouting r = moe_route(logits, N, E, K);
    std::vector<double> probs_r(size_t(N) * E), w_r(size_t(N) * K);
    std::vector<int32_t> idx_r(size_t(N) * K);
    ref::moe_router_forward(probs_r.data(), idx_r.data(), w_r.data(), to_double(logits).data(), N, E, K);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < K; ++j) {
        EXPECT_EQ(r.idx[n * K + j], j);
        EXPECT_EQ(idx_r[n * K + j], j);
        EXPECT_FLOAT_EQ(r.w[n * K + j], 1.0f / float(K));
      }
    for (float p : r.probs) EXPECT_EQ(p, 0.125f);
  }
  // Partial ties: the three 3s in index order, then the 2, then the 1s in index order.
  std::vector<float> logits = {1, 3, 0, 3, 1, 3, 2, 0};
  const MoeRouting r = moe_route(logits, 1, E, E);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{1, 3, 5, 6, 0, 4, 2, 7}));
  EXPECT_EQ(r.w[0], r.w[1]);
  EXPECT_EQ(r.w[1], r.w[2]);
  EXPECT_EQ(r.w[4], r.w[5]);
  std::vector<double> probs_r(E), w_r(E);
  std::vector<int32_t> idx_r(E);
  ref::moe_router_forward(probs_r.data(), idx_r.data(), w_r.data(), to_double(logits).data(), 1, E, E);
  EXPECT_EQ(idx_r, r.idx);
}

TEST(NnMoeRouter, NonFiniteLogitsKeepIndicesInRange) {
  // A NaN or +inf logit makes its row's probabilities NaN; the indices must still be usable by the
  // gathers that follow (the NaN weights then surface in the loss). A −inf logit is probability 0.
  const int E = 5, K = 3;
  std::vector<float> logits = {0.5f, NAN, 1.0f, 2.0f, 0.0f, 1.0f, INFINITY, 0.0f, 2.0f, 3.0f,
                               1.0f, -INFINITY, 3.0f, 2.0f, 0.0f};
  const MoeRouting r = moe_route(logits, 3, E, K);
  for (int j = 0; j < 2 * K; ++j) {
    EXPECT_EQ(r.idx[j], j % K);
    EXPECT_TRUE(std::isnan(r.w[j]));
  }
  EXPECT_EQ(r.idx[2 * K], 2);
  EXPECT_EQ(r.idx[2 * K + 1], 3);
  EXPECT_EQ(r.idx[2 * K + 2], 0);
  EXPECT_EQ(r.probs[2 * E + 1], 0.0f);
}

TEST(NnMoeRouter, BackwardMatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (MoeRouterShape s : kMoeRouterShapes) {
    for (bool with_aux : {false, true}) {
      SCOPED_TRACE(moe_trace(s) + (with_aux ? " with aux" : " without aux"));
      auto logits = separated_logits(s.N, s.E, seed + 1);
      MoeRouting r = moe_route(logits, s.N, s.E, s.K);
      auto dw = random_normal(size_t(s.N) * s.K, seed + 2);
      auto aux = random_normal(s.E, seed + 3);
      auto dlogits = random_normal(size_t(s.N) * s.E, seed + 4);  // non-zero: must add
      auto dlogits_r = to_double(dlogits);
      kernels::moe_router_backward(host_view(dlogits, {s.N, s.E}), host_view(dw, {s.N, s.K}),
                                   host_view(r.probs, {s.N, s.E}), host_view_i32(r.idx, {s.N, s.K}),
                                   host_view(r.w, {s.N, s.K}), with_aux ? host_view(aux, {s.E}) : kernels::Tensor{});
      // The reference runs on the fp32 forward's outputs, so the comparison isolates the backward.
      ref::moe_router_backward(dlogits_r.data(), to_double(dw).data(), to_double(r.probs).data(), r.idx.data(),
                               to_double(r.w).data(), with_aux ? to_double(aux).data() : nullptr, s.N, s.E, s.K);
      EXPECT_LE(max_rel(dlogits, dlogits_r, 1.0), 1e-6);  // observed up to 2e-7 (100 seeds)
    }
  }
}

TEST(NnMoeRouter, ReferenceBackwardMatchesFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  // L = Σ dw·topk_w + Σ_e aux[e]·Σ_n probs[n,e], away from ties (separated logits, h = 1e-5).
  for (MoeRouterShape s : {MoeRouterShape{3, 8, 2}, {2, 5, 1}, {2, 5, 5}, {4, 7, 3}}) {
    for (bool with_aux : {false, true}) {
      SCOPED_TRACE(moe_trace(s) + (with_aux ? " with aux" : " without aux"));
      auto logits = to_double(separated_logits(s.N, s.E, seed + 1));
      auto dw = to_double(random_normal(size_t(s.N) * s.K, seed + 2));
      auto aux = to_double(random_normal(s.E, seed + 3));
      std::vector<double> probs(size_t(s.N) * s.E), w(size_t(s.N) * s.K);
      std::vector<int32_t> idx(size_t(s.N) * s.K);
      auto loss = [&] {
        ref::moe_router_forward(probs.data(), idx.data(), w.data(), logits.data(), s.N, s.E, s.K);
        double L = dot(dw, w);
        if (with_aux)
          for (int n = 0; n < s.N; ++n)
            for (int e = 0; e < s.E; ++e) L += aux[e] * probs[size_t(n) * s.E + e];
        return L;
      };
      loss();
      std::vector<double> dlogits(size_t(s.N) * s.E);
      ref::moe_router_backward(dlogits.data(), dw.data(), probs.data(), idx.data(), w.data(),
                               with_aux ? aux.data() : nullptr, s.N, s.E, s.K);
      const std::vector<int32_t> idx0 = idx;
      const auto numerical = numerical_gradient(logits, loss);
      EXPECT_EQ(idx, idx0) << "a finite-difference step changed the top-k choice";
      EXPECT_LE(max_rel(dlogits, numerical, 1e-2), 1e-6);
    }
  }
}

struct MoeRowsShape {
  int N, M, C;  // C not a multiple of 8 but in the first (the vector loops' tails)
};
constexpr MoeRowsShape kMoeRowsShapes[] = {{1, 1, 1}, {1, 5, 3}, {6, 20, 13}, {7, 3, 9}, {50, 400, 100}, {64, 512, 64}};

std::string moe_trace(const MoeRowsShape& s) {
  return "N=" + std::to_string(s.N) + " M=" + std::to_string(s.M) + " C=" + std::to_string(s.C);
}

TEST(NnGatherRows, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (MoeRowsShape s : kMoeRowsShapes) {
    SCOPED_TRACE(moe_trace(s));
    auto rows = random_ints(s.M, seed + 1, 0, s.N - 1);
    auto inp = random_normal(size_t(s.N) * s.C, seed + 2);
    std::vector<float> out(size_t(s.M) * s.C, NAN);
    kernels::gather_rows(host_view(out, {s.M, s.C}), host_view(inp, {s.N, s.C}), host_view_i32(rows, {s.M}));
    std::vector<double> out_r(out.size());
    ref::gather_rows(out_r.data(), to_double(inp).data(), rows.data(), s.M, s.C);
    EXPECT_EQ(max_rel(out, out_r, 1.0), 0.0);  // a copy
  }
}

TEST(NnScatterAddRows, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (MoeRowsShape s : kMoeRowsShapes) {
    // Random rows repeat (M > N) and may leave some rows out; all-zero rows make one hot row.
    for (bool hot : {false, true}) {
      SCOPED_TRACE(moe_trace(s) + (hot ? " one hot row" : " random rows"));
      auto rows = hot ? std::vector<int32_t>(s.M, 0) : random_ints(s.M, seed + 1, 0, s.N - 1);
      auto dout = random_normal(size_t(s.M) * s.C, seed + 2);
      auto dinp = random_normal(size_t(s.N) * s.C, seed + 3);  // non-zero: must add
      auto dinp_r = to_double(dinp);
      kernels::scatter_add_rows(host_view(dinp, {s.N, s.C}), host_view(dout, {s.M, s.C}), host_view_i32(rows, {s.M}));
      ref::scatter_add_rows(dinp_r.data(), to_double(dout).data(), rows.data(), s.M, s.C);
      // fp32 running sums: a row's error grows with its partial sums, so it is measured against the
      // typical size of the sum, √(terms) for unit normals (floor 1 for the few terms of random
      // rows, √M for the hot row). Observed up to 2e-6 (hot row, M = 512).
      const double floor = hot ? std::sqrt(double(s.M)) : 1.0;
      EXPECT_LE(max_rel(dinp, dinp_r, floor), 1e-5);
    }
  }
}

TEST(NnGatherRows, ReferenceScatterIsItsAdjoint) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 9, M = 30, C = 7;
  auto rows = random_ints(M, seed + 1, 0, N - 1);
  auto x = to_double(random_normal(size_t(N) * C, seed + 2));
  auto d = to_double(random_normal(size_t(M) * C, seed + 3));
  std::vector<double> gx(size_t(M) * C), sd(size_t(N) * C);
  ref::gather_rows(gx.data(), x.data(), rows.data(), M, C);
  ref::scatter_add_rows(sd.data(), d.data(), rows.data(), M, C);
  EXPECT_NEAR(dot(gx, d), dot(x, sd), 1e-12 * (1.0 + std::fabs(dot(gx, d))));
}

struct MoeCombineShape {
  int N, K, C, spare;  // y has M = N·K + spare rows; the spare ones are named by no token
};
constexpr MoeCombineShape kMoeCombineShapes[] = {{1, 1, 1, 0}, {1, 3, 5, 0}, {7, 2, 13, 0},
                                                 {5, 8, 33, 4}, {6, 1, 9, 2}, {64, 8, 100, 0}};

std::string moe_trace(const MoeCombineShape& s) {
  return "N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) + " C=" + std::to_string(s.C) +
         " spare=" + std::to_string(s.spare);
}

TEST(NnMoeCombine, ForwardMatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (MoeCombineShape s : kMoeCombineShapes) {
    SCOPED_TRACE(moe_trace(s));
    const int M = s.N * s.K + s.spare;
    auto pos = random_injection(int64_t(s.N) * s.K, M, seed + 1);
    auto y = random_normal(size_t(M) * s.C, seed + 2);
    auto w = random_uniform(size_t(s.N) * s.K, seed + 3, 0.0f, 1.0f);
    std::vector<float> out(size_t(s.N) * s.C, NAN);  // written, not accumulated
    kernels::moe_combine_forward(host_view(out, {s.N, s.C}), host_view(y, {M, s.C}), host_view_i32(pos, {s.N, s.K}),
                                 host_view(w, {s.N, s.K}));
    std::vector<double> out_r(out.size());
    ref::moe_combine_forward(out_r.data(), to_double(y).data(), pos.data(), to_double(w).data(), s.N, s.K, s.C);
    EXPECT_LE(max_rel(out, out_r, 1.0), 2e-6);  // K products summed in fp32: observed up to 5e-7
  }
}

TEST(NnMoeCombine, BackwardMatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (MoeCombineShape s : kMoeCombineShapes) {
    SCOPED_TRACE(moe_trace(s));
    const int M = s.N * s.K + s.spare;
    auto pos = random_injection(int64_t(s.N) * s.K, M, seed + 1);
    auto y = random_normal(size_t(M) * s.C, seed + 2);
    auto w = random_uniform(size_t(s.N) * s.K, seed + 3, 0.0f, 1.0f);
    auto dout = random_normal(size_t(s.N) * s.C, seed + 4);
    auto dy = random_normal(size_t(M) * s.C, seed + 5), dw = random_normal(size_t(s.N) * s.K, seed + 6);
    auto dy_r = to_double(dy), dw_r = to_double(dw);
    kernels::moe_combine_backward(host_view(dy, {M, s.C}), host_view(dw, {s.N, s.K}), host_view(dout, {s.N, s.C}),
                                  host_view(y, {M, s.C}), host_view_i32(pos, {s.N, s.K}), host_view(w, {s.N, s.K}));
    ref::moe_combine_backward(dy_r.data(), dw_r.data(), to_double(dout).data(), to_double(y).data(), pos.data(),
                              to_double(w).data(), s.N, s.K, s.C);
    EXPECT_LE(max_rel(dy, dy_r, 1.0), 1e-6);  // one product and add: observed up to 6e-8
    // A C-term fp32 dot product, measured against its typical size √C (unit normals): observed
    // up to 5e-7.
    EXPECT_LE(max_rel(dw, dw_r, std::sqrt(double(s.C))), 1e-5);
  }
}

TEST(NnMoeCombine, ReferenceBackwardMatchesFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 4, K = 3, C = 5, M = N * K + 2;
  auto pos = random_injection(N * K, M, seed + 1);
  auto y = to_double(random_normal(size_t(M) * C, seed + 2));
  auto w = to_double(random_normal(size_t(N) * K, seed + 3));
  auto dout = to_double(random_normal(size_t(N) * C, seed + 4));
  std::vector<double> out(size_t(N) * C);
  auto loss = [&] {
    ref::moe_combine_forward(out.data(), y.data(), pos.data(), w.data(), N, K, C);
    return dot(out, dout);
  };
  std::vector<double> dy(y.size()), dw(w.size());
  ref::moe_combine_backward(dy.data(), dw.data(), dout.data(), y.data(), pos.data(), w.data(), N, K, C);
  // L is linear in y and in w: only rounding, ~1e-16·|L| / h, observed up to 2e-8.
  EXPECT_LE(max_rel(dy, numerical_gradient(y, loss), 1e-2), 1e-6);
  EXPECT_LE(max_rel(dw, numerical_gradient(w, loss), 1e-2), 1e-6);
}

TEST(NnMoe, BackwardsAccumulate) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int N = 6, E = 8, K = 2, C = 11, M = N * K;
  auto logits = separated_logits(N, E, seed + 1);
  MoeRouting r = moe_route(logits, N, E, K);
  auto g = random_normal(size_t(N) * K, seed + 2), aux = random_normal(E, seed + 3);
  auto pos = random_injection(M, M, seed + 4);
  auto y = random_normal(size_t(M) * C, seed + 5), dout = random_normal(size_t(N) * C, seed + 6);
  auto backward = [&](std::vector<float>& dlogits, std::vector<float>& dy, std::vector<float>& dw) {
    kernels::moe_router_backward(host_view(dlogits, {N, E}), host_view(g, {N, K}), host_view(r.probs, {N, E}),
                                 host_view_i32(r.idx, {N, K}), host_view(r.w, {N, K}), host_view(aux, {E}));
    kernels::moe_combine_backward(host_view(dy, {M, C}), host_view(dw, {N, K}), host_view(dout, {N, C}),
                                  host_view(y, {M, C}), host_view_i32(pos, {N, K}), host_view(r.w, {N, K}));
  };
  std::vector<float> dl1(size_t(N) * E), dy1(size_t(M) * C), dw1(size_t(N) * K);
  std::vector<float> dl2 = dl1, dy2 = dy1, dw2 = dw1;
  backward(dl1, dy1, dw1);
  backward(dl2, dy2, dw2);
  backward(dl2, dy2, dw2);
  auto doubled = [](const std::vector<float>& v) {
    auto d = to_double(v);
    for (double& x : d) x *= 2;
    return d;
  };
  // One add per element and call (pos names each row of y once), so twice from zero is exactly 2x.
  EXPECT_EQ(max_rel(dl2, doubled(dl1), 1.0), 0.0);
  EXPECT_EQ(max_rel(dy2, doubled(dy1), 1.0), 0.0);
  EXPECT_EQ(max_rel(dw2, doubled(dw1), 1.0), 0.0);
}

// The message of the KernelError that f throws ("" if none).
std::string moe_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kernels::KernelError& e) {
    return e.what();
  }
  return "";
}

TEST(NnMoe, RejectsBadInput) {
  const int N = 4, E = 6, K = 2, C = 5, M = N * K;
  std::vector<float> logits(N * E), probs(N * E), w(N * K), dw(N * K), aux(E), wide(N * (E + 1));
  std::vector<int32_t> idx(N * K, 0), idx_wide(N * (E + 1), 0), idx_bad = {0, 1, 2, 6, 3, 4, 5, 0};
  auto lv = host_view(logits, {N, E}), pv = host_view(probs, {N, E}), wv = host_view(w, {N, K});
  auto iv = host_view_i32(idx, {N, K}), dwv = host_view(dw, {N, K}), av = host_view(aux, {E});
  EXPECT_NO_THROW(kernels::moe_router_forward(pv, iv, wv, lv));
  // K > E, K = 0, mismatched N, wrong dtypes, devices that disagree.
  const std::string too_many =
      moe_error_of([&] { kernels::moe_router_forward(pv, host_view_i32(idx_wide, {N, E + 1}), wv, lv); });
  EXPECT_NE(too_many.find("moe_router_forward"), std::string::npos) << too_many;
  EXPECT_NE(too_many.find("K = 7"), std::string::npos) << too_many;
  EXPECT_THROW(kernels::moe_router_forward(pv, host_view_i32(idx_wide, {N, E + 1}), host_view(wide, {N, E + 1}), lv),
               ShapeError);
  EXPECT_THROW(kernels::moe_router_forward(pv, host_view_i32(idx, {N, 0}), host_view(w, {N, 0}), lv), ShapeError);
  EXPECT_THROW(kernels::moe_router_forward(pv, iv, wv, host_view(logits, {N - 1, E})), ShapeError);
  EXPECT_THROW(kernels::moe_router_forward(pv, iv, host_view(w, {K, N}), lv), ShapeError);
  EXPECT_THROW(kernels::moe_router_forward(pv, as_bf16(iv), wv, lv), UnsupportedError);
  EXPECT_THROW(kernels::moe_router_forward(pv, iv, wv, as_bf16(lv)), UnsupportedError);
  EXPECT_THROW(kernels::moe_router_forward(pv, iv, wv, on_cuda(lv)), ShapeError);

  EXPECT_NO_THROW(kernels::moe_router_backward(lv, dwv, pv, iv, wv, av));
  EXPECT_NO_THROW(kernels::moe_router_backward(lv, dwv, pv, iv, wv, kernels::Tensor{}));
  EXPECT_THROW(kernels::moe_router_backward(lv, host_view(dw, {K, N}), pv, iv, wv, av), ShapeError);
  EXPECT_THROW(kernels::moe_router_backward(lv, dwv, pv, iv, wv, host_view(aux, {E - 1})), ShapeError);
  EXPECT_THROW(kernels::moe_router_backward(host_view(wide, {N, E + 1}), dwv, pv, iv, wv, av), ShapeError);
  const std::string out_of_range =
      moe_error_of([&] { kernels::moe_router_backward(lv, dwv, pv, host_view_i32(idx_bad, {N, K}), wv, av); });
  EXPECT_NE(out_of_range.find("moe_router_backward"), std::string::npos) << out_of_range;
  EXPECT_NE(out_of_range.find("topk_idx[3] = 6"), std::string::npos) << out_of_range;

  std::vector<float> x(N * C), xp(M * C), big(M * (C + 1));
  std::vector<int32_t> rows = {0, 1, 2, 3, 3, 2, 1, 0}, rows_bad = {0, 1, 2, 3, 4, 2, 1, 0}, rows_neg = rows;
  rows_neg[5] = -1;
  auto xv = host_view(x, {N, C}), xpv = host_view(xp, {M, C}), rv = host_view_i32(rows, {M});
  EXPECT_NO_THROW(kernels::gather_rows(xpv, xv, rv));
  EXPECT_NE(moe_error_of([&] { kernels::gather_rows(xpv, xv, host_view_i32(rows_bad, {M})); }).find("gather_rows"),
            std::string::npos);
  EXPECT_THROW(kernels::gather_rows(xpv, xv, host_view_i32(rows, {M - 1})), ShapeError);
  EXPECT_THROW(kernels::gather_rows(host_view(big, {M, C + 1}), xv, rv), ShapeError);
  EXPECT_THROW(kernels::gather_rows(xpv, host_view(x, {N * C}), rv), ShapeError);
  EXPECT_THROW(kernels::gather_rows(as_bf16(xpv), as_bf16(xv), rv), UnsupportedError);
  EXPECT_NO_THROW(kernels::scatter_add_rows(xv, xpv, rv));
  EXPECT_NE(moe_error_of([&] { kernels::scatter_add_rows(xv, xpv, host_view_i32(rows_neg, {M})); })
                .find("scatter_add_rows"),
            std::string::npos);
  EXPECT_THROW(kernels::scatter_add_rows(xv, host_view(big, {M, C + 1}), rv), ShapeError);
  EXPECT_THROW(kernels::scatter_add_rows(xv, xpv, host_view(xp, {M})), UnsupportedError);  // rows must be i32

  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5, 6, 7}, pos_repeat = {0, 1, 2, 3, 4, 5, 6, 2}, pos_bad = pos;
  pos_bad[7] = M;
  auto posv = host_view_i32(pos, {N, K});
  EXPECT_NO_THROW(kernels::moe_combine_forward(xv, xpv, posv, wv));
  EXPECT_NE(moe_error_of([&] { kernels::moe_combine_forward(xv, xpv, host_view_i32(pos_bad, {N, K}), wv); })
                .find("moe_combine_forward"),
            std::string::npos);
  EXPECT_THROW(kernels::moe_combine_forward(xv, xpv, posv, host_view(w, {K, N})), ShapeError);
  EXPECT_THROW(kernels::moe_combine_forward(xv, host_view(big, {M, C + 1}), posv, wv), ShapeError);
  EXPECT_NO_THROW(kernels::moe_combine_backward(xpv, dwv, xv, xpv, posv, wv));
  const std::string repeated =
      moe_error_of([&] { kernels::moe_combine_backward(xpv, dwv, xv, xpv, host_view_i32(pos_repeat, {N, K}), wv); });
  EXPECT_NE(repeated.find("moe_combine_backward"), std::string::npos) << repeated;
  EXPECT_NE(repeated.find("repeats"), std::string::npos) << repeated;
  EXPECT_THROW(kernels::moe_combine_backward(xpv, host_view(dw, {K, N}), xv, xpv, posv, wv), ShapeError);
  EXPECT_THROW(kernels::moe_combine_backward(host_view(big, {M, C + 1}), dwv, xv, xpv, posv, wv), ShapeError);
}

}  // namespace
}  // namespace precon::test
