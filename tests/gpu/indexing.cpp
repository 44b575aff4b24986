// 64-bit indexing of naive, chunked and vocab_chunked: N·V > 2^31 in one kernel launch and one
// GEMM (vocab_chunked: in one split, and in three).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "tests/gpu/gpu_fixture.hpp"

namespace xentlab::gpu_tests {
namespace {

// ---- 64-bit indexing: N·V > 2^31 in one kernel launch and one GEMM ----------------------------

TEST(GpuStrategies, IndexingPast2Pow31) {
  XL_REQUIRE_DEVICE();
  if (device().memory_gib < 24) GTEST_SKIP() << "needs about 20 GiB of device memory";
  // N·V = 17000·128256 ≈ 2.18e9 > 2^31; every token row identical, so every per-token output and
  // every dH row must equal row 0's bit for bit (a 32-bit index overflow would break that).
  const Problem p = identical_rows_past_2pow31();
  const std::int64_t N = p.N, D = p.D;
  const std::pair<const char*, std::int64_t> runs[] = {
      {"naive", 0}, {"chunked", 0}, {"vocab_chunked", 1}, {"vocab_chunked", 3}};
  for (const auto& [strategy, splits] : runs) {
    const std::string name =
        std::string(strategy) +
        (splits > 0 ? " in " + std::to_string(splits) + " vocabulary splits" : "");
    const auto s = find_strategy(Backend::cuda, strategy);
    ASSERT_NE(s, nullptr) << strategy;
    RunRequest req;
    req.problem = &p;
    req.recipe = parse_recipe("bf16/bf16/fp32/fp32");
    req.chunk_tokens = N;  // one chunk: N·V elements in one launch
    req.vocab_splits = splits;
    const StrategyOutputs o = s->run(req);
    ASSERT_EQ(o.loss.size(), static_cast<std::size_t>(N));
    ASSERT_TRUE(std::isfinite(o.loss[0]) && std::isfinite(o.lse[0])) << name;
    std::int64_t first_bad = -1;
    for (std::int64_t i = 0; i < N && first_bad < 0; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (std::memcmp(&o.loss[k], &o.loss[0], 8) != 0 ||
          std::memcmp(&o.lse[k], &o.lse[0], 8) != 0 ||
          std::memcmp(&o.dH[k * D], &o.dH[0], 8 * D) != 0)
        first_bad = i;
    }
    EXPECT_EQ(first_bad, -1) << name << ": token row " << first_bad << " differs from row 0";
    for (double v : o.dW) ASSERT_TRUE(std::isfinite(v)) << name << ": non-finite dW";
  }
}

}  // namespace
}  // namespace xentlab::gpu_tests
