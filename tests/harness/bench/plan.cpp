// The chunk plans the bench runs (gpu/cuda/steps.cuh plan_chunks, plan_workspace): an explicit
// memory budget bounds a given chunk size, budget-sized chunks hold at most kMaxChunkLogits, the
// default budget bounds the chunk buffers. CUDA builds only; no device needed. Part of
// test_bench.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>

#include "gpu/registry.hpp"
#include "harness/bench/options.hpp"
#include "numerics/error.hpp"
#ifdef XENTLAB_HAVE_CUDA
#include "gpu/cuda/steps.cuh"
#endif
#include "tests/harness/bench/bench_support.hpp"

namespace xentlab::bench::bench_tests {
namespace {

#ifdef XENTLAB_HAVE_CUDA
TEST(BenchPlan, AnExplicitBudgetBoundsAGivenChunkSize) {
  // The preset's shape and chunk size (8192 tokens: about 2 GiB of bf16 chunk logits alone).
  const Recipe rc = parse_recipe("bf16/bf16/fp32/bf16");
  const gpu::WorkspaceQuery q{131072, 128256, 4096, DType::bf16, false, rc, true};
  const std::int64_t budget = std::int64_t{1} << 30;
  EXPECT_NO_THROW(gpu::plan_chunks(q, 0, 8192, "chunked"));
  try {
    gpu::plan_chunks(q, budget, 8192, "chunked");
    ADD_FAILURE() << "chunks of 8192 tokens accepted within 1 GiB";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("8192 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(budget)), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(gpu::plan_workspace(q, 8192).total())), std::string::npos) << m;
  }
  // Through the strategies: an explicit budget refuses, none keeps the chunk size.
  int checked = 0;
  for (const auto& s : make_strategies(Backend::cuda)) {
    const auto* cs = dynamic_cast<const gpu::CudaStrategy*>(s.get());
    if (cs == nullptr || !strategy_traits(cs->name()).chunks_tokens) continue;
    ++checked;
    EXPECT_THROW(cs->plan(q, budget, 8192), InputError) << cs->name();
    EXPECT_EQ(cs->plan(q, 0, 8192).rows, 8192) << cs->name();
    EXPECT_EQ(cs->plan(q, std::int64_t{8} << 30, 8192).rows, 8192) << cs->name();
  }
  // Every chunking strategy of the default set (the one the bench measures).
  EXPECT_EQ(checked, std::count_if(strategy_table().begin(), strategy_table().end(),
                                   [](const StrategyEntry& e) {
                                     return e.traits.chunks_tokens && e.traits.in_default_set;
                                   }));
}

TEST(BenchPlan, BudgetSizedChunksHoldAtMostKMaxChunkLogits) {
  const Recipe rc = parse_recipe("bf16/bf16/fp32/fp32");
  // The 128K preset: 4 GiB or 64 GiB of budget still give 8192-token chunks (2^30 / 128256 =
  // 8371, balanced over 16 chunks and rounded to 128).
  const gpu::WorkspaceQuery big{131072, 128256, 4096, DType::bf16, false, rc, true};
  for (std::int64_t gib : {4, 64}) {
    const gpu::WorkspacePlan p = gpu::plan_chunks(big, gib << 30, 0, "chunked");
    EXPECT_EQ(p.rows, 8192) << gib << " GiB";
    EXPECT_EQ(p.n_chunks, 16) << gib << " GiB";
    EXPECT_LE(p.rows * big.V, gpu::kMaxChunkLogits);
  }
  // Under the cap the whole batch is one chunk when it fits; a given chunk size is not capped.
  const gpu::WorkspaceQuery small_v{131072, 507, 64, DType::bf16, false, rc, true};
  EXPECT_EQ(gpu::plan_chunks(small_v, std::int64_t{4} << 30, 0, "chunked").rows, 131072);
  EXPECT_EQ(gpu::plan_chunks(big, 0, 16384, "chunked").rows, 16384);
  // Past the cap, one chunk still wins where several would not fit: with bf16 gradients several
  // chunks need a V·D fp32 dW accumulator (16 GiB here) that one chunk does not.
  const Recipe bf16_grads = parse_recipe("bf16/bf16/fp32/bf16");
  const gpu::WorkspaceQuery wide{2048, std::int64_t{1} << 20, 4096, DType::bf16, false, bf16_grads,
                                 true};
  const std::int64_t eight = std::int64_t{8} << 30;
  ASSERT_LE(gpu::plan_workspace(wide, 2048).total(), eight);
  EXPECT_GT(gpu::plan_workspace(wide, 1).total(), eight);
  EXPECT_EQ(gpu::plan_chunks(wide, eight, 0, "chunked").rows, 2048);
  // And where several fit but only in chunks smaller than the cap, one chunk as before the cap.
  const gpu::WorkspaceQuery mid{16384, 128256, 4096, DType::bf16, false, bf16_grads, true};
  const std::int64_t whole = gpu::plan_workspace(mid, 16384).total();
  const gpu::WorkspacePlan p = gpu::plan_chunks(mid, whole, 0, "chunked");
  EXPECT_EQ(p.rows, 16384) << "budget " << whole << " bytes";
}

TEST(BenchPlan, TheDefaultBudgetBoundsTheChunkBuffersNotTheAccumulators) {
  // The Llama-3-8B head with fp32 logits from bf16 inputs: W widened to fp32 (V·D·4 = 2.1 GB) is
  // needed whatever the chunk size, more than the 2 GiB default alone. The default sizes the
  // chunk buffers on top of it; an explicit budget still bounds everything.
  const std::int64_t V = 128256, D = 4096;
  for (const char* name : {"bf16/fp32/fp32/bf16", "bf16/fp32/fp32/fp32"}) {
    const gpu::WorkspaceQuery q{8192, V, D, DType::bf16, false, parse_recipe(name), true};
    const gpu::WorkspacePlan one = gpu::plan_workspace(q, 1), two = gpu::plan_workspace(q, 2);
    const std::int64_t per_row = two.total() - one.total(), fixed = one.total() - per_row;
    ASSERT_GE(fixed, V * D * 4) << name;
    // With 2 GiB for everything: refused (bf16 gradients: W in fp32 and the fp32 dW accumulator,
    // 4.2 GB) or chunks of a few dozen tokens (fp32 gradients accumulate in the output).
    try {
      EXPECT_LT(gpu::plan_chunks(q, gpu::kDefaultChunkBudget, 0, "chunked").rows, 128) << name;
    } catch (const InputError&) {
      EXPECT_GT(fixed, gpu::kDefaultChunkBudget) << name;
    }
    const gpu::WorkspacePlan p = gpu::plan_chunks(q, 0, 0, "chunked");
    EXPECT_GT(p.n_chunks, 1) << name;  // the fp32 logits of 8192 tokens alone are 4.2 GB
    EXPECT_GE(p.rows, 2048) << name;   // 2 GiB of chunk buffers: about 4000 tokens, balanced
    EXPECT_LE(p.total() - fixed, gpu::kDefaultChunkBudget) << name;
  }
  // The 128K preset with bf16 gradients: several chunks need the fp32 dW accumulator (2.1 GB);
  // inside a 2 GiB budget for everything that left room for 49-token chunks only.
  const gpu::WorkspaceQuery big{
      131072, V, D, DType::bf16, false, parse_recipe("bf16/bf16/fp32/bf16"), true};
  const gpu::WorkspacePlan p = gpu::plan_chunks(big, 0, 0, "chunked");
  EXPECT_EQ(p.rows, 8192);
  EXPECT_EQ(p.dW_acc, V * D * 4);
  // Where nothing is fixed the default plan is the one a 2 GiB budget gives.
  const gpu::WorkspaceQuery plain{
      131072, V, D, DType::bf16, false, parse_recipe("bf16/bf16/fp32/fp32"), true};
  EXPECT_EQ(gpu::plan_chunks(plain, 0, 0, "chunked").rows,
            gpu::plan_chunks(plain, gpu::kDefaultChunkBudget, 0, "chunked").rows);
}
#endif

}  // namespace
}  // namespace xentlab::bench::bench_tests
