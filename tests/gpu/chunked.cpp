// The algebraic identities of the chunked strategies, bit for bit: chunked = checkpointed with the
// same chunks (the recomputed logits are identical), chunked with one chunk = naive, and reduction
// none with a unit upstream gradient = reduction sum.
#include <gtest/gtest.h>

#include <string>

#include "tests/gpu/gpu_fixture.hpp"

namespace xentlab::gpu_tests {
namespace {

// ---- algebraic identities: bit-for-bit equality ------------------------------------------------

TEST(GpuStrategies, ChunkedEqualsCheckpointedAndNaive) {
  XL_REQUIRE_DEVICE();
  const auto naive = find_strategy(Backend::cuda, "naive");
  const auto chunked = find_strategy(Backend::cuda, "chunked");
  const auto ckpt = find_strategy(Backend::cuda, "checkpointed");
  ASSERT_TRUE(naive && chunked && ckpt);
  LossSpec none;
  none.reduction = Reduction::none;
  none.label_smoothing = 0.05;
  none.z_loss = 1e-4;
  const Problem p = gaussian(100, 507, 123, DType::bf16, 4.0, 17, true, true);
  const Problem lp = make_gaussian_logits(50, 999, DType::bf16, 3.0, 19);
  for (const Problem* pb : {&p, &lp})
    for (const char* rn : {"bf16/fp32/fp32/bf16", "bf16/bf16/fp32/fp32", "bf16/bf16/bf16/bf16",
                           "bf16/fp16/fp16/fp16"}) {
      RunRequest req;
      req.problem = pb;
      req.spec = none;
      req.recipe = parse_recipe(rn);
      req.upstream = random_upstream(pb->N, 5);
      const std::string ctx = pb->describe() + " recipe " + std::string(rn);
      req.chunk_tokens = 16;
      expect_same_outputs(chunked->run(req), ckpt->run(req),
                          ctx + " chunked(16) vs checkpointed(16)");
      req.chunk_tokens = pb->N;
      expect_same_outputs(chunked->run(req), naive->run(req), ctx + " chunked(N) vs naive");
      // reduction none with unit upstream = reduction sum.
      RunRequest s = req;
      s.spec.reduction = Reduction::sum;
      s.upstream.clear();
      RunRequest n1 = req;
      n1.upstream.assign(static_cast<std::size_t>(pb->N), 1.0);
      StrategyOutputs a = naive->run(s), b = naive->run(n1);
      EXPECT_TRUE(same_bits(a.dH, b.dH)) << ctx << " none(1) vs sum dH";
      EXPECT_TRUE(same_bits(a.dz, b.dz)) << ctx << " none(1) vs sum dz";
      EXPECT_TRUE(same_bits(a.loss, b.loss)) << ctx << " none(1) vs sum loss";
    }
}

}  // namespace
}  // namespace xentlab::gpu_tests
