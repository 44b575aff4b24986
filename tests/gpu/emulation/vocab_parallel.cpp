// The vocab_parallel strategy's CPU emulation (gpu/emulation/vocab_parallel.cpp): P virtual ranks
// over uneven vocabulary shards, against the certified reference within the a-priori bound of its
// declaration (DeclaredArithmetic::vocab_ranks, judge/bounds.hpp), for every loss option; one
// rank is chunked bit for bit; a rank that would own no row is refused; the declared bound charges
// the P − 1 cross-rank additions (docs/arithmetic.md §10, docs/bounds.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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

constexpr const char* kName = "vocab_parallel";
constexpr double kInf = std::numeric_limits<double>::infinity();

std::unique_ptr<Strategy> vocab_parallel() {
  auto s = make_strategy(Backend::cpu_emulation, kName);
  if (s == nullptr) ADD_FAILURE() << "no emulated " << kName << " in the registry";
  return s;
}

using testing::SplitVariant;

// One run of vocab_parallel with `ranks` against the reference, within the bound of its
// declaration (tests/support/vocab_split_support.hpp).
void expect_within_bound(const Problem& p, const SplitVariant& var, const ReferenceResult& ref,
                         const std::vector<double>& upstream, const Recipe& rc, int ranks,
                         const std::string& what) {
  const auto s = vocab_parallel();
  ASSERT_NE(s, nullptr);
  RunRequest req;
  req.problem = &p;
  req.spec = var.spec;
  req.recipe = rc;
  req.upstream = upstream;
  req.chunk_tokens = 3;
  req.ranks = ranks;
  const StrategyOutputs out = s->run(req);
  const DeclaredArithmetic ar = s->run_arithmetic(req);
  ASSERT_EQ(ar.vocab_ranks, ranks) << what;
  testing::expect_within_declared_bound(p, var.spec, rc, ar, out, ref, (p.N + 2) / 3, what);
}

// Recipes of bf16 inputs: fp32 accumulation with bf16 and fp32 logits (the recipes with a
// meaningful bound), and bf16 and fp16 accumulation (the sums the ranks add in a reduced dtype).
std::vector<Recipe> recipes() {
  std::vector<Recipe> r;
  for (const char* s :
       {"bf16/fp32/fp32/bf16", "bf16/bf16/fp32/fp32", "bf16/bf16/bf16/bf16", "bf16/fp32/fp16/fp32"})
    r.push_back(parse_recipe(s));
  return r;
}

// Every option × P ∈ {1, 2, 3, 8} × recipes().
void check_all_options(const Problem& pb, const char* label) {
  testing::for_every_loss_option(pb, recipes(), {1, 2, 3, 8}, label, expect_within_bound);
}

// V = 317: uneven shards for P = 2 (159, 158), 3 (106, 106, 105) and 8 (40 ×5, 39 ×3).
TEST(VocabParallel, LinearEveryOptionWithinBoundForEveryRankCount) {
  ASSERT_NE(317 % 2, 0);
  ASSERT_NE(317 % 3, 0);
  ASSERT_NE(317 % 8, 0);
  check_all_options(make_gaussian_linear(8, 317, 11, DType::bf16, 3.0, 11), "linear bf16");
}

// Given logits (dz compared), V = 403 = 3 · 134 + 1 = 8 · 50 + 3: uneven for 2, 3 and 8.
TEST(VocabParallel, GivenLogitsEveryOptionWithinBoundForEveryRankCount) {
  check_all_options(make_gaussian_logits(6, 403, DType::bf16, 4.0, 13), "logits bf16");
}

// A shard boundary separates a row's maximum logit from its target: with P = 2 over V = 9 the
// shards are [0, 5) and [5, 9); the rows' maxima (30, 25) lie in rank 0, their targets in rank 1,
// so the loss needs the global maximum from one rank and the target logit from the other. The
// P = 3 layout ([0, 3), [3, 6), [6, 9)) splits them again. A row whose logits of rank 1's shard
// are all masked (−Inf; given logits only, and no label smoothing, whose Σx would be −Inf): that
// rank's maximum is −Inf and its sum 0. Within the bound of the reference, on given logits and
// on their linear twin.
TEST(VocabParallel, ShardBoundarySeparatesTheMaximumFromTheTarget) {
  const std::vector<std::vector<double>> rows{{0.5, -1, 30, 2, 1, -3, 4, 28.5, 0},
                                              {25, 0, 0, -2, 1, 3, 0, -1, 24}};
  const std::vector<std::int64_t> targets{7, 8};
  ASSERT_EQ(vocab_shard_of(2, 9, 2), 0);
  ASSERT_EQ(vocab_shard_of(7, 9, 2), 1);
  ASSERT_EQ(vocab_shard_of(0, 9, 2), 0);
  ASSERT_EQ(vocab_shard_of(8, 9, 2), 1);
  const Problem lp = testing::logits_problem(DType::fp32, rows, targets);
  LossSpec options;
  options.label_smoothing = 0.1;
  options.z_loss = 1e-3;
  options.softcap = 20.0;
  std::vector<std::vector<double>> masked_rows = rows;
  const double ninf = -kInf;
  masked_rows.push_back({1, 12, -4, 2, 0, ninf, ninf, ninf, ninf});
  const Problem masked =
      testing::logits_problem(DType::fp32, masked_rows, {targets[0], targets[1], 3});
  const std::vector<std::pair<const Problem*, LossSpec>> runs{
      {&lp, LossSpec{}}, {&lp, options}, {&masked, LossSpec{}}};
  const Problem twin = testing::linear_from_logits(lp);
  for (const auto& [pb0, spec] : runs)
    for (const Problem* pb : {pb0, pb0 == &lp ? &twin : pb0}) {
      ReferenceOptions ro;
      ro.want_dz = !pb->is_linear();
      const ReferenceResult ref = compute_reference(*pb, spec, ro);
      const SplitVariant var{"boundary", spec};
      for (const char* r : {"fp32/fp32/fp32/fp32", "fp32/bf16/fp32/fp32", "fp32/fp32/bf16/fp32"})
        for (const int P : {2, 3})
          expect_within_bound(*pb, var, ref, {}, parse_recipe(r), P,
                              std::string(pb->is_linear() ? "linear " : "logits ") + r + " " +
                                  spec.describe() + " P=" + std::to_string(P));
    }
}

// With one rank every step of the declared arithmetic is chunked's: all outputs bit for bit, on a
// linear head with a bias (dH, dW, db) and on given logits (dz), for several recipes and options.
TEST(VocabParallel, OneRankIsChunkedBitForBit) {
  Problem lin = make_gaussian_linear(11, 300, 13, DType::bf16, 3.0, 5);
  Tensor b(DType::bf16, {300}, "bias");
  for (std::int64_t j = 0; j < 300; ++j) b.set(j, 0.125 * static_cast<double>((j % 11) - 5));
  lin = Problem::linear(lin.H, lin.W, b, lin.targets);
  lin.targets[4] = -100;
  const Problem logits = make_gaussian_logits(7, 611, DType::fp16, 4.0, 9);
  const auto vp = vocab_parallel();
  const auto chunked = make_strategy(Backend::cpu_emulation, "chunked");
  ASSERT_TRUE(vp && chunked);
  LossSpec smooth;
  smooth.label_smoothing = 0.1;
  smooth.z_loss = 1e-3;
  smooth.softcap = 10.0;
  LossSpec none;
  none.reduction = Reduction::none;
  for (const Problem* pb : {static_cast<const Problem*>(&lin), &logits})
    for (const LossSpec& spec : {LossSpec{}, smooth, none})
      for (const char* acc : {"fp32", "bf16", "fp16"}) {
        const std::string in(to_string(pb->input_dtype()));
        const Recipe rc = parse_recipe(in + "/" + in + "/" + acc + "/" + in);
        RunRequest req;
        req.problem = pb;
        req.spec = spec;
        req.recipe = rc;
        req.chunk_tokens = 4;
        if (spec.reduction == Reduction::none)
          for (std::int64_t i = 0; i < pb->N; ++i) req.upstream.push_back(0.5 + 0.25 * (i % 3));
        const StrategyOutputs c = chunked->run(req);
        for (const int ranks : {0, 1}) {  // ≤ 0 means one rank
          req.ranks = ranks;
          const StrategyOutputs o = vp->run(req);
          const std::string what =
              rc.name() + " " + spec.describe() + " ranks " + std::to_string(ranks);
          testing::expect_same_outputs(o, c, what);
          EXPECT_EQ(vp->run_arithmetic(req).vocab_ranks, 1);
        }
      }
}

// More ranks than vocabulary rows: a rank would own no row; refused naming both numbers, before
// any work. P = V (one row per rank) runs.
TEST(VocabParallel, MoreRanksThanVocabularyRowsAreRefused) {
  const Problem pb = make_gaussian_logits(3, 5, DType::fp32, 2.0, 3);
  const auto vp = vocab_parallel();
  ASSERT_NE(vp, nullptr);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("fp32/fp32/fp32/fp32");
  req.ranks = 6;
  try {
    (void)vp->run(req);
    ADD_FAILURE() << "6 ranks over 5 vocabulary rows accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ranks (6) exceed the vocabulary (5 rows)"), std::string::npos) << m;
    EXPECT_NE(m.find(kName), std::string::npos) << m;
  }
  req.ranks = 5;
  const StrategyOutputs o = vp->run(req);
  EXPECT_EQ(o.loss.size(), 3u);
}

// The declared bound: with P ranks the sum over the vocabulary (sum-exp, Σx) is the blocked
// reduction over the largest shard ⌈V/P⌉ plus P − 1 additions in any order, and dH's fp32 sum
// ⌈V/P⌉ roundings plus P − 1 (docs/bounds.md). The constants below are the formula's, worked by
// hand: blocked over n with T = 256, groups of 8: (⌈⌈n/8⌉/256⌉·8 − 1) + ⌈log2 min(256, ⌈n/8⌉)⌉.
TEST(VocabParallel, TheDeclaredBoundChargesTheCrossRankAdditions) {
  const auto vp = vocab_parallel();
  ASSERT_NE(vp, nullptr);
  const Problem pb = make_gaussian_logits(2, 128256, DType::bf16, 1.0, 1);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/fp32/bf16");
  // V = 128256: P = 1: n = 128256, 16032 groups, 63 per thread → 503 + 8 = 511;
  // P = 2: n = 64128, 8016 groups, 32 per thread → 255 + 8 + 1 = 264;
  // P = 3: n = 42752, 5344 groups, 21 per thread → 167 + 8 + 2 = 177;
  // P = 8: n = 16032, 2004 groups, 8 per thread → 63 + 8 + 7 = 78.
  const std::vector<std::pair<int, double>> c_vocab{{1, 511}, {2, 264}, {3, 177}, {8, 78}};
  const std::vector<std::pair<int, double>> c_dH{
      {1, 128256}, {2, 64128 + 1}, {3, 42752 + 2}, {8, 16032 + 7}};
  for (std::size_t k = 0; k < c_vocab.size(); ++k) {
    req.ranks = c_vocab[k].first;
    const DeclaredArithmetic a = vp->run_arithmetic(req);
    EXPECT_EQ(a.vocab_ranks, req.ranks);
    EXPECT_EQ(a.vocab_order, ReductionOrder::blocked);
    EXPECT_EQ(vocab_reduction_constant(a, 128256), c_vocab[k].second) << "P=" << req.ranks;
    EXPECT_EQ(dH_vocab_constant(a, 128256), c_dH[k].second) << "P=" << req.ranks;
  }
  // At one shard size the bound grows with the ranks: V = 4096 with P = 2 (shards of 2048, 256
  // groups) and P = 3 (1366, 171 groups) both reduce 8 per thread and 8 tree levels, 15; then
  // + 1 and + 2. The bounds of every output follow: none smaller, the lse's larger.
  const Problem small = make_gaussian_logits(4, 4096, DType::bf16, 2.0, 7);
  ReferenceOptions ro;
  ro.want_dz = true;
  const ReferenceResult ref = compute_reference(small, LossSpec{}, ro);
  const Recipe bf = parse_recipe("bf16/bf16/bf16/bf16");
  req.problem = &small;
  req.recipe = bf;
  req.ranks = 2;
  const DeclaredArithmetic a2 = vp->run_arithmetic(req);
  req.ranks = 3;
  const DeclaredArithmetic a3 = vp->run_arithmetic(req);
  EXPECT_EQ(vocab_reduction_constant(a2, 4096), 16.0);
  EXPECT_EQ(vocab_reduction_constant(a3, 4096), 17.0);
  const Bounds b2 = bounds_for_reference(small, LossSpec{}, bf, a2, ref);
  const Bounds b3 = bounds_for_reference(small, LossSpec{}, bf, a3, ref);
  EXPECT_EQ(b2.c_vocab, 16.0);
  EXPECT_EQ(b3.c_vocab, 17.0);
  ASSERT_EQ(b2.lse.size(), b3.lse.size());
  for (std::size_t q = 0; q < b2.lse.size(); ++q) {
    EXPECT_GT(b3.lse[q], b2.lse[q]) << q;
    EXPECT_GE(b3.loss[q], b2.loss[q]) << q;
  }
  ASSERT_EQ(b2.dz.size(), b3.dz.size());
  for (std::size_t q = 0; q < b2.dz.size(); ++q) EXPECT_GE(b3.dz[q], b2.dz[q]) << q;
  // One rank declares exactly chunked's arithmetic: the same bounds, bit for bit.
  req.ranks = 1;
  const Bounds b1 = bounds_for_reference(small, LossSpec{}, bf, vp->run_arithmetic(req), ref);
  const auto chunked = make_strategy(Backend::cpu_emulation, "chunked");
  const Bounds bc = bounds_for_reference(small, LossSpec{}, bf, chunked->arithmetic(bf), ref);
  EXPECT_EQ(b1.lse, bc.lse);
  EXPECT_EQ(b1.dz, bc.dz);
  EXPECT_EQ(b1.c_vocab, bc.c_vocab);
  // Ranks past the vocabulary have no declared bound.
  DeclaredArithmetic bad = a2;
  bad.vocab_ranks = 4097;
  EXPECT_THROW(vocab_reduction_constant(bad, 4096), InputError);
  EXPECT_THROW(dH_vocab_constant(bad, 4096), InputError);
  // An online order's rank state is rescaled to the global maximum once: online tiles of 128 over
  // the shard of 2048, (128 − 1) + 2·16 = 159, + 1 (the rescale) + 1 (P − 1) = 161; its rescales
  // ⌈2048/128⌉ = 16, + 1.
  DeclaredArithmetic online = a2;
  online.vocab_order = ReductionOrder::online_tiles;
  online.tile = 128;
  EXPECT_EQ(vocab_reduction_constant(online, 4096), 161.0);
  EXPECT_EQ(vocab_online_rescales(online, 4096), 17.0);
  // The plain orders sum with the global maximum: no rescale.
  EXPECT_EQ(vocab_online_rescales(a2, 4096), 0.0);
}

// The emulation adds the ranks' partial sums in rank order, ((s_0 + s_1) + s_2), in the accum
// dtype. V = 768 bf16 logits, P = 3 shards of 256: rank 0's logits all 0, ranks 1 and 2 one 0 each
// (their first) and −Inf elsewhere; the maximum is 0, so every e_j is 1 or 0. Rank 0's blocked sum
// of 256 ones is exact (32 threads of 8), s_1 = s_2 = 1; in bf16 (8 significant bits) 256 + 1 ties
// to 256 (even), and 256 + 1 again: s = 256, lse = rnd_bf16(logf(256)). (Another order,
// s_0 + (s_1 + s_2) = 258, is what the declared bound also covers.) With one rank the blocked sum
// over the row gives the exact 258: thread 0 holds 8 ones, threads 32 and 64 one each, threads
// 1–31 eight each, and every partial sum of the tree is ≤ 258 and even above 256, exact in bf16.
TEST(VocabParallel, RanksPartialSumsAreAddedInRankOrder) {
  const std::int64_t V = 768;
  Problem pb;
  pb.N = 1;
  pb.V = V;
  pb.logits = Tensor(DType::bf16, {1, V}, "logits");
  for (std::int64_t j = 0; j < V; ++j)
    pb.logits.set(j, j < 256 || j == 256 || j == 512 ? 0.0 : -kInf);
  pb.targets = {0};
  const auto vp = vocab_parallel();
  ASSERT_NE(vp, nullptr);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/bf16/bf16");
  const double rank_order = round_to(static_cast<double>(std::log(256.0f)), DType::bf16);
  const double exact = round_to(static_cast<double>(std::log(258.0f)), DType::bf16);
  ASSERT_EQ(rank_order, 5.53125);
  ASSERT_EQ(exact, 5.5625);
  req.ranks = 3;
  StrategyOutputs o = vp->run(req);
  EXPECT_EQ(o.lse[0], rank_order);
  EXPECT_EQ(o.loss[0], rank_order);  // lse − x_t with x_t = 0
  req.ranks = 1;
  o = vp->run(req);
  EXPECT_EQ(o.lse[0], exact);
  EXPECT_EQ(o.loss[0], exact);
}

}  // namespace
}  // namespace xentlab
