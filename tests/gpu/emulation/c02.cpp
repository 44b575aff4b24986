// Case C02 of docs/cases.md on the emulated strategies (see tests/gpu/emulation/cases.cpp for the
// method). The fault it shows (an fp16 token sum past 65504) needs a whole batch: built twice,
// test_emulation_c02 checks the case at a quarter of its logits (tests/support/c02_case.hpp: the
// same faults, N·V = 2^26), test_emulation_c02_full (XL_C02_FULL_SIZE, labelled slow) at its own
// size, N·V = 2^28 logits through the certified reference and the emulation.
#include <gtest/gtest.h>

#include "tests/support/c02_case.hpp"
#include "tests/support/emulation_case_support.hpp"

namespace xentlab {
namespace {

using namespace ::xentlab::testing;

// The token sum of one strategy per accumulation dtype (the token reduction is the same pairwise
// tree in every strategy); the mean of flat rows is covered by C11; gradients on sampled rows for
// every strategy and recipe.
void check_emulation(const C02Size& c) {
  const std::int64_t N = c.N, V = c.V;
  const Problem pb = c02_problem(c);
  const auto strategies = make_strategies(Backend::cpu_emulation);
  ReferenceOptions no_grad;
  const ReferenceResult ref_sum = compute_reference(pb, spec_of(Reduction::sum), no_grad);
  for (const char* rc : {"fp16/fp16/fp32/fp16", "fp16/fp16/fp16/fp16"}) {
    RunRequest req;
    req.problem = &pb;
    req.recipe = R(rc);
    req.want_grads = false;
    req.spec = spec_of(Reduction::sum);
    const StrategyOutputs out = strategies[0]->run(req);
    const Bounds b = bounds_for_reference(pb, req.spec, req.recipe,
                                          strategies[0]->arithmetic(req.recipe), ref_sum);
    if (req.recipe.accum == DType::fp32) {
      XL_EXPECT_CASE(out.reduced_loss, b.reduced_loss + ref_sum.reduced_loss_bound, c.sum);
    } else {
      // Σ N·ln V > 65504: the fp16 token sum overflows (docs/arithmetic.md §6), and the policy
      // reports it as incorrect (non-finite where the reference is finite).
      EXPECT_EQ(out.reduced_loss, kInf);
      const ErrorStats st = compute_error_stats(&out.reduced_loss, &ref_sum.reduced_loss, 1,
                                                DType::fp16, &b.reduced_loss);
      EXPECT_EQ(judge({{"reduced_loss", &st, false}}, policy_by_name("default")).disposition,
                Disposition::incorrect);
    }
    // Per token ln V in both recipes (fp16 loss: within u_fp16·|loss| of it).
    XL_EXPECT_CASE(out.loss[100], b.loss[100] + ref_sum.loss_bound[100], c.row_loss);
  }
  // Mean gradient on sampled rows: off-target 1/(N·V) in the fp32-logits recipe, 0 (the correctly
  // rounded fp16 value, below half the smallest fp16 subnormal) when dz is held in fp16.
  each_run(
      pb, spec_of(Reduction::mean),
      [&](const RunCtx& r) {
        for (std::int64_t q = 0; q < 3; ++q) {
          const std::int64_t tt =
              pb.targets[static_cast<std::size_t>(r.out.token_rows[static_cast<std::size_t>(q)])];
          const std::int64_t off = (tt + 1) % V;
          EXPECT_TRUE(within(r, grad_of(r, q, off), grad_bound(r, q, off), c.off_target)) << r.what;
          EXPECT_TRUE(within(r, grad_of(r, q, tt), grad_bound(r, q, tt), c.target)) << r.what;
          if (r.recipe.logits == DType::fp16) {
            EXPECT_EQ(grad_of(r, q, off), 0.0) << r.what;
          }
        }
      },
      {R("fp16/fp32/fp32/fp32"), R("fp16/fp16/fp32/fp32")}, {0, 1, N - 1});
}

#ifdef XL_C02_FULL_SIZE
TEST(EmuCaseC02, Fp16TokenReductionOverflowsOnlyInFp16) {
  check_emulation(kC02Case);
}
#else
TEST(EmuCaseC02, Fp16TokenReductionOverflowsOnlyInFp16QuarterSize) {
  check_emulation(kC02Quarter);
}
#endif

}  // namespace
}  // namespace xentlab
