// gelu_forward / gelu_backward against the double reference and finite differences.
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

TEST(NnGelu, MatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  for (int n : {1, 7 * 13, 1000}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    auto inp = random_uniform(n, seed + 1, -6.0f, 6.0f);
    inp[0] = n > 1 ? 25.0f : -25.0f;  // saturated tanh on either side
    if (n > 1) inp[1] = -25.0f;
    auto dout = random_normal(n, seed + 2);
    auto dinp = random_normal(n, seed + 3);  // non-zero: the backward must add
    std::vector<float> out(n);
    kernels::gelu_forward(host_view(out, {n}), host_view(inp, {n}));
    std::vector<double> out_r(n), inp_d = to_double(inp);
    ref::gelu_forward(out_r.data(), inp_d.data(), n);
    // A few ulp of tanh, scaled by |x| <= 25 where 1 + tanh cancels: absolute error ~1e-6 on
    // values of size up to 25, hence a floor of 1.
    EXPECT_LE(max_rel(out, out_r, 1.0), 2e-6);

    auto dinp_r = to_double(dinp);
    kernels::gelu_backward(host_view(dinp, {n}), host_view(inp, {n}), host_view(dout, {n}));
    ref::gelu_backward(dinp_r.data(), inp_d.data(), to_double(dout).data(), n);
    EXPECT_LE(max_rel(dinp, dinp_r, 1.0), 5e-6);
  }
}

TEST(NnGelu, WorksOnAnyShape) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  auto inp = random_normal(2 * 3 * 5 * 7, seed);
  std::vector<float> flat(inp.size()), shaped(inp.size());
  kernels::gelu_forward(host_view(flat, {210}), host_view(inp, {210}));
  kernels::gelu_forward(host_view(shaped, {2, 3, 5, 7}), host_view(inp, {2, 3, 5, 7}));
  EXPECT_EQ(flat, shaped);
}

TEST(NnGelu, ReferenceGradientMatchesFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int n = 40;
  auto inp = to_double(random_uniform(n, seed + 1, -5.0f, 5.0f));
  auto dout = to_double(random_normal(n, seed + 2));
  std::vector<double> out(n), dinp(n);
  auto loss = [&] {
    ref::gelu_forward(out.data(), inp.data(), n);
    return dot(out, dout);
  };
  ref::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  EXPECT_LE(max_rel(dinp, numerical_gradient(inp, loss), 1e-2), 1e-6);  // smooth; FD error ~1e-10
}

TEST(NnGelu, BackwardAccumulates) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const int n = 33;
  auto inp = random_normal(n, seed + 1), dout = random_normal(n, seed + 2);
  std::vector<float> once(n), twice(n);
  kernels::gelu_backward(host_view(once, {n}), host_view(inp, {n}), host_view(dout, {n}));
  kernels::gelu_backward(host_view(twice, {n}), host_view(inp, {n}), host_view(dout, {n}));
  kernels::gelu_backward(host_view(twice, {n}), host_view(inp, {n}), host_view(dout, {n}));
  for (float& x : once) x *= 2;  // 0 + g + g == 2g exactly in fp32
  EXPECT_EQ(twice, once);
}

TEST(NnGelu, RejectsBadInput) {
  std::vector<float> a(12), b(12), c(13);
  auto x = host_view(a, {3, 4}), y = host_view(b, {3, 4});
  EXPECT_THROW(kernels::gelu_forward(host_view(c, {13}), x), ShapeError);
  EXPECT_THROW(kernels::gelu_forward(host_view(b, {4, 3}), x), ShapeError);
  EXPECT_THROW(kernels::gelu_forward(y, x.transposed()), ShapeError);
  EXPECT_THROW(kernels::gelu_forward(as_bf16(y), as_bf16(x)), UnsupportedError);
  EXPECT_THROW(kernels::gelu_forward(on_cuda(y), x), ShapeError);
  EXPECT_THROW(kernels::gelu_backward(y, x, host_view(c, {13})), ShapeError);
  EXPECT_THROW(kernels::gelu_backward(y, x, on_cuda(y)), ShapeError);
  EXPECT_NO_THROW(kernels::gelu_backward(y, x, y));
}

}  // namespace
}  // namespace precon::test
