// The CPU tiers against the Boost.Multiprecision oracle: |tier − oracle| ≤ the tier's own
// certified bound on random, confident, large-offset and masked rows (V up to 128256), with every
// LossSpec option; and gradients against central finite differences of the oracle's loss.
#include "reference/oracle.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "datasets/synthetic.hpp"

namespace xentlab {
namespace {

// Both CPU tiers (the compensated tier and the BLAS tier; logits problems always run the
// compensated one) against the oracle, each within its own bounds. One oracle serves both: its
// rows do not depend on the tier, and are computed once.
void expect_oracle_agrees(const Problem& p, const LossSpec& s, ReferenceOptions o = {},
                          OracleSampleSpec os = {}) {
  Oracle oracle(p, s, o.upstream);
  for (ReferenceTier tier : {ReferenceTier::compensated, ReferenceTier::blas}) {
    o.tier = tier;
    const ReferenceResult r = compute_reference(p, s, o);
    const OracleReport rep = check_with_oracle(oracle, p, s, o, r, os);
    EXPECT_TRUE(rep.passed()) << to_string(tier) << " tier: " << p.describe() << " " << s.describe()
                              << "\n"
                              << rep.summary();
    EXPECT_GE(rep.checks.size(), 4u) << rep.summary();
  }
}

LossSpec all_options(Reduction red) {
  LossSpec s;
  s.reduction = red;
  s.label_smoothing = 0.1;
  s.z_loss = 1e-3;
  s.softcap = 15;
  s.logit_scale = 0.75;
  return s;
}

TEST(Oracle, RandomRowsEveryDtype) {
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32})
    expect_oracle_agrees(make_gaussian_linear(6, 257, 19, dt, 3.0, 5), LossSpec{});
}

TEST(Oracle, EveryLossSpecOption) {
  const Problem p = make_gaussian_linear(5, 131, 9, DType::bf16, 8.0, 21);
  for (Reduction red : {Reduction::mean, Reduction::sum}) expect_oracle_agrees(p, all_options(red));
  ReferenceOptions o;
  o.upstream = {0.5, -2.0, 0.0, 1.0, 3.25};
  expect_oracle_agrees(p, all_options(Reduction::none), o);
}

TEST(Oracle, ConfidentRows) {
  // Target logit far above the rest: p_t → 1, the true-class gradient 1 − p_t is tiny.
  Problem p = make_gaussian_linear(4, 1000, 8, DType::bf16, 1.0, 2);
  Tensor b(DType::fp32, {1000}, "bias");
  for (std::size_t i = 0; i < 4; ++i) b.set(p.targets[i], 8.0 + 6.0 * static_cast<double>(i));
  p.bias = b;
  ReferenceOptions o;
  OracleSampleSpec os;
  os.rows = 4;
  expect_oracle_agrees(p, LossSpec{}, o, os);
}

TEST(Oracle, LargeCommonOffset) {
  Problem p = make_gaussian_logits(4, 300, DType::fp32, 2.0, 9);
  for (std::int64_t k = 0; k < p.logits.numel(); ++k) p.logits.set(k, p.logits.get(k) + 1e5);
  ReferenceOptions o;
  o.want_dz = true;
  expect_oracle_agrees(p, LossSpec{}, o);
}

TEST(Oracle, MaskedVocabulary) {
  Problem p = make_gaussian_linear(4, 500, 6, DType::fp16, 4.0, 4);
  Tensor b(DType::fp32, {500}, "bias");
  for (std::int64_t j = 0; j < 500; j += 2) b.set(j, -HUGE_VAL);
  for (auto& t : p.targets) t |= 1;  // targets on unmasked (odd) rows
  p.bias = b;
  expect_oracle_agrees(p, LossSpec{});
}

TEST(Oracle, LlamaVocabulary) {
  const Problem p = make_gaussian_linear(3, 128256, 4, DType::bf16, 6.0, 17);
  ReferenceOptions o;
  o.vocab_rows = sample_rows(128256, 64, 3);
  OracleSampleSpec os;
  os.rows = 2;
  os.max_mp_ops = 2e6;
  expect_oracle_agrees(p, LossSpec{}, o, os);
}

// Central finite difference of the oracle's reduced loss in 100-digit arithmetic: with h = 1e-40
// the truncation error is O(h²) ≈ 1e-80 and the rounding error ≈ 1e-100/h = 1e-60, both far below
// any fast-tier bound, so |fast gradient − FD| ≤ fast bound is the test.
TEST(Oracle, GradientsMatchFiniteDifferences) {
  for (Reduction red : {Reduction::mean, Reduction::sum}) {
    Problem p = make_gaussian_linear(3, 7, 5, DType::fp32, 3.0, 8);
    Tensor b(DType::fp32, {7}, "bias");
    for (std::int64_t j = 0; j < 7; ++j) b.set(j, 0.25 * static_cast<double>(j) - 1);
    p.bias = b;
    p.targets[1] = -100;
    const LossSpec s = all_options(red);
    const ReferenceResult r = compute_reference(p, s);
    Oracle oracle(p, s);
    const mp_float h("1e-40");
    auto fd = [&](char which, std::int64_t idx) {
      oracle.perturb(which, idx, h);
      const mp_float up = oracle.reduced_loss();
      oracle.perturb(which, idx, -2 * h);
      const mp_float dn = oracle.reduced_loss();
      oracle.perturb(which, idx, h);
      return ((up - dn) / (2 * h)).convert_to<double>();
    };
    for (std::int64_t k = 0; k < 3 * 5; ++k)
      EXPECT_LE(std::fabs(r.dH[static_cast<std::size_t>(k)] - fd('H', k)),
                r.dH_bound[static_cast<std::size_t>(k)] +
                    0x1p-52 * std::fabs(r.dH[static_cast<std::size_t>(k)]))
          << "dH " << k;
    for (std::int64_t k = 0; k < 7 * 5; ++k)
      EXPECT_LE(std::fabs(r.dW[static_cast<std::size_t>(k)] - fd('W', k)),
                r.dW_bound[static_cast<std::size_t>(k)] +
                    0x1p-52 * std::fabs(r.dW[static_cast<std::size_t>(k)]))
          << "dW " << k;
    for (std::int64_t j = 0; j < 7; ++j)
      EXPECT_LE(std::fabs(r.db[static_cast<std::size_t>(j)] - fd('b', j)),
                r.db_bound[static_cast<std::size_t>(j)] +
                    0x1p-52 * std::fabs(r.db[static_cast<std::size_t>(j)]))
          << "db " << j;
  }
}

TEST(Oracle, LogitGradientsMatchFiniteDifferences) {
  const Problem p = make_gaussian_logits(2, 9, DType::bf16, 4.0, 12);
  const LossSpec s = all_options(Reduction::mean);
  ReferenceOptions o;
  o.want_dz = true;
  const ReferenceResult r = compute_reference(p, s, o);
  Oracle oracle(p, s);
  const mp_float h("1e-40");
  for (std::int64_t k = 0; k < 18; ++k) {
    oracle.perturb('Z', k, h);
    const mp_float up = oracle.reduced_loss();
    oracle.perturb('Z', k, -2 * h);
    const mp_float dn = oracle.reduced_loss();
    oracle.perturb('Z', k, h);
    const double g = ((up - dn) / (2 * h)).convert_to<double>();
    // The FD value is rounded to double once (0.5 ulp) after a 1e-60-accurate difference.
    EXPECT_LE(std::fabs(r.dz[static_cast<std::size_t>(k)] - g),
              r.dz_bound[static_cast<std::size_t>(k)] + 0x1p-53 * std::fabs(g))
        << k;
  }
}

}  // namespace
}  // namespace xentlab

namespace xentlab {
namespace {

// The check can fail: a fast result moved by three times its own bound is caught.
TEST(Oracle, DetectsAPerturbedResult) {
  const Problem p = make_gaussian_linear(4, 200, 8, DType::bf16, 3.0, 6);
  const LossSpec s;
  ReferenceResult r = compute_reference(p, s);
  OracleSampleSpec os;
  os.rows = 4;
  ASSERT_TRUE(check_with_oracle(p, s, {}, r, os).passed());
  r.loss[2] += 3 * r.loss_bound[2];
  const OracleReport rep = check_with_oracle(p, s, {}, r, os);
  EXPECT_FALSE(rep.passed());
  EXPECT_EQ(rep.failures, 1);
}

}  // namespace
}  // namespace xentlab
