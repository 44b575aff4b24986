// The vocab_chunked strategy on the device (gpu/cuda/vocab_chunked.cu): P vocabulary splits (1, 3,
// 7 over a vocabulary no P > 1 divides) in every recipe of the grid and every loss option, within
// the a-priori bound of its declaration and against its CPU emulation twin; one split equal to
// naive bit for bit where both take the same operations; dH's cross-split additions from the
// last split to the first, worked by hand; repeat runs bit for bit; a logits
// problem and splits past the vocabulary refused naming the cause; weight indexing past 2^31
// elements (token indexing: tests/gpu/indexing.cpp). Its emulation is
// tests/gpu/emulation/vocab_chunked.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu/plans/vocab_shards.hpp"
#include "tests/gpu/gpu_fixture.hpp"
#include "tests/support/vocab_split_support.hpp"

namespace xentlab::gpu_tests {
namespace {

constexpr const char* kName = "vocab_chunked";

std::unique_ptr<Strategy> vocab_chunked() {
  auto s = find_strategy(Backend::cuda, kName);
  if (s == nullptr) ADD_FAILURE() << "no CUDA " << kName << " in the registry";
  return s;
}

// V = 1001 = 3·333 + 2 = 7·143: uneven splits for P = 3, even for 7; a bias and ignored rows.
TEST(GpuVocabChunked, EveryRecipeWithinBoundAndAgreesWithItsTwin) {
  XL_REQUIRE_DEVICE();
  const auto s = vocab_chunked();
  ASSERT_NE(s, nullptr);
  for (const DType input : {DType::bf16, DType::fp32}) {
    const Case c{std::string("gaussian ") + std::string(to_string(input)),
                 gaussian(96, 1001, 64, input, 3.0, 17, true, true),
                 LossSpec{},
                 {}};
    const ReferenceResult ref = reference_for(c);
    for (const Recipe& r : grid_for(input))
      for (const std::int64_t P : {1, 3, 7}) {
        SCOPED_TRACE(r.name() + " splits " + std::to_string(P));
        check_run(c, ref, *s, r, c.pb.N, 0, nullptr, P);
      }
  }
}

TEST(GpuVocabChunked, EveryLossOptionWithinBoundAndAgreesWithItsTwin) {
  XL_REQUIRE_DEVICE();
  const auto s = vocab_chunked();
  ASSERT_NE(s, nullptr);
  int k = 0;
  for (const LossSpec& sp : loss_option_specs()) {
    ++k;
    const Case c{
        "options " + sp.describe(),
        ignoring_as(gaussian(61, 777, 48, DType::bf16, 3.0, 40 + k, true, true), sp), sp,
        sp.reduction == Reduction::none ? random_upstream(61, 99 + k) : std::vector<double>{}};
    const ReferenceResult ref = reference_for(c);
    for (const char* r : {"bf16/bf16/fp32/fp32", "bf16/fp32/fp32/bf16"})
      check_run(c, ref, *s, parse_recipe(r), c.pb.N, 0, nullptr, 4);
  }
}

// One split: the forward's kernels and the dW GEMM are naive's operations (the shard kernels
// over one shard are launch_ce_rows' bit for bit), so loss, lse, dW and db are naive's bits; dH
// too where the grad dtype is fp32 (naive may write a 16-bit dH from its GEMM directly).
TEST(GpuVocabChunked, OneSplitIsNaiveBitForBit) {
  XL_REQUIRE_DEVICE();
  const auto s = vocab_chunked();
  const auto naive = find_strategy(Backend::cuda, "naive");
  ASSERT_TRUE(s && naive);
  const Problem pb = gaussian(200, 3000, 64, DType::bf16, 3.0, 9, true, true);
  for (const char* rc : {"bf16/bf16/fp32/fp32", "bf16/fp32/fp32/bf16", "bf16/bf16/bf16/bf16"}) {
    RunRequest req;
    req.problem = &pb;
    req.recipe = parse_recipe(rc);
    req.vocab_splits = 1;
    const StrategyOutputs a = s->run(req), b = naive->run(req);
    EXPECT_TRUE(same_bits(a.loss, b.loss)) << rc;
    EXPECT_TRUE(same_bits(a.lse, b.lse)) << rc;
    EXPECT_TRUE(same_bits(a.dW, b.dW)) << rc;
    EXPECT_TRUE(same_bits(a.db, b.db)) << rc;
    if (req.recipe.grad == DType::fp32) {
      EXPECT_TRUE(same_bits(a.dH, b.dH)) << rc;
    }
  }
}

// A bias of −∞ over the last of 4 splits (padded vocabulary rows) under label smoothing: that
// split's Σx is −∞, so every valid row's loss is +∞, as its emulation twin's and the reference's
// (the device once summed a split whose own maximum is −∞ to Σx = 0: a finite loss).
TEST(GpuVocabChunked, AMaskedSplitUnderLabelSmoothingGivesTheTwinsInfiniteLoss) {
  XL_REQUIRE_DEVICE();
  const auto s = vocab_chunked();
  const auto twin = emulated_twin(kName);
  ASSERT_TRUE(s && twin);
  const Problem g = gaussian(8, 64, 16, DType::fp32, 3.0, 5, false, false);
  Tensor b(DType::fp32, {64}, "bias");
  for (std::int64_t j = 0; j < 64; ++j)
    b.set(j, j < 48 ? 0.0 : -std::numeric_limits<double>::infinity());
  std::vector<std::int64_t> t(8);
  for (std::int64_t i = 0; i < 8; ++i) t[static_cast<std::size_t>(i)] = (5 * i) % 48;
  t[3] = -100;
  const Problem pb = Problem::linear(g.H, g.W, b, t);
  RunRequest req;
  req.problem = &pb;
  req.spec.label_smoothing = 0.1;
  req.recipe = parse_recipe("fp32/fp32/fp32/fp32");
  req.vocab_splits = 4;
  const StrategyOutputs a = s->run(req), e = twin->run(req);
  for (std::int64_t i = 0; i < 8; ++i) {
    const auto q = static_cast<std::size_t>(i);
    EXPECT_EQ(a.loss[q], i == 3 ? 0.0 : std::numeric_limits<double>::infinity()) << i;
    EXPECT_TRUE(same_bits({a.loss[q]}, {e.loss[q]})) << i;
  }
}

// The backward takes the splits from the last to the first (the last one's logits kept from the
// forward, the others recomputed), so dH adds the splits' fp32 partials in that order: the head
// of testing::dH_order_problem, whose two orders give different sums, worked by hand; its twin
// the same bits.
TEST(GpuVocabChunked, DHAddsTheSplitsFromTheLastToTheFirst) {
  XL_REQUIRE_DEVICE();
  const auto s = vocab_chunked();
  const auto twin = emulated_twin(kName);
  ASSERT_TRUE(s && twin);
  ASSERT_NE(testing::dH_order_sum(true), testing::dH_order_sum(false));
  const Problem pb = testing::dH_order_problem();
  RunRequest req;
  req.problem = &pb;
  req.spec = testing::dH_order_spec();
  req.recipe = parse_recipe("fp32/fp32/fp32/fp32");
  req.vocab_splits = 4;
  const StrategyOutputs a = s->run(req), e = twin->run(req);
  ASSERT_EQ(a.dH.size(), 2u);
  EXPECT_EQ(a.dH[0], 175.0);
  EXPECT_EQ(a.dH[1], static_cast<double>(testing::dH_order_sum(true)));
  EXPECT_TRUE(same_bits(a.dH, e.dH));
  EXPECT_TRUE(same_bits(a.lse, e.lse));
  EXPECT_TRUE(same_bits(a.dW, e.dW));
}

// No atomics: a repeat run gives every output bit for bit, with several splits.
TEST(GpuVocabChunked, RepeatRunsAreBitIdentical) {
  XL_REQUIRE_DEVICE();
  const auto s = vocab_chunked();
  ASSERT_NE(s, nullptr);
  const Problem pb = gaussian(512, 5003, 128, DType::bf16, 3.0, 3, true, true);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/fp32/bf16");
  req.vocab_splits = 5;
  expect_same_outputs(s->run(req), s->run(req), "vocab_chunked repeat");
}

// V·D > 2^31: W and dW of the last split start past 2^31 elements (the splits' offsets in
// 64 bits). Every W row identical and every target the last row, so the loss is log V up to
// the rounding of the lse (4u of its terms), and within a split every dW row but the target's
// equals the split's first row bit for bit (one GEMM, the same operands per row).
TEST(GpuVocabChunked, WeightsPast2Pow31) {
  XL_REQUIRE_DEVICE();
  if (device().memory_gib < 40) GTEST_SKIP() << "needs about 15 GiB of device memory";
  const auto s = vocab_chunked();
  ASSERT_NE(s, nullptr);
  const std::int64_t D = kWideD, V = kWideV, N = 128, P = 2;
  ASSERT_GT(V * D, std::int64_t{1} << 31);
  const Problem p = identical_weights_past_2pow31(N);
  RunRequest req;
  req.problem = &p;
  req.recipe = parse_recipe("bf16/bf16/fp32/fp32");
  req.vocab_splits = P;
  const StrategyOutputs o = s->run(req);
  ASSERT_EQ(o.dW.size(), static_cast<std::size_t>(V * D));
  expect_loss_is_log_V(o, N, V);
  for (const VocabShard& sh : vocab_shards(V, P)) {
    const auto row = [&](std::int64_t j) { return &o.dW[static_cast<std::size_t>(j * D)]; };
    std::int64_t first_bad = -1;
    for (std::int64_t j = sh.begin + 1; j < sh.end && first_bad < 0; ++j)
      if (j != V - 1 && std::memcmp(row(j), row(sh.begin), 8 * D) != 0) first_bad = j;
    EXPECT_EQ(first_bad, -1) << "dW row " << first_bad << " (offset " << first_bad * D
                             << ") differs from its split's first row " << sh.begin;
  }
  for (std::int64_t d = 0; d < D; ++d)
    ASSERT_TRUE(std::isfinite(o.dW[static_cast<std::size_t>((V - 1) * D + d)]))
        << "target dW row, column " << d;
}

// A logits problem is not_supported (nothing to recompute), naming why; splits past the
// vocabulary are an InputError naming both numbers. No work is done.
TEST(GpuVocabChunked, RefusalsNameTheCause) {
  XL_REQUIRE_DEVICE();
  const auto s = vocab_chunked();
  ASSERT_NE(s, nullptr);
  const Problem logits = make_gaussian_logits(4, 64, DType::fp32, 1.0, 3);
  const Status st = s->can_implement(logits, LossSpec{}, parse_recipe("fp32/fp32/fp32/fp32"));
  EXPECT_EQ(st.code, Status::Code::not_supported);
  EXPECT_NE(st.message.find("logits are given"), std::string::npos) << st.message;
  const Problem pb = gaussian(8, 5, 16, DType::fp32, 1.0, 3, false, false);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("fp32/fp32/fp32/fp32");
  req.vocab_splits = 6;
  try {
    (void)s->run(req);
    ADD_FAILURE() << "6 splits of 5 vocabulary rows accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("splits (6) exceed the vocabulary (5 rows)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace xentlab::gpu_tests
