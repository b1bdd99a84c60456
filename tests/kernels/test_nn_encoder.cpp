// encoder_forward / encoder_backward against the double reference and finite differences.
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

struct EncoderShape {
  int B, T, C, Vp, maxT;
};

TEST(NnEncoder, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  // Vp = 3 with B*T = 60 positions forces many repeated tokens, the case that would race.
  for (EncoderShape s : {EncoderShape{1, 1, 1, 1, 1}, EncoderShape{2, 7, 13, 11, 9}, EncoderShape{4, 15, 33, 3, 16}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " Vp=" << s.Vp);
    const int BT = s.B * s.T;
    auto tokens = random_ints(BT, seed + 1, 0, s.Vp - 1);
    auto wte = random_normal(size_t(s.Vp) * s.C, seed + 2);
    auto wpe = random_normal(size_t(s.maxT) * s.C, seed + 3);
    auto dout = random_normal(size_t(BT) * s.C, seed + 4);
    auto dwte = random_normal(wte.size(), seed + 5);  // non-zero: the backward must add
    auto dwpe = random_normal(wpe.size(), seed + 6);
    std::vector<float> out(size_t(BT) * s.C);

    kernels::encoder_forward(host_view(out, {s.B, s.T, s.C}), host_view_i32(tokens, {s.B, s.T}),
                             host_view(wte, {s.Vp, s.C}), host_view(wpe, {s.maxT, s.C}));
    std::vector<double> out_ref(out.size());
    ref::encoder_forward(out_ref.data(), tokens.data(), to_double(wte).data(), to_double(wpe).data(), s.B, s.T, s.C);
    // One fp32 addition: the exact double sum rounded to fp32 is bit-identical.
    EXPECT_EQ(out, to_float(out_ref));

    auto dwte_ref = to_double(dwte), dwpe_ref = to_double(dwpe);
    kernels::encoder_backward(host_view(dwte, {s.Vp, s.C}), host_view(dwpe, {s.maxT, s.C}),
                              host_view(dout, {s.B, s.T, s.C}), host_view_i32(tokens, {s.B, s.T}));
    ref::encoder_backward(dwte_ref.data(), dwpe_ref.data(), to_double(dout).data(), tokens.data(), s.B, s.T, s.C);
    // Sequential fp32 sums of up to ~25 unit-normal terms per row (60 positions over 3 tokens)
    // onto a unit-normal start, partial sums up to ~10: worst case 25 * 6e-8 * 10 = 1.5e-5
    // absolute, observed ~1e-6; the floor of 1 makes it absolute for small entries.
    EXPECT_LE(max_rel(dwte, dwte_ref, 1.0), 2e-5);
    EXPECT_LE(max_rel(dwpe, dwpe_ref, 1.0), 2e-5);
  }
}

TEST(NnEncoder, ReferenceGradientsMatchFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int B = 2, T = 3, C = 4, Vp = 5, maxT = 4;
  auto tokens = random_ints(B * T, seed + 1, 0, Vp - 1);
  auto wte = to_double(random_normal(Vp * C, seed + 2));
  auto wpe = to_double(random_normal(maxT * C, seed + 3));
  auto dout = to_double(random_normal(B * T * C, seed + 4));
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    ref::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, dout);
  };
  std::vector<double> dwte(wte.size()), dwpe(wpe.size());
  ref::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  // The op is linear, so central differences are exact up to rounding.
  EXPECT_LE(max_rel(dwte, numerical_gradient(wte, loss), 1e-2), 1e-6);
  EXPECT_LE(max_rel(dwpe, numerical_gradient(wpe, loss), 1e-2), 1e-6);
}

TEST(NnEncoder, BackwardAccumulatesAndSkipsEmptyGradients) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int B = 2, T = 5, C = 6, Vp = 7;
  auto tokens = random_ints(B * T, seed + 1, 0, Vp - 1);
  auto dout = random_normal(B * T * C, seed + 2);
  std::vector<float> once_te(Vp * C), once_pe(T * C), twice_te(Vp * C), twice_pe(T * C);
  auto run = [&](std::vector<float>& te, std::vector<float>& pe) {
    kernels::encoder_backward(host_view(te, {Vp, C}), host_view(pe, {T, C}), host_view(dout, {B, T, C}),
                              host_view_i32(tokens, {B, T}));
  };
  run(once_te, once_pe);
  run(twice_te, twice_pe);
  run(twice_te, twice_pe);
  // The second call adds term by term onto the first sum, so rounding differs from 2x by a few ulp.
  auto doubled = [](const std::vector<float>& v) {
    auto d = to_double(v);
    for (double& x : d) x *= 2;
    return d;
  };
  EXPECT_LE(max_rel(twice_te, doubled(once_te), 1.0), 1e-6);
  EXPECT_LE(max_rel(twice_pe, doubled(once_pe), 1.0), 1e-6);

  std::vector<float> only_pe(T * C);
  kernels::encoder_backward(kernels::Tensor{}, host_view(only_pe, {T, C}), host_view(dout, {B, T, C}),
                            host_view_i32(tokens, {B, T}));
  EXPECT_EQ(only_pe, once_pe);  // same additions in the same order
}

TEST(NnEncoder, RejectsBadInput) {
  const int B = 2, T = 3, C = 4, Vp = 5, maxT = 4;
  std::vector<int32_t> tokens(B * T, 1);
  std::vector<float> out(B * T * C), wte(Vp * C), wpe(maxT * C), wide(Vp * (C + 1));
  auto tok = host_view_i32(tokens, {B, T});
  auto o = host_view(out, {B, T, C});
  auto te = host_view(wte, {Vp, C});
  auto pe = host_view(wpe, {maxT, C});
  EXPECT_THROW(kernels::encoder_forward(o, tok, host_view(wide, {Vp, C + 1}), pe), ShapeError);
  EXPECT_THROW(kernels::encoder_forward(o, tok, te, host_view(wpe, {2, C})), ShapeError);  // maxT < T
  EXPECT_THROW(kernels::encoder_forward(host_view(out, {B * T, C}), tok, te, pe), ShapeError);
  EXPECT_THROW(kernels::encoder_forward(o, tok, as_bf16(te), pe), UnsupportedError);
  EXPECT_THROW(kernels::encoder_forward(o, on_cuda(tok), te, pe), ShapeError);
  std::vector<float> float_tokens(B * T);
  EXPECT_THROW(kernels::encoder_forward(o, host_view(float_tokens, {B, T}), te, pe), UnsupportedError);
  tokens[4] = Vp;
  EXPECT_THROW(kernels::encoder_forward(o, tok, te, pe), ShapeError);
  EXPECT_THROW(kernels::encoder_backward(te, pe, o, tok), ShapeError);
  tokens[4] = -1;
  EXPECT_THROW(kernels::encoder_forward(o, tok, te, pe), ShapeError);
  tokens[4] = 0;
  EXPECT_THROW(kernels::encoder_backward(te, host_view(wide, {maxT, C + 1}), o, tok), ShapeError);
  EXPECT_THROW(kernels::encoder_backward(on_cuda(te), pe, o, tok), ShapeError);
  EXPECT_NO_THROW(kernels::encoder_backward(te, pe, o, tok));
}

}  // namespace
}  // namespace precon::test
