// Exact-by-construction properties of the reference: values known in closed form, invariances
// (sampling, threads), and 64-bit indexing.
#include <gtest/gtest.h>

#include <cmath>

#include "datasets/synthetic.hpp"
#include "reference/reference.hpp"
#include "tests/support/case_support.hpp"

namespace xentlab {
namespace {

// The expected values below come from one libm call (log, log1p, exp), each within 2 ULP = 4u of
// the exact value (glibc's documented accuracy): that is the expected value's own tolerance.
constexpr double kLibmRel = 4 * 0x1p-53;

TEST(ReferenceExact, AllEqualLogitsGiveLnV) {
  for (std::int64_t V : {1, 2, 7, 1000, 128256}) {
    for (double c : {0.0, -20.0, 4096.0, 1e8}) {
      Tensor Z(DType::fp32, {2, V});
      for (std::int64_t k = 0; k < 2 * V; ++k) Z.set(k, c);
      const Problem p = Problem::from_logits(Z, {0, V - 1});
      ReferenceOptions o;
      o.want_dz = true;
      LossSpec s;
      s.reduction = Reduction::sum;
      const ReferenceResult r = compute_reference(p, s, o);
      const double lnV = std::log(static_cast<double>(V));
      for (int q = 0; q < 2; ++q) {
        EXPECT_LE(std::fabs(r.loss[q] - lnV), r.loss_bound[q] + kLibmRel * lnV) << V << " " << c;
        const std::int64_t t = q == 0 ? 0 : V - 1;
        const double pj = 1.0 / static_cast<double>(V);
        for (std::int64_t j : {std::int64_t{0}, V / 2, V - 1}) {
          const double expect = j == t ? -(1.0 - pj) : pj;
          EXPECT_LE(std::fabs(r.dz[static_cast<std::size_t>(q * V + j)] - expect),
                    r.dz_bound[static_cast<std::size_t>(q * V + j)] + 0x1p-53 * std::fabs(expect));
        }
      }
    }
  }
}

TEST(ReferenceExact, TwoClassClosedForm) {
  // z = [0, d], t = 0: loss = softplus(d) = log1p(e^d) (d ≤ 0) or d + log1p(e^-d) (d > 0);
  // dz_0 = −σ(d), dz_1 = σ(d).
  for (double d : {-700.0, -60.0, -3.0, -0.5, 0.0, 0.25, 3.0, 40.0, 700.0}) {
    const Problem p = testing::logits_problem(DType::fp32, {{0.0, d}}, {0});
    ReferenceOptions o;
    o.want_dz = true;
    LossSpec s;
    s.reduction = Reduction::sum;
    const ReferenceResult r = compute_reference(p, s, o);
    const double sp = d <= 0 ? std::log1p(std::exp(d)) : d + std::log1p(std::exp(-d));
    EXPECT_LE(std::fabs(r.loss[0] - sp), r.loss_bound[0] + 3 * kLibmRel * std::fabs(sp)) << d;
    const double sig = d <= 0 ? std::exp(d) / (1 + std::exp(d)) : 1 / (1 + std::exp(-d));
    EXPECT_LE(std::fabs(r.dz[1] - sig), r.dz_bound[1] + 3 * kLibmRel * sig) << d;
    EXPECT_LE(std::fabs(r.dz[0] + sig), r.dz_bound[0] + 3 * kLibmRel * sig) << d;
  }
}

// The compensated tier's per-row arithmetic does not depend on which rows are computed, so a
// sampled row is bit for bit the full computation's (the BLAS tier's GEMM blocking may round
// differently: test_reference_tiers holds it to the bounds instead).
TEST(ReferenceExact, SampledRowsEqualTheFullComputation) {
  const Problem p = make_gaussian_linear(24, 301, 37, DType::bf16, 3.0, 11);
  LossSpec s;
  s.reduction = Reduction::mean;
  ReferenceOptions fo;
  fo.tier = ReferenceTier::compensated;
  const ReferenceResult full = compute_reference(p, s, fo);
  ReferenceOptions o;
  o.tier = ReferenceTier::compensated;
  o.token_rows = {1, 5, 23};
  o.vocab_rows = {0, 150, 300};
  const ReferenceResult part = compute_reference(p, s, o);
  ASSERT_TRUE(part.partial);
  for (std::size_t q = 0; q < 3; ++q) {
    const auto i = static_cast<std::size_t>(o.token_rows[q]);
    EXPECT_EQ(part.loss[q], full.loss[i]);
    EXPECT_EQ(part.lse[q], full.lse[i]);
    for (std::int64_t d = 0; d < p.D; ++d)
      EXPECT_EQ(part.dH[q * 37 + static_cast<std::size_t>(d)],
                full.dH[i * 37 + static_cast<std::size_t>(d)]);
  }
  // dW over the sampled token rows = dW of the problem restricted to those rows, with the same
  // per-row gradient scale (sum reduction gives scale 1 in both).
  s.reduction = Reduction::sum;
  const ReferenceResult part_sum = compute_reference(p, s, o);
  Tensor H(DType::bf16, {3, 37});
  std::vector<std::int64_t> t;
  for (std::size_t q = 0; q < 3; ++q) {
    const std::int64_t i = o.token_rows[q];
    for (std::int64_t d = 0; d < 37; ++d)
      H.set(static_cast<std::int64_t>(q) * 37 + d, p.H.get(i * 37 + d));
    t.push_back(p.targets[static_cast<std::size_t>(i)]);
  }
  const Problem sub = Problem::linear(H, p.W, std::nullopt, t);
  const ReferenceResult subr = compute_reference(sub, s);
  for (std::size_t jj = 0; jj < 3; ++jj)
    for (std::size_t d = 0; d < 37; ++d) {
      const auto j = static_cast<std::size_t>(o.vocab_rows[jj]);
      EXPECT_LE(std::fabs(part_sum.dW[jj * 37 + d] - subr.dW[j * 37 + d]),
                part_sum.dW_bound[jj * 37 + d] + subr.dW_bound[j * 37 + d]);
    }
}

TEST(ReferenceExact, ThreadCountDoesNotChangeABit) {
  const Problem p = make_gaussian_linear(16, 513, 29, DType::fp16, 5.0, 3);
  LossSpec s;
  s.label_smoothing = 0.1;
  s.z_loss = 1e-4;
  ReferenceOptions o1, o2;
  o1.threads = 1;
  o2.threads = 2;
  const ReferenceResult a = compute_reference(p, s, o1), b = compute_reference(p, s, o2);
  EXPECT_EQ(a.reduced_loss, b.reduced_loss);
  EXPECT_EQ(a.dH, b.dH);
  EXPECT_EQ(a.dW, b.dW);
  EXPECT_EQ(a.db, b.db);
}

TEST(ReferenceExact, SixtyFourBitIndexing) {
  // N·V = 16400·131072 > 2^31 elements: the last rows live past a 32-bit offset.
  const std::int64_t N = 16400, V = 131072;
  ASSERT_GT(N * V, std::int64_t{1} << 31);
  Tensor Z(DType::bf16, {N, V});
  const std::int64_t last = N - 1;
  Z.set(last * V + (V - 1), 3.0);
  std::vector<std::int64_t> t(static_cast<std::size_t>(N), 0);
  t[static_cast<std::size_t>(last)] = V - 1;
  const Problem p = Problem::from_logits(std::move(Z), t);
  ReferenceOptions o;
  o.token_rows = {0, last};
  o.want_dz = true;
  LossSpec s;
  s.reduction = Reduction::sum;
  const ReferenceResult r = compute_reference(p, s, o);
  // Row 0: all zeros → ln V. Last row: one logit 3 at the target → log(V − 1 + e^3) − 3.
  const double lnV = std::log(static_cast<double>(V));
  EXPECT_LE(std::fabs(r.loss[0] - lnV), r.loss_bound[0] + kLibmRel * lnV);
  const double expect = std::log1p((V - 1) * std::exp(-3.0));
  EXPECT_LE(std::fabs(r.loss[1] - expect), r.loss_bound[1] + 3 * kLibmRel * expect);
  EXPECT_GT(r.max_logit[1], 2.5);
}

}  // namespace
}  // namespace xentlab
