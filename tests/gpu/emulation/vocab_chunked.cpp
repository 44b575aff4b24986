// The vocab_chunked strategy's CPU emulation (gpu/emulation/vocab_chunked.cpp): the vocabulary in
// P splits on one device, each split's sum-exp with its own maximum and rescaled once to the
// global one (DeclaredArithmetic::rescaled_ranks). Its number of splits from the slab budget
// (vocab_chunk_splits); P = 1 naive bit for bit; P splits within the a-priori bound of the
// declaration for every loss option and several recipes; the rescaled merge worked by hand on
// one row; dH's cross-split additions from the last split to the first, worked by hand on one
// row; a sampled run keeps the splits of the whole problem; the declared bound charges the
// rescale and the cross-split additions; splits past the vocabulary refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "datasets/synthetic.hpp"
#include "gpu/plans/vocab_shards.hpp"
#include "gpu/registry.hpp"
#include "judge/bounds_for.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"
#include "tests/support/case_support.hpp"
#include "tests/support/vocab_split_support.hpp"

namespace xentlab {
namespace {

using testing::same_bits;

constexpr const char* kName = "vocab_chunked";
constexpr double kInf = std::numeric_limits<double>::infinity();

std::unique_ptr<Strategy> vocab_chunked() {
  auto s = make_strategy(Backend::cpu_emulation, kName);
  if (s == nullptr) ADD_FAILURE() << "no emulated " << kName << " in the registry";
  return s;
}

// The fewest splits whose slab N·⌈V/P⌉·bytes fits the budget, worked by hand.
TEST(VocabChunkSplits, TheFewestSplitsWhoseSlabFitsTheBudget) {
  // The Llama-3-8B head at 128K tokens in bf16 with the default 1 GiB: 2^30 / (2^17 · 2) = 4096
  // columns a split, ⌈128256 / 4096⌉ = 32 splits (of 4008 columns: a slab of 1.0 GB).
  EXPECT_EQ(vocab_chunk_splits(131072, 128256, 2, 0, 0), 32);
  EXPECT_EQ(vocab_chunk_splits(131072, 128256, 2, kDefaultVocabSlabBudget, 0), 32);
  // 8K tokens: 65536 columns, 2 splits; fp32 logits: 32768 columns, 4 splits.
  EXPECT_EQ(vocab_chunk_splits(8192, 128256, 2, 0, 0), 2);
  EXPECT_EQ(vocab_chunk_splits(8192, 128256, 4, 0, 0), 4);
  // Small problems take one split.
  EXPECT_EQ(vocab_chunk_splits(64, 32000, 4, 0, 0), 1);
  // A budget of exactly 10 columns of 100 tokens of 2 bytes: ⌈95/10⌉ = 10 splits, the largest
  // ⌈95/10⌉ = 10 columns; one byte less holds 9 columns: 11 splits (⌈95/11⌉ = 9).
  EXPECT_EQ(vocab_chunk_splits(100, 95, 2, 2000, 0), 10);
  EXPECT_EQ(vocab_chunk_splits(100, 95, 2, 1999, 0), 11);
  for (const std::int64_t b : {std::int64_t{1999}, std::int64_t{2000}, std::int64_t{12345}}) {
    const std::int64_t P = vocab_chunk_splits(100, 95, 2, b, 0);
    EXPECT_LE(100 * ((95 + P - 1) / P) * 2, b) << b;  // the slab fits
    if (P > 1) {
      EXPECT_GT(100 * ((95 + P - 2) / (P - 1)) * 2, b) << b;  // one fewer does not
    }
  }
  // Given splits are taken as they are, up to V; no work (N or V of 0) is one split.
  EXPECT_EQ(vocab_chunk_splits(100, 95, 2, 1, 7), 7);
  EXPECT_EQ(vocab_chunk_splits(0, 95, 2, 0, 0), 1);
  EXPECT_EQ(vocab_chunk_splits(100, 0, 2, 0, 0), 1);
  try {
    (void)vocab_chunk_splits(100, 95, 2, 0, 96);
    ADD_FAILURE() << "96 splits of 95 rows accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("splits (96) exceed the vocabulary (95 rows)"),
              std::string::npos)
        << e.what();
  }
  // One column of 2^20 tokens in fp32 is 4 MiB: a budget of 1 MiB cannot hold it.
  try {
    (void)vocab_chunk_splits(std::int64_t{1} << 20, 1000, 4, std::int64_t{1} << 20, 0);
    ADD_FAILURE() << "a budget below one column accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("4194304 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("memory budget of 1048576 bytes"), std::string::npos) << m;
  }
}

using testing::SplitVariant;

// One run with P splits against the reference, within the bound of its declaration
// (tests/support/vocab_split_support.hpp).
void expect_within_bound(const Problem& p, const SplitVariant& var, const ReferenceResult& ref,
                         const std::vector<double>& upstream, const Recipe& rc, int P,
                         const std::string& what) {
  const auto s = vocab_chunked();
  ASSERT_NE(s, nullptr);
  RunRequest req;
  req.problem = &p;
  req.spec = var.spec;
  req.recipe = rc;
  req.upstream = upstream;
  req.vocab_splits = P;
  const StrategyOutputs out = s->run(req);
  const DeclaredArithmetic ar = s->run_arithmetic(req);
  ASSERT_EQ(ar.vocab_ranks, P) << what;
  ASSERT_EQ(ar.rescaled_ranks, P > 1) << what;
  testing::expect_within_declared_bound(p, var.spec, rc, ar, out, ref, 1, what);
}

// Every loss option × P ∈ {1, 2, 3, 8} × four recipes (fp32, bf16 and fp16 accumulation).
void check_all_options(const Problem& pb, const char* label) {
  std::vector<Recipe> recipes;
  for (const char* r :
       {"bf16/fp32/fp32/bf16", "bf16/bf16/fp32/fp32", "bf16/bf16/bf16/bf16", "bf16/fp32/fp16/fp32"})
    recipes.push_back(parse_recipe(r));
  testing::for_every_loss_option(pb, recipes, {1, 2, 3, 8}, label, expect_within_bound);
}

// V = 317: uneven splits for P = 2, 3 and 8.
TEST(VocabChunked, LinearEveryOptionWithinBoundForEverySplitCount) {
  check_all_options(make_gaussian_linear(8, 317, 11, DType::bf16, 3.0, 11), "linear bf16");
}

TEST(VocabChunked, GivenLogitsEveryOptionWithinBoundForEverySplitCount) {
  check_all_options(make_gaussian_logits(6, 403, DType::bf16, 4.0, 13), "logits bf16");
}

// With one split every step is naive's: all outputs bit for bit, on a linear head with a bias and
// an ignored row (dH, dW, db) and on given logits (dz); one split from vocab_splits = 1 and from
// the default budget alike.
TEST(VocabChunked, OneSplitIsNaiveBitForBit) {
  Problem lin = make_gaussian_linear(11, 300, 13, DType::bf16, 3.0, 5);
  Tensor b(DType::bf16, {300}, "bias");
  for (std::int64_t j = 0; j < 300; ++j) b.set(j, 0.125 * static_cast<double>((j % 11) - 5));
  lin = Problem::linear(lin.H, lin.W, b, lin.targets);
  lin.targets[4] = -100;
  const Problem logits = make_gaussian_logits(7, 611, DType::fp16, 4.0, 9);
  const auto vc = vocab_chunked();
  const auto naive = make_strategy(Backend::cpu_emulation, "naive");
  ASSERT_TRUE(vc && naive);
  LossSpec smooth;
  smooth.label_smoothing = 0.1;
  smooth.z_loss = 1e-3;
  smooth.softcap = 10.0;
  for (const Problem* pb : {static_cast<const Problem*>(&lin), &logits})
    for (const LossSpec& spec : {LossSpec{}, smooth})
      for (const char* acc : {"fp32", "bf16"}) {
        const std::string in(to_string(pb->input_dtype()));
        RunRequest req;
        req.problem = pb;
        req.spec = spec;
        req.recipe = parse_recipe(in + "/" + in + "/" + acc + "/" + in);
        const StrategyOutputs n = naive->run(req);
        for (const std::int64_t splits : {0, 1}) {  // 0: from the default budget, one split here
          req.vocab_splits = splits;
          const StrategyOutputs o = vc->run(req);
          const std::string what =
              req.recipe.name() + " " + spec.describe() + " splits " + std::to_string(splits);
          EXPECT_EQ(vc->run_arithmetic(req).vocab_ranks, 1) << what;
          EXPECT_FALSE(vc->run_arithmetic(req).rescaled_ranks) << what;
          testing::expect_same_outputs(o, n, what);
        }
      }
}

// The rescaled merge on one row, worked from the declaration with a bf16 accumulator: logits
// (0, −0.5 | 1, −0.25), two splits of two. Split 0 with its own maximum 0: s_0 = rnd(1 +
// rnd(e^−0.5)); split 1 with its maximum 1 (the global one): s_1 = rnd(1 + rnd(e^−1.25)); then
// s = rnd(rnd(s_0·e^(0−1)) + s_1) and lse = rnd(1 + log s). The two-pass order (every term with
// the global maximum, vocab_parallel's plain order) rounds other terms: its lse here differs.
TEST(VocabChunked, SplitsStatesAreRescaledToTheGlobalMaximum) {
  const Problem pb = testing::logits_problem(DType::fp32, {{0.0, -0.5, 1.0, -0.25}}, {0});
  const auto bf = [](float x) { return static_cast<float>(round_to(x, DType::bf16)); };
  const float s0 = bf(1.0f + bf(std::exp(-0.5f)));
  const float s1 = bf(1.0f + bf(std::exp(-1.25f)));
  const float s = bf(bf(s0 * std::exp(-1.0f)) + s1);
  const float lse = bf(1.0f + std::log(s));
  // The two-pass order: each split's sum with the global maximum 1, the two added in split order,
  // then the same lse formula.
  const float t =
      bf(bf(bf(std::exp(-1.0f)) + bf(std::exp(-1.5f))) + bf(1.0f + bf(std::exp(-1.25f))));
  const float lse_two_pass = bf(1.0f + std::log(t));
  ASSERT_NE(lse, lse_two_pass) << "the row does not tell the orders apart";
  const auto vc = vocab_chunked();
  ASSERT_NE(vc, nullptr);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("fp32/fp32/bf16/fp32");
  req.vocab_splits = 2;
  const StrategyOutputs o = vc->run(req);
  EXPECT_EQ(o.lse[0], static_cast<double>(lse));
  EXPECT_EQ(o.loss[0], static_cast<double>(bf(lse - 0.0f)));
  // vocab_parallel's two ranks sum with the global maximum.
  const auto vp = make_strategy(Backend::cpu_emulation, "vocab_parallel");
  ASSERT_NE(vp, nullptr);
  req.ranks = 2;
  req.local_strategy = "naive";
  EXPECT_EQ(vp->run(req).lse[0], static_cast<double>(lse_two_pass));
}

// dH adds the splits' fp32 partials from the last split to the first (the CUDA strategy's
// backward takes the last split first, its logits still in memory): the head of
// testing::dH_order_problem, whose two orders give different sums, worked by hand.
TEST(VocabChunked, DHAddsTheSplitsFromTheLastToTheFirst) {
  const Problem pb = testing::dH_order_problem();
  ASSERT_NE(testing::dH_order_sum(true), testing::dH_order_sum(false))
      << "the head does not tell the orders apart";
  const auto vc = vocab_chunked();
  ASSERT_NE(vc, nullptr);
  RunRequest req;
  req.problem = &pb;
  req.spec = testing::dH_order_spec();
  req.recipe = parse_recipe("fp32/fp32/fp32/fp32");
  req.vocab_splits = 4;
  const StrategyOutputs o = vc->run(req);
  ASSERT_EQ(o.dH.size(), 2u);
  EXPECT_EQ(o.dH[0], 175.0);
  EXPECT_EQ(o.dH[1], static_cast<double>(testing::dH_order_sum(true)));
  // vocab_parallel adds its ranks' partials in rank order.
  const auto vp = make_strategy(Backend::cpu_emulation, "vocab_parallel");
  ASSERT_NE(vp, nullptr);
  req.ranks = 4;
  req.local_strategy = "naive";
  EXPECT_EQ(vp->run(req).dH[1], static_cast<double>(testing::dH_order_sum(false)));
}

// A split whose logits are all −Inf (masked) has the maximum −Inf and adds 0; a row whose global
// maximum lies in the other split keeps that split's sum unscaled. Against the reference within
// the bound, and finite.
TEST(VocabChunked, AMaskedSplitAddsNothing) {
  const Problem pb = testing::logits_problem(
      DType::fp32, {{1, 12, -4, 2, -kInf, -kInf, -kInf, -kInf}, {3, 0, 1, 2, 5, -1, 0, 4}}, {1, 6});
  ReferenceOptions ro;
  ro.want_dz = true;
  const ReferenceResult ref = compute_reference(pb, LossSpec{}, ro);
  for (const char* r : {"fp32/fp32/fp32/fp32", "fp32/fp32/bf16/fp32"})
    expect_within_bound(pb, SplitVariant{"masked", LossSpec{}}, ref, {}, parse_recipe(r), 2,
                        std::string("masked ") + r);
}

// Under label smoothing a split of −∞ logits still adds its Σx, −∞: the loss of the row is +∞, as
// the reference's (ε/V·Σ_j z_j over a masked entry) and naive's; the other row is finite. The
// CUDA strategy must give the same (tests/gpu/vocab_chunked.cpp).
TEST(VocabChunked, AMaskedSplitUnderLabelSmoothingGivesAnInfiniteLoss) {
  const Problem pb = testing::logits_problem(
      DType::fp32, {{1, 12, -4, 2, -kInf, -kInf, -kInf, -kInf}, {3, 0, 1, 2, 5, -1, 0, 4}}, {1, 6});
  LossSpec smooth;
  smooth.label_smoothing = 0.1;
  const ReferenceResult ref = compute_reference(pb, smooth, ReferenceOptions{});
  ASSERT_EQ(ref.loss[0], kInf);
  ASSERT_TRUE(std::isfinite(ref.loss[1]));
  const auto vc = vocab_chunked();
  ASSERT_NE(vc, nullptr);
  for (const int P : {1, 2}) {
    RunRequest req;
    req.problem = &pb;
    req.spec = smooth;
    req.recipe = parse_recipe("fp32/fp32/fp32/fp32");
    req.vocab_splits = P;
    const StrategyOutputs out = vc->run(req);
    EXPECT_EQ(out.loss[0], kInf) << "P = " << P;
    EXPECT_TRUE(std::isfinite(out.loss[1])) << "P = " << P;
  }
}

// The number of splits is the whole problem's: a run of some token rows gives those rows' values
// of the run of all rows, bit for bit, with the splits from the budget (N = 40 tokens of fp32
// logits, a budget of 40·64·4 bytes: 64 columns a split, ⌈300/64⌉ = 5 splits).
TEST(VocabChunked, ASampledRunKeepsTheSplitsOfTheWholeProblem) {
  const Problem pb = make_gaussian_linear(40, 300, 9, DType::fp32, 3.0, 21);
  const auto vc = vocab_chunked();
  ASSERT_NE(vc, nullptr);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("fp32/fp32/bf16/fp32");
  req.memory_budget = 40 * 64 * 4;
  EXPECT_EQ(vc->run_arithmetic(req).vocab_ranks, 5);
  const StrategyOutputs all = vc->run(req);
  req.token_rows = {3, 17, 39};
  EXPECT_EQ(vc->run_arithmetic(req).vocab_ranks, 5);
  const StrategyOutputs some = vc->run(req);
  ASSERT_EQ(some.lse.size(), 3u);
  for (std::size_t q = 0; q < 3; ++q) {
    const auto i = static_cast<std::size_t>(req.token_rows[q]);
    EXPECT_TRUE(same_bits({some.lse[q]}, {all.lse[i]})) << i;
    EXPECT_TRUE(same_bits({some.loss[q]}, {all.loss[i]})) << i;
    for (std::int64_t d = 0; d < pb.D; ++d)
      EXPECT_TRUE(same_bits({some.dH[q * static_cast<std::size_t>(pb.D) + d]},
                            {all.dH[i * static_cast<std::size_t>(pb.D) + d]}))
          << i << " " << d;
  }
}

// The declared bound: P splits of the blocked order over ⌈V/P⌉, each state rescaled once (+1),
// P − 1 cross-split additions (docs/bounds.md, "Vocabulary-parallel sums"); one rescaling merge on
// a term's path. Constants worked by hand as test_vocab_parallel's: V = 128256, P = 2: shards of
// 64128, 8016 groups, 32 per thread → 255 + 8, + 1 (the rescale) + 1 (P − 1) = 265; P = 32: shards
// of 4008, 501 groups, 2 per thread → 15 + 8 + 1 + 31 = 55; dH ⌈V/P⌉ + P − 1.
TEST(VocabChunked, TheDeclaredBoundChargesTheRescaleAndTheCrossSplitAdditions) {
  const auto vc = vocab_chunked();
  ASSERT_NE(vc, nullptr);
  const Problem pb = make_gaussian_logits(2, 128256, DType::bf16, 1.0, 1);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/fp32/bf16");
  const std::vector<std::pair<int, double>> c_vocab{{1, 511}, {2, 265}, {32, 55}};
  const std::vector<std::pair<int, double>> c_dH{{1, 128256}, {2, 64128 + 1}, {32, 4008 + 31}};
  for (std::size_t k = 0; k < c_vocab.size(); ++k) {
    req.vocab_splits = c_vocab[k].first;
    const DeclaredArithmetic a = vc->run_arithmetic(req);
    EXPECT_EQ(a.vocab_order, ReductionOrder::blocked);
    EXPECT_EQ(vocab_reduction_constant(a, 128256), c_vocab[k].second) << req.vocab_splits;
    EXPECT_EQ(dH_vocab_constant(a, 128256), c_dH[k].second) << req.vocab_splits;
    EXPECT_EQ(vocab_online_rescales(a, 128256), req.vocab_splits > 1 ? 1.0 : 0.0);
  }
}

// Splits past the vocabulary are refused naming both numbers and the strategy, before any work;
// P = V (one column a split) runs.
TEST(VocabChunked, MoreSplitsThanVocabularyRowsAreRefused) {
  const Problem pb = make_gaussian_logits(3, 5, DType::fp32, 2.0, 3);
  const auto vc = vocab_chunked();
  ASSERT_NE(vc, nullptr);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("fp32/fp32/fp32/fp32");
  req.vocab_splits = 6;
  try {
    (void)vc->run(req);
    ADD_FAILURE() << "6 splits of 5 vocabulary rows accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("splits (6) exceed the vocabulary (5 rows)"), std::string::npos) << m;
    EXPECT_NE(m.find(kName), std::string::npos) << m;
  }
  req.vocab_splits = 5;
  EXPECT_EQ(vc->run(req).loss.size(), 3u);
}

}  // namespace
}  // namespace xentlab
