// Repeat runs on the device: the registry's deterministic trait (every output bit for bit; loss
// and lse for a strategy without it). Fused's and chunked's repeat runs at scale are in
// tests/gpu/paths.cpp.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_fixture.hpp"

namespace xentlab::gpu_tests {
namespace {

/// The registry's deterministic trait, on the device: a strategy that declares it gives every
/// output bit for bit on a repeat run; one that does not (atomics in the gradients) still gives
/// loss and lse bit for bit. Every registered strategy declares it since fused's additions take
/// turns (the second branch is for a future strategy that does not; RepeatRunsAreBitIdentical
/// checks fused and chunked on several waves of tiles).
TEST(GpuStrategies, DeterministicStrategiesRepeatBitForBit) {
  XL_REQUIRE_DEVICE();
  const Problem pb = gaussian(256, 2000, 64, DType::bf16, 3.0, 5, true, true);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/fp32/fp32");
  req.chunk_tokens = 64;
  int deterministic = 0;
  for (const auto& s : make_strategies(Backend::cuda)) {
    if (!s->can_implement(pb, req.spec, req.recipe).ok()) continue;
    const StrategyOutputs a = s->run(req), b = s->run(req);
    if (strategy_traits(s->name()).deterministic) {
      ++deterministic;
      expect_same_outputs(a, b, s->name() + " repeat");
    } else {
      EXPECT_TRUE(same_bits(a.loss, b.loss)) << s->name() << " repeat loss";
      EXPECT_TRUE(same_bits(a.lse, b.lse)) << s->name() << " repeat lse";
    }
  }
  EXPECT_GT(deterministic, 0);
}

}  // namespace
}  // namespace xentlab::gpu_tests
