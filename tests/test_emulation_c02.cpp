// Case C02 of docs/cases.md at its full size on the emulated strategies (see
// test_emulation_cases.cpp for the method). Its own executable because it is the longest test of
// the suite: N·V = 2^28 logits through the certified reference and the emulation take 15–20 s on
// 2 cores; the fault it shows (an fp16 token sum past 65504) needs the full batch.
#include <gtest/gtest.h>

#include "emulation_case_support.hpp"

namespace xentlab {
namespace {

using namespace ::xentlab::testing;

// C02, full size (N = 8192, V = 32768, fp16 logits all 0): the token sum of one strategy per
// accumulation dtype (the token reduction is the same pairwise tree in every strategy); the mean
// of flat rows is covered by C11; gradients on sampled rows for every strategy and recipe.
TEST(EmuCaseC02, Fp16TokenReductionOverflowsOnlyInFp16) {
  const std::int64_t N = 8192, V = 32768;
  Tensor Z(DType::fp16, {N, V}, "logits");
  std::vector<std::int64_t> t(N);
  for (std::int64_t i = 0; i < N; ++i) t[static_cast<std::size_t>(i)] = (7 * i) % V;
  const Problem pb = Problem::from_logits(std::move(Z), t);
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
      XL_EXPECT_CASE(out.reduced_loss, b.reduced_loss + ref_sum.reduced_loss_bound,
                     "85173.9255472");
    } else {
      // Σ 8192·ln 32768 = 85173.9 > 65504: the fp16 token sum overflows (docs/arithmetic.md §6),
      // and the policy reports it as incorrect (non-finite where the reference is finite).
      EXPECT_EQ(out.reduced_loss, kInf);
      const ErrorStats st = compute_error_stats(&out.reduced_loss, &ref_sum.reduced_loss, 1,
                                                DType::fp16, &b.reduced_loss);
      EXPECT_EQ(judge({{"reduced_loss", &st, false}}, policy_by_name("default")).disposition,
                Disposition::incorrect);
    }
    // Per token ln 32768 in both recipes (fp16 loss: within u_fp16·|loss| of it).
    XL_EXPECT_CASE(out.loss[100], b.loss[100] + ref_sum.loss_bound[100], "10.3972077084");
  }
  // Mean gradient on sampled rows: off-target 3.7252903e-9 in the fp32-logits recipe, 0 (the
  // correctly rounded fp16 value, below the smallest fp16 subnormal) when dz is held in fp16.
  each_run(pb, spec_of(Reduction::mean),
           [&](const RunCtx& c) {
             for (std::int64_t q = 0; q < 3; ++q) {
               const std::int64_t tt =
                   t[static_cast<std::size_t>(c.out.token_rows[static_cast<std::size_t>(q)])];
               const std::int64_t off = (tt + 1) % V;
               EXPECT_TRUE(within(c, grad_of(c, q, off), grad_bound(c, q, off), "3.7252903e-9"))
                   << c.what;
               EXPECT_TRUE(within(c, grad_of(c, q, tt), grad_bound(c, q, tt), "-1.22066587e-4"))
                   << c.what;
               if (c.recipe.logits == DType::fp16) {
                 EXPECT_EQ(grad_of(c, q, off), 0.0) << c.what;
               }
             }
           },
           {R("fp16/fp32/fp32/fp32"), R("fp16/fp16/fp32/fp32")}, {0, 1, 8191});
}

}  // namespace
}  // namespace xentlab
