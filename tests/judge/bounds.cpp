// A-priori bounds and the pass/fail policy (judge/bounds.hpp, judge/policy.hpp). Reduction
// constants are checked against a brute-force count of the reduction's additions; the policy
// against hand-made statistics; and the negative test shows the policy catching a wrong result of
// an emulated strategy.
#include "judge/bounds.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "datasets/synthetic.hpp"
#include "gpu/plans/fused_plan.hpp"
#include "gpu/registry.hpp"
#include "judge/bounds_for.hpp"
#include "judge/policy.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"

namespace xentlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The depth of the blocked reduction: the largest number of elements one thread adds sequentially
// (counted by assigning every j to thread (j/8) mod T), minus one, plus the tree depth log2 T.
double blocked_depth_by_count(std::int64_t n, std::int64_t T) {
  std::vector<std::int64_t> count(static_cast<std::size_t>(T), 0);
  for (std::int64_t j = 0; j < n; ++j) ++count[static_cast<std::size_t>((j / 8) % T)];
  std::int64_t mx = 0, used = 0;
  for (auto c : count) {
    mx = std::max(mx, c);
    used += c > 0;
  }
  return static_cast<double>(mx - 1) + std::ceil(std::log2(static_cast<double>(used)));
}

TEST(Bounds, ReductionConstants) {
  DeclaredArithmetic a;
  EXPECT_EQ(reduction_constant(ReductionOrder::sequential, 10, a), 9.0);
  EXPECT_EQ(reduction_constant(ReductionOrder::pairwise, 1024, a), 10.0);
  EXPECT_EQ(reduction_constant(ReductionOrder::pairwise, 1025, a), 11.0);
  EXPECT_EQ(reduction_constant(ReductionOrder::pairwise, 1, a), 0.0);
  for (std::int64_t n : {1, 7, 130, 2048, 129920, 128256}) {
    EXPECT_EQ(reduction_constant(ReductionOrder::blocked, n, a), blocked_depth_by_count(n, 256))
        << "n=" << n;
  }
  // online tiles of 128 over 1000: 127 sequential additions in a tile and two operations per
  // merge of 8 tiles.
  a.tile = 128;
  EXPECT_EQ(reduction_constant(ReductionOrder::online_tiles, 1000, a), 127.0 + 16.0);
  a.tile = 0;
  EXPECT_THROW(reduction_constant(ReductionOrder::online_tiles, 10, a), InputError);
}

/// The fused kernel's actual deepest path for one launch (gpu/cuda/fused/): ranges from the
/// launch rule for this SM count, tiles of each range counted, the binary-counter merge depth of
/// the ranges simulated. Returns {roundings, rescales} of the deepest term.
std::pair<double, double> fused_path_by_count(std::int64_t V, std::int64_t N, int sms) {
  const std::int64_t VT = (V + 255) / 256;  // the forward's tiles of 256 columns
  const int R = gpu::fused_vocab_ranges(N, V, sms);
  const std::int64_t tpr = (VT + R - 1) / R;
  std::int64_t most_tiles = 0;
  for (std::int64_t k = 0; k < R; ++k)
    most_tiles = std::max(most_tiles, std::min(VT, (k + 1) * tpr) - std::min(VT, k * tpr));
  // Binary counter over the ranges (as fused_finalize_kernel), then the unwinding.
  std::vector<std::pair<std::int64_t, int>> stack;  // (weight, depth of its deepest leaf)
  for (int k = 0; k < R; ++k) {
    std::pair<std::int64_t, int> cur{1, 0};
    while (!stack.empty() && stack.back().first == cur.first) {
      cur = {2 * cur.first, std::max(stack.back().second, cur.second) + 1};
      stack.pop_back();
    }
    stack.push_back(cur);
  }
  int depth = stack.back().second;
  for (std::size_t t = stack.size() - 1; t-- > 0;) depth = std::max(stack[t].second, depth) + 1;
  const double lanes = 2;  // 2 quad levels; a row's tile is in one warp
  // A thread folds 64 columns of each tile: 63 in-tile adds, 1 into its state.
  const double roundings =
      std::min<std::int64_t>(64, V) - 1 + 1 + 2.0 * double(most_tiles - 1) + 2.0 * (lanes + depth);
  const double rescales = double(most_tiles - 1) + lanes + depth;
  return {roundings, rescales};
}

// The declared online_tree constants bound the kernel's actual deepest path for every launch:
// vocabulary sizes from one tile to past 2^17, token counts from 1 to past the state budget
// (which caps the ranges), and SM counts from 1 to 200.
TEST(Bounds, OnlineTreeCoversTheFusedKernelsPathOnEverySmCount) {
  const DeclaredArithmetic a = gpu::fused_declared_arithmetic();
  for (const std::int64_t V :
       {std::int64_t{1}, std::int64_t{100}, std::int64_t{128}, std::int64_t{129}, std::int64_t{507},
        std::int64_t{2048}, std::int64_t{32000}, std::int64_t{128256}, std::int64_t{262144}})
    for (const std::int64_t N :
         {std::int64_t{1}, std::int64_t{16}, std::int64_t{129}, std::int64_t{8192},
          std::int64_t{131072}, std::int64_t{174763}, std::int64_t{1} << 20, std::int64_t{3000000}})
      for (const int sms : {1, 16, 100, 132, 200}) {
        const auto [roundings, rescales] = fused_path_by_count(V, N, sms);
        EXPECT_LE(roundings, reduction_constant(ReductionOrder::online_tree, V, a, N))
            << "V=" << V << " N=" << N << " SMs=" << sms;
        EXPECT_LE(rescales, online_rescales(a, V, N)) << "V=" << V << " N=" << N << " SMs=" << sms;
      }
  // The constant itself at the preset shape (N = 8192: at least 16 ranges of ≤ 32 of the 501
  // tiles): 63 + 1 + 2·31 + 2·(2 + 2·9) = 166; without N, one range: 63 + 1 + 2·500 + 40 = 1104.
  EXPECT_EQ(reduction_constant(ReductionOrder::online_tree, 128256, a, 8192), 166.0);
  EXPECT_EQ(reduction_constant(ReductionOrder::online_tree, 128256, a), 1104.0);
  DeclaredArithmetic bad = a;
  bad.block_threads = 0;
  EXPECT_THROW(reduction_constant(ReductionOrder::online_tree, 10, bad), InputError);
}

TEST(Bounds, GammaIsInfiniteWithoutAMeaningfulBound) {
  EXPECT_DOUBLE_EQ(gamma_bound(1, 0x1p-8), 0x1p-8 / (1 - 0x1p-8));
  EXPECT_EQ(gamma_bound(256, 0x1p-8), kInf);  // c·u = 1
  EXPECT_EQ(gamma_bound(0, 0x1p-8), 0.0);
}

ErrorStats bounded_stats(std::vector<double> out, std::vector<double> ref,
                         std::vector<double> bound) {
  return compute_error_stats(out.data(), ref.data(), static_cast<std::int64_t>(out.size()),
                             DType::fp32, bound.data());
}

TEST(Policy, NamedPolicies) {
  EXPECT_EQ(policy_by_name("default").k, 1.0);
  EXPECT_LT(policy_by_name("strict").k, 1.0);
  EXPECT_FALSE(policy_by_name("lenient").require_meaningful_bound);
  EXPECT_THROW(policy_by_name("sloppy"), InputError);
}

TEST(Policy, DecidesWithTheNumbers) {
  const Policy p = policy_by_name("default");
  // Within the bound: passed, ratio 0.5 reported.
  const ErrorStats ok = bounded_stats({1.5}, {1.0}, {1.0});
  Verdict v = judge({{"dH", &ok, false}}, p);
  EXPECT_EQ(v.disposition, Disposition::passed);
  EXPECT_EQ(v.ratio, 0.5);
  // Over the bound: incorrect, with the element, the error and the bound.
  const ErrorStats bad = bounded_stats({1.0, 3.0}, {1.0, 2.0}, {1.0, 0.5});
  v = judge({{"dH", &ok, false}, {"dW", &bad, false}}, p);
  EXPECT_EQ(v.disposition, Disposition::incorrect);
  EXPECT_EQ(v.output, "dW");
  EXPECT_EQ(v.index, 1);
  EXPECT_EQ(v.error, 1.0);
  EXPECT_EQ(v.bound, 0.5);
  EXPECT_EQ(v.ratio, 2.0);
  EXPECT_NE(v.reason.find("dW"), std::string::npos);
  // lenient k = 4 accepts the ratio 2.
  EXPECT_EQ(judge({{"dW", &bad, false}}, policy_by_name("lenient")).disposition,
            Disposition::passed);
  // Non-finite where the reference is finite: incorrect whatever the bound.
  const ErrorStats inf = bounded_stats({kInf}, {1.0}, {kInf});
  v = judge({{"loss", &inf, true}}, policy_by_name("lenient"));
  EXPECT_EQ(v.disposition, Disposition::incorrect);
  EXPECT_NE(v.reason.find("finiteness"), std::string::npos);
  // An infinite bound: incorrect under default (no guarantee), passed under lenient.
  const ErrorStats unb = bounded_stats({1.5}, {1.0}, {kInf});
  EXPECT_EQ(judge({{"lse", &unb, false}}, p).disposition, Disposition::incorrect);
  EXPECT_EQ(judge({{"lse", &unb, false}}, policy_by_name("lenient")).disposition,
            Disposition::passed);
  // Bias: 100 losses all high by 0.125 with bounds 0.2 each pass the element check (ratio 0.625);
  // their mean error 0.125 is beyond strict's limit k_bias·mean b + 4·stderr = 0.25·0.2 + 0 = 0.05
  // (stderr 0: identical errors), while the same errors with alternating signs have bias 0.
  std::vector<double> o(100), r(100, 1.0), b(100, 0.2), o2(100);
  for (int i = 0; i < 100; ++i) {
    o[static_cast<std::size_t>(i)] = 1.125;
    o2[static_cast<std::size_t>(i)] = i % 2 ? 1.125 : 0.875;
  }
  const ErrorStats biased = bounded_stats(o, r, b), unbiased = bounded_stats(o2, r, b);
  Policy strict_k1 = policy_by_name("strict");
  strict_k1.k = 1.0;  // isolate the bias check
  v = judge({{"loss", &biased, true}}, strict_k1);
  EXPECT_EQ(v.disposition, Disposition::incorrect);
  EXPECT_EQ(v.bias, 0.125);
  EXPECT_DOUBLE_EQ(v.bias_limit, 0.25 * 0.2);
  EXPECT_EQ(judge({{"loss", &unbiased, true}}, strict_k1).disposition, Disposition::passed);
  // Under default (k_bias = 1) a mean error within the mean bound is allowed: one-signed errors
  // (stagnation) within the declared bound are not a defect.
  EXPECT_EQ(judge({{"loss", &biased, true}}, p).disposition, Disposition::passed);
  // The bias check is for the loss only.
  EXPECT_EQ(judge({{"dH", &biased, false}}, strict_k1).disposition, Disposition::passed);
  EXPECT_EQ(verdict_not_run(Disposition::not_supported, "no fp16 GEMM").disposition,
            Disposition::not_supported);
}

// The bounds hold for every emulated strategy on a random linear problem (fp32 accumulation; the
// bounds are a-priori: nothing here is tuned to the data), and the policy catches a wrong result:
// the same outputs with one dH entry moved by twice its bound, or one loss by a bf16 ULP, fail.
TEST(Policy, EmulatedStrategiesPassAndAPerturbedResultFails) {
  const Problem pb = make_gaussian_linear(16, 300, 24, DType::bf16, 2.0, 7);
  LossSpec spec;
  ReferenceOptions ro;
  const ReferenceResult ref = compute_reference(pb, spec, ro);
  const Recipe recipe = parse_recipe("bf16/bf16/fp32/fp32");
  for (const auto& s : make_strategies(Backend::cpu_emulation)) {
    RunRequest req;
    req.problem = &pb;
    req.spec = spec;
    req.recipe = recipe;
    req.chunk_tokens = 5;
    StrategyOutputs out = s->run(req);
    const RunAssessment ra =
        assess_run(pb, spec, recipe, s->arithmetic(recipe), out, ref, policy_by_name("default"));
    EXPECT_EQ(ra.verdict.disposition, Disposition::passed)
        << s->name() << ": " << ra.verdict.reason;
    ASSERT_FALSE(ra.bounds.dH.empty());
    // Negative: move dH[3] away from the reference by twice its bound.
    const double b3 = ra.bounds.dH[3];
    out.dH[3] = ref.dH[3] + 2 * b3;
    const RunAssessment bad =
        assess_run(pb, spec, recipe, s->arithmetic(recipe), out, ref, policy_by_name("default"));
    EXPECT_EQ(bad.verdict.disposition, Disposition::incorrect) << s->name();
    EXPECT_EQ(bad.verdict.output, "dH");
    EXPECT_EQ(bad.verdict.index, 3);
  }
}

// The bounds are element by element or summed in a fixed order per element: the same bits on one
// thread and on several (their loops over token rows, column blocks and vocabulary rows run in
// parallel). Label smoothing and a softcap make the smoothing and target terms non-zero; ignored
// rows and repeated targets exercise the per-target slots; D = 150 spans three column blocks.
TEST(Bounds, SameBitsOnAnyNumberOfThreads) {
  Problem pb = make_gaussian_linear(40, 300, 150, DType::bf16, 3.0, 5);
  for (std::int64_t i = 0; i < pb.N; i += 7) pb.targets[static_cast<std::size_t>(i)] = -100;
  for (std::int64_t i = 1; i < pb.N; i += 5) pb.targets[static_cast<std::size_t>(i)] = 17;
  LossSpec spec;
  spec.label_smoothing = 0.1;
  spec.softcap = 20;
  ReferenceOptions ro;
  const ReferenceResult ref = compute_reference(pb, spec, ro);
  const Recipe recipe = parse_recipe("bf16/bf16/fp32/bf16");
  const auto s = make_strategies(Backend::cpu_emulation);
  const DeclaredArithmetic arith = s.front()->arithmetic(recipe);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Bounds one = bounds_for_reference(pb, spec, recipe, arith, ref, 3);
  omp_set_num_threads(3);
  const Bounds three = bounds_for_reference(pb, spec, recipe, arith, ref, 3);
  omp_set_num_threads(threads);
  ASSERT_FALSE(one.dW.empty());
  ASSERT_FALSE(one.dH.empty());
  EXPECT_EQ(one.loss, three.loss);
  EXPECT_EQ(one.lse, three.lse);
  EXPECT_EQ(one.dH, three.dH);
  EXPECT_EQ(one.dW, three.dW);
  EXPECT_EQ(one.db, three.db);
  EXPECT_EQ(one.reduced_loss, three.reduced_loss);
  EXPECT_EQ(one.meaningful, three.meaningful);
}

}  // namespace
}  // namespace xentlab
