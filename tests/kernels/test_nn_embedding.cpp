// embedding_forward / embedding_backward against the double reference and finite differences.
#include <gtest/gtest.h>

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

struct EmbeddingShape {
  int B, T, C, Vp;
};

TEST(NnEmbedding, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  // Vp = 3 with B*T = 60 positions forces many repeated tokens, the case that would race.
  for (EmbeddingShape s : {EmbeddingShape{1, 1, 1, 1}, EmbeddingShape{2, 7, 13, 11}, EmbeddingShape{4, 15, 33, 3},
                           EmbeddingShape{2, 64, 768, 1000}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " Vp=" << s.Vp);
    const int BT = s.B * s.T;
    auto tokens = random_ints(BT, seed + 1, 0, s.Vp - 1);
    auto wte = random_normal(size_t(s.Vp) * s.C, seed + 2);
    auto dout = random_normal(size_t(BT) * s.C, seed + 3);
    auto dwte = random_normal(wte.size(), seed + 4);  // non-zero: the backward must add
    std::vector<float> out(size_t(BT) * s.C);

    kernels::embedding_forward(host_view(out, {s.B, s.T, s.C}), host_view_i32(tokens, {s.B, s.T}),
                               host_view(wte, {s.Vp, s.C}));
    std::vector<double> out_ref(out.size());
    ref::embedding_forward(out_ref.data(), tokens.data(), to_double(wte).data(), s.B, s.T, s.C);
    EXPECT_EQ(out, to_float(out_ref));  // a copy

    auto dwte_ref = to_double(dwte);
    kernels::embedding_backward(host_view(dwte, {s.Vp, s.C}), host_view(dout, {s.B, s.T, s.C}),
                                host_view_i32(tokens, {s.B, s.T}));
    ref::embedding_backward(dwte_ref.data(), to_double(dout).data(), tokens.data(), s.B, s.T, s.C);
    // Sequential fp32 sums of up to ~25 unit-normal terms per row onto a unit-normal start, as in
    // encoder_backward: observed ~1e-6 absolute (floor 1).
    EXPECT_LE(max_rel(dwte, dwte_ref, 1.0), 2e-5);
  }
}

TEST(NnEmbedding, ReferenceGradientsMatchFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int B = 2, T = 3, C = 4, Vp = 5;
  auto tokens = random_ints(B * T, seed + 1, 0, Vp - 1);
  auto wte = to_double(random_normal(Vp * C, seed + 2));
  auto dout = to_double(random_normal(B * T * C, seed + 3));
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    ref::embedding_forward(out.data(), tokens.data(), wte.data(), B, T, C);
    return dot(out, dout);
  };
  std::vector<double> dwte(wte.size());
  ref::embedding_backward(dwte.data(), dout.data(), tokens.data(), B, T, C);
  EXPECT_LE(max_rel(dwte, numerical_gradient(wte, loss), 1e-2), 1e-6);  // linear: exact up to rounding
}

TEST(NnEmbedding, BackwardAccumulates) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int B = 2, T = 5, C = 6, Vp = 7;
  auto tokens = random_ints(B * T, seed + 1, 0, Vp - 1);
  auto dout = random_normal(B * T * C, seed + 2);
  std::vector<float> once(Vp * C), twice(Vp * C);
  auto run = [&](std::vector<float>& dwte) {
    kernels::embedding_backward(host_view(dwte, {Vp, C}), host_view(dout, {B, T, C}), host_view_i32(tokens, {B, T}));
  };
  run(once);
  run(twice);
  run(twice);
  // The second call adds term by term onto the first sum, so rounding differs from 2x by a few ulp.
  auto doubled = to_double(once);
  for (double& x : doubled) x *= 2;
  EXPECT_LE(max_rel(twice, doubled, 1.0), 1e-6);
}

TEST(NnEmbedding, RejectsBadInput) {
  const int B = 2, T = 3, C = 4, Vp = 5;
  std::vector<int32_t> tokens(B * T, 1);
  std::vector<float> out(B * T * C), wte(Vp * C), wide(Vp * (C + 1));
  auto tok = host_view_i32(tokens, {B, T});
  auto o = host_view(out, {B, T, C});
  auto te = host_view(wte, {Vp, C});
  EXPECT_NO_THROW(kernels::embedding_forward(o, tok, te));
  EXPECT_THROW(kernels::embedding_forward(o, tok, host_view(wide, {Vp, C + 1})), ShapeError);
  EXPECT_THROW(kernels::embedding_forward(host_view(out, {B * T, C}), tok, te), ShapeError);
  EXPECT_THROW(kernels::embedding_forward(o, host_view_i32(tokens, {B * T}), te), ShapeError);
  EXPECT_THROW(kernels::embedding_forward(o, tok, host_view(wte, {Vp * C})), ShapeError);
  EXPECT_THROW(kernels::embedding_forward(o, tok, as_bf16(te)), UnsupportedError);
  EXPECT_THROW(kernels::embedding_forward(o, on_cuda(tok), te), ShapeError);
  std::vector<float> float_tokens(B * T);
  EXPECT_THROW(kernels::embedding_forward(o, host_view(float_tokens, {B, T}), te), UnsupportedError);
  tokens[4] = Vp;
  EXPECT_THROW(kernels::embedding_forward(o, tok, te), ShapeError);
  EXPECT_THROW(kernels::embedding_backward(te, o, tok), ShapeError);
  tokens[4] = -1;
  EXPECT_THROW(kernels::embedding_forward(o, tok, te), ShapeError);
  EXPECT_THROW(kernels::embedding_backward(te, o, tok), ShapeError);
  tokens[4] = 0;
  EXPECT_NO_THROW(kernels::embedding_backward(te, o, tok));
  EXPECT_THROW(kernels::embedding_backward(host_view(wide, {Vp, C + 1}), o, tok), ShapeError);
  EXPECT_THROW(kernels::embedding_backward(te, host_view(out, {B * T, C}), tok), ShapeError);
  EXPECT_THROW(kernels::embedding_backward(kernels::Tensor{}, o, tok), ShapeError);
  EXPECT_THROW(kernels::embedding_backward(on_cuda(te), o, tok), ShapeError);
}

}  // namespace
}  // namespace precon::test
