// The reference's tiers against one another: the BLAS tier (and the cuda tier, where a GPU is
// present) agree with the compensated tier within the sum of their own bounds on every output,
// for every loss option; results do not depend on the blocking or the thread count beyond those
// bounds; a problem over the memory budget is refused before any work, naming the bytes.
// Expected values come from the compensated tier, which test_reference_cases and test_oracle tie
// to exact answers and to the multiprecision oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "datasets/synthetic.hpp"
#include "numerics/error.hpp"
#include "reference/oracle.hpp"
#include "reference/reference.hpp"
#include "tests/support/reference_tiers_support.hpp"

namespace xentlab {
using namespace tier_tests;

TEST(ReferenceTiers, BlasAgreesWithCompensatedOnEveryOption) {
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32}) {
    const Problem p = masked_head(dt, 3);
    for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
      for (bool opts : {false, true}) {
        LossSpec s = opts ? all_options(red) : LossSpec{};
        s.reduction = red;
        ReferenceOptions o;
        o.want_dz = true;
        if (red == Reduction::none)
          for (std::int64_t i = 0; i < p.N; ++i)
            o.upstream.push_back(0.25 * static_cast<double>(i % 5) - 0.5);
        const std::string ctx = std::string(to_string(dt)) + " " + s.describe();
        expect_agree(run(p, s, o, ReferenceTier::compensated), run(p, s, o, ReferenceTier::blas),
                     ctx);
      }
    }
  }
}

TEST(ReferenceTiers, BlasSampledRowsAgree) {
  const Problem p = make_gaussian_linear(50, 700, 33, DType::bf16, 6.0, 8);
  ReferenceOptions o;
  o.token_rows = sample_rows(p.N, 13, 4);
  o.vocab_rows = sample_rows(p.V, 41, 5);
  const LossSpec s = all_options(Reduction::mean);
  expect_agree(run(p, s, o, ReferenceTier::compensated), run(p, s, o, ReferenceTier::blas),
               "sampled rows");
}

TEST(ReferenceTiers, BlockingAndThreadsOnlyMoveResultsWithinBounds) {
  const Problem p = masked_head(DType::bf16, 11);
  const LossSpec s = all_options(Reduction::mean);
  ReferenceOptions base;
  base.tier = ReferenceTier::blas;
  const ReferenceResult ref = compute_reference(p, s, base);
  for (std::int64_t block : {1, 5, 37})
    for (std::int64_t panel : {7, 64, 509})
      for (int threads : {1, 2}) {
        ReferenceOptions o = base;
        o.block_rows = block;
        o.panel_rows = panel;
        o.threads = threads;
        expect_agree(ref, compute_reference(p, s, o),
                     "block " + std::to_string(block) + " panel " + std::to_string(panel) +
                         " threads " + std::to_string(threads));
      }
}

TEST(ReferenceTiers, BlasBoundsHoldAgainstTheOracle) {
  // Confident rows (p_t → 1: the true-class gradient cancels) and a large common bias offset.
  Problem p = make_gaussian_linear(6, 1200, 16, DType::bf16, 2.0, 2);
  Tensor b(DType::fp32, {1200}, "bias");
  for (std::int64_t j = 0; j < 1200; ++j) b.set(j, 1000.0);
  for (std::size_t i = 0; i < 6; ++i) b.set(p.targets[i], 1010.0 + 3.0 * static_cast<double>(i));
  p.bias = b;
  ReferenceOptions o;
  o.tier = ReferenceTier::blas;
  const ReferenceResult r = compute_reference(p, LossSpec{}, o);
  OracleSampleSpec os;
  os.rows = 6;
  const OracleReport rep = check_with_oracle(p, LossSpec{}, o, r, os);
  EXPECT_TRUE(rep.passed()) << rep.summary();
  EXPECT_GE(rep.checks.size(), 10u);
}

TEST(ReferenceTiers, RefusedOverTheBudgetBeforeAnyWork) {
  const Problem p = make_gaussian_linear(8, 4000, 64, DType::bf16, 4.0, 1);
  ReferenceOptions o;
  o.tier = ReferenceTier::blas;
  o.max_bytes = 1 << 20;  // dW alone is 4000·64·24 bytes
  o.threads = 2;          // the per-thread row buffers count too
  int calls = 0;
  o.progress = [&](std::int64_t, std::int64_t) { ++calls; };
  try {
    compute_reference(p, LossSpec{}, o);
    ADD_FAILURE() << "expected a refusal";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("needs "), std::string::npos) << m;
    EXPECT_NE(m.find(" bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("budget is 1048576 bytes"), std::string::npos) << m;
  }
  EXPECT_EQ(calls, 0);
  // The same problem fits once dW is sampled down.
  o.vocab_rows = sample_rows(p.V, 100, 3);
  EXPECT_NO_THROW(compute_reference(p, LossSpec{}, o));
}

// Scaling the upstream gradient by 2^-500 scales dz, its bounds and dH exactly; the bound of dH
// may not shrink faster (squares of the tiny dz bounds underflow: the bound must not lose the
// propagated term on that account).
TEST(ReferenceTiers, TinyUpstreamGradientKeepsItsBounds) {
  const Problem p = make_gaussian_linear(6, 300, 12, DType::bf16, 4.0, 13);
  LossSpec s;
  s.reduction = Reduction::none;
  ReferenceOptions o;
  o.tier = ReferenceTier::blas;
  o.upstream.assign(6, 1.0);
  const ReferenceResult one = compute_reference(p, s, o);
  const double scale = std::ldexp(1.0, -500);
  o.upstream.assign(6, scale);
  const ReferenceResult tiny = compute_reference(p, s, o);
  for (std::size_t k = 0; k < one.dH.size(); ++k) {
    ASSERT_EQ(tiny.dH[k], one.dH[k] * scale) << k;  // exact: a power-of-two scale
    EXPECT_GE(tiny.dH_bound[k], one.dH_bound[k] * scale) << k;
  }
  for (std::size_t k = 0; k < one.dW.size(); ++k)
    EXPECT_GE(tiny.dW_bound[k], one.dW_bound[k] * scale) << k;
}

// HostArray: a large resize (the huge-page path) and a small one read as zeros, and the values
// written are kept through a reallocation.
TEST(ReferenceTiers, HostArrayGrowsWithZeros) {
  HostArray<double> big;
  big.resize(std::size_t{3} << 20);  // 24 MiB
  std::size_t nonzero = 0;
  for (double x : big) nonzero += x != 0.0;
  EXPECT_EQ(nonzero, 0u);
  big[12345] = 2.5;
  big.resize(big.size() * 2);
  EXPECT_EQ(big[12345], 2.5);
  EXPECT_EQ(big.back(), 0.0);
  HostArray<double> small(100);
  for (double x : small) EXPECT_EQ(x, 0.0);
}

TEST(ReferenceTiers, TierNames) {
  for (ReferenceTier t : {ReferenceTier::automatic, ReferenceTier::compensated, ReferenceTier::blas,
                          ReferenceTier::cuda})
    EXPECT_EQ(parse_reference_tier(to_string(t)), t);
  EXPECT_THROW(parse_reference_tier("fast"), InputError);
  // A logits problem has no GEMM: every tier runs the compensated row arithmetic.
  const Problem lg = make_gaussian_logits(3, 50, DType::fp32, 2.0, 1);
  ReferenceOptions o;
  o.tier = ReferenceTier::blas;
  EXPECT_EQ(compute_reference(lg, LossSpec{}, o).tier, ReferenceTier::compensated);
}

}  // namespace xentlab
