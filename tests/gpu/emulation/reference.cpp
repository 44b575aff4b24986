// Every emulated strategy × recipe against the certified reference on seeded synthetic problems,
// with every LossSpec option: errors must be within the a-priori bounds of the strategy's declared
// arithmetic (judge/bounds.hpp; the tolerance is formed there and nowhere else). Also: the
// structural facts of the emulation (checkpointed recomputes chunked bit for bit; sampled rows
// equal the full run's rows; chunk sizes do not change the forward).
#include "reference/reference.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "datasets/synthetic.hpp"
#include "gpu/plans/fused_plan.hpp"
#include "gpu/registry.hpp"
#include "judge/bounds_for.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace {

struct Variant {
  const char* name;
  LossSpec spec;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  LossSpec s;
  v.push_back({"mean", s});
  s.reduction = Reduction::sum;
  v.push_back({"sum", s});
  s = LossSpec{};
  s.label_smoothing = 0.1;
  v.push_back({"smoothing", s});
  s = LossSpec{};
  s.z_loss = 1e-3;
  v.push_back({"z-loss", s});
  s = LossSpec{};
  s.softcap = 5.0;
  s.logit_scale = 1.5;
  v.push_back({"softcap+scale", s});
  s = LossSpec{};
  s.reduction = Reduction::none;
  v.push_back({"none+upstream", s});
  return v;
}

// Runs every strategy and every recipe of the default grid whose input dtype is the problem's, and
// judges each run: passed under "default" when the bounds are meaningful; otherwise (no a-priori
// guarantee, c·u_accum ≥ 1) the finite bounds must still hold (policy "lenient" with k = 1).
void check_all(const Problem& pb, const std::vector<std::int64_t>& rows, bool print) {
  for (const Variant& var : variants()) {
    // Ignore every fifth row (target → ignore_index) to exercise ignored rows.
    Problem p = pb;
    for (std::size_t i = 0; i < p.targets.size(); i += 5) p.targets[i] = var.spec.ignore_index;
    std::vector<double> upstream;
    if (var.spec.reduction == Reduction::none)
      for (std::int64_t i = 0; i < p.N; ++i)
        upstream.push_back(0.25 * static_cast<double>((i % 7) - 3));
    ReferenceOptions ro;
    ro.token_rows = rows;
    ro.want_dz = !p.is_linear();
    ro.upstream = upstream;
    const ReferenceResult ref = compute_reference(p, var.spec, ro);
    for (const Recipe& rc : default_recipe_grid()) {
      if (rc.input != p.input_dtype()) continue;
      for (const auto& s : make_strategies(Backend::cpu_emulation)) {
        RunRequest req;
        req.problem = &p;
        req.spec = var.spec;
        req.recipe = rc;
        req.upstream = upstream;
        req.token_rows = rows;
        req.chunk_tokens = 3;
        const StrategyOutputs out = s->run(req);
        const std::int64_t S = static_cast<std::int64_t>(out.token_rows.size());
        const std::string what = std::string(var.name) + " " + s->name() + " " + rc.name();
        RunAssessment ra;
        try {
          ra = assess_run(p, var.spec, rc, s->arithmetic(rc), out, ref, policy_by_name("default"),
                          (S + 2) / 3);
        } catch (const std::exception& e) {
          ADD_FAILURE() << what << ": " << e.what();
          continue;
        }
        Policy p1 = policy_by_name("lenient");
        p1.k = 1.0;
        if (ra.bounds.meaningful) {
          EXPECT_EQ(ra.verdict.disposition, Disposition::passed)
              << what << ": " << ra.verdict.reason;
        } else {
          std::vector<JudgedOutput> j{{"loss", &ra.loss, false}, {"lse", &ra.lse, false}};
          if (ra.has_dH) j.push_back({"dH", &ra.dH, false});
          if (ra.has_dW) j.push_back({"dW", &ra.dW, false});
          if (ra.has_dz) j.push_back({"dz", &ra.dz, false});
          const Verdict v = judge(j, p1);
          // fp16 accumulation may overflow (+Inf where the reference is finite): that is the
          // recipe's fault, reported as incorrect; any other outcome must be within the bounds.
          if (v.disposition != Disposition::passed) {
            EXPECT_TRUE(rc.accum == DType::fp16 && v.reason.find("finiteness") != std::string::npos)
                << what << ": " << v.reason;
          }
        }
        if (print)
          std::printf("%-14s %-12s %-20s ratios loss %.2e lse %.2e dH %.2e dW %.2e dz %.2e %s\n",
                      var.name, s->name().c_str(), rc.name().c_str(), ra.loss.max_ratio,
                      ra.lse.max_ratio, ra.dH.max_ratio, ra.dW.max_ratio, ra.dz.max_ratio,
                      ra.bounds.meaningful ? "" : "(no meaningful bound)");
      }
    }
  }
}

TEST(EmulationVsReference, LinearBf16AllOptions) {
  check_all(make_gaussian_linear(10, 517, 19, DType::bf16, 3.0, 11), {}, true);
}

TEST(EmulationVsReference, LinearFp16SampledRows) {
  check_all(make_gaussian_linear(40, 389, 16, DType::fp16, 2.0, 12), {1, 4, 5, 17, 39}, false);
}

TEST(EmulationVsReference, GivenLogitsBf16AndFp32) {
  check_all(make_gaussian_logits(6, 1003, DType::bf16, 4.0, 13), {}, false);
  check_all(make_gaussian_logits(6, 257, DType::fp32, 8.0, 14), {}, false);
}

// A linear head with a bias, two vocabulary rows masked by a −Inf bias: every strategy is within
// its bounds (the bias enters the logits), and the masked columns have p = 0 and no target, so
// their gradients dW and db are exactly 0 (every term added is an exact zero).
TEST(EmulationVsReference, BiasAndMaskedVocabulary) {
  Problem pb = make_gaussian_linear(9, 203, 12, DType::bf16, 2.0, 31);
  Tensor b(DType::bf16, {203}, "bias");
  for (std::int64_t j = 0; j < 203; ++j) b.set(j, 0.25 * static_cast<double>((j % 9) - 4));
  b.set(17, -std::numeric_limits<double>::infinity());
  b.set(150, -std::numeric_limits<double>::infinity());
  for (auto& t : pb.targets)
    if (t == 17 || t == 150) t = 0;
  pb = Problem::linear(pb.H, pb.W, b, pb.targets);
  LossSpec spec;
  const ReferenceResult ref = compute_reference(pb, spec, ReferenceOptions{});
  for (const char* r : {"bf16/fp32/fp32/fp32", "bf16/bf16/fp32/bf16"})
    for (const auto& s : make_strategies(Backend::cpu_emulation)) {
      RunRequest req;
      req.problem = &pb;
      req.recipe = parse_recipe(r);
      req.chunk_tokens = 4;
      const StrategyOutputs out = s->run(req);
      const RunAssessment ra = assess_run(pb, spec, req.recipe, s->arithmetic(req.recipe), out, ref,
                                          policy_by_name("default"));
      EXPECT_EQ(ra.verdict.disposition, Disposition::passed)
          << s->name() << " " << r << ": " << ra.verdict.reason;
      ASSERT_EQ(out.db.size(), 203u);
      EXPECT_EQ(ra.db.finiteness_mismatches, 0);
      for (std::int64_t j : {17, 150}) {
        EXPECT_EQ(out.db[static_cast<std::size_t>(j)], 0.0) << s->name();
        for (std::int64_t d = 0; d < 12; ++d)
          EXPECT_EQ(out.dW[static_cast<std::size_t>(j * 12 + d)], 0.0) << s->name();
      }
    }
}

TEST(EmulationStructure, CheckpointedEqualsChunkedAndSamplingEqualsFullRows) {
  const Problem pb = make_gaussian_linear(12, 200, 8, DType::bf16, 2.0, 21);
  const auto strategies = make_strategies(Backend::cpu_emulation);
  const auto chunked = make_strategy(Backend::cpu_emulation, "chunked");
  const auto checkpointed = make_strategy(Backend::cpu_emulation, "checkpointed");
  ASSERT_TRUE(chunked && checkpointed);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/bf16/bf16");
  req.chunk_tokens = 5;
  const StrategyOutputs a = chunked->run(req), b = checkpointed->run(req);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.dH, b.dH);
  EXPECT_EQ(a.dW, b.dW);
  // Per-row outputs of a sampled run equal the full run's rows.
  RunRequest rs = req;
  rs.token_rows = {2, 7, 11};
  for (const auto& s : strategies) {
    const StrategyOutputs full = s->run(req), part = s->run(rs);
    for (std::size_t q = 0; q < rs.token_rows.size(); ++q) {
      const auto i = static_cast<std::size_t>(rs.token_rows[q]);
      EXPECT_EQ(part.loss[q], full.loss[i]) << s->name();
      EXPECT_EQ(part.lse[q], full.lse[i]) << s->name();
      for (std::int64_t d = 0; d < pb.D; ++d)
        EXPECT_EQ(part.dH[q * static_cast<std::size_t>(pb.D) + static_cast<std::size_t>(d)],
                  full.dH[i * static_cast<std::size_t>(pb.D) + static_cast<std::size_t>(d)])
            << s->name();
    }
    EXPECT_GT(part.peak_extra_bytes, 0);
    EXPECT_LE(part.peak_extra_bytes, s->workspace_size(rs)) << s->name();
  }
  // The forward does not depend on the chunk size.
  RunRequest r1 = req;
  r1.chunk_tokens = 1;
  EXPECT_EQ(chunked->run(r1).loss, a.loss);
}

// Every emulated rounding happens in a fixed order, so results do not depend on the number of
// OpenMP threads (the problem is large enough for the engine to use threads).
TEST(EmulationStructure, BitIdenticalForAnyThreadCount) {
  const Problem pb = make_gaussian_linear(12, 2000, 16, DType::bf16, 3.0, 41);
  const int saved = omp_get_max_threads();
  for (const auto& s : make_strategies(Backend::cpu_emulation)) {
    RunRequest req;
    req.problem = &pb;
    req.recipe = parse_recipe("bf16/bf16/bf16/bf16");
    req.chunk_tokens = 5;
    omp_set_num_threads(1);
    const StrategyOutputs one = s->run(req);
    omp_set_num_threads(2);
    const StrategyOutputs two = s->run(req);
    EXPECT_EQ(one.loss, two.loss) << s->name();
    EXPECT_EQ(one.dH, two.dH) << s->name();
    EXPECT_EQ(one.dW, two.dW) << s->name();
    EXPECT_EQ(one.reduced_loss, two.reduced_loss) << s->name();
  }
  omp_set_num_threads(saved);
}

// The fused kernel's vocabulary ranges (gpu/plans/fused_plan.hpp), from the rule in its comment:
// 4·SMs CTAs in all, at least 16 ranges, at most one tile each, partial states under 32 MiB.
TEST(EmulationStructure, FusedVocabularyRangesFollowTheLaunchRule) {
  EXPECT_EQ(gpu::fused_vocab_ranges(8192, 128256, 132), 16);  // 64 blocks: ⌈528/64⌉ = 9 → 16
  EXPECT_EQ(gpu::fused_vocab_ranges(1, 128256, 132), 501);  // one block: 4·132, capped at 501 tiles
  EXPECT_EQ(gpu::fused_vocab_ranges(1, 507, 132), 2);       // capped at the 2 tiles of 256
  EXPECT_EQ(gpu::fused_vocab_ranges(131072, 128256, 132), 16);  // the minimum
  EXPECT_EQ(gpu::fused_vocab_ranges(1 << 20, 128256, 132), 2);  // 32 MiB / (12·2^20) = 2
  EXPECT_EQ(gpu::fused_vocab_ranges(1, 128256, 100), 400);
  EXPECT_EQ(gpu::fused_vocab_ranges(1, 128256, 200), 501);
}

// The staged backward's token groups (gpu/plans/fused_plan.hpp fused_group_rows), from the rule
// in its comment: what the stage holds, rounded down to 128 rows, then balanced over the groups.
TEST(EmulationStructure, FusedTokenGroupsFollowThePlanRule) {
  const std::int64_t V = 128256, stage = gpu::kFusedStageBytes;  // 192 MiB
  // 192 MiB / (128256 · 2 bytes) = 784 rows → 768; 131072 / 768 = 170.7 → 171 groups of
  // ⌈131072/171⌉ = 767 rows, rounded up to 768 (fits).
  EXPECT_EQ(gpu::fused_group_rows(131072, V, 2, stage, 0), 768);
  // 8192 rows: 11 groups; ⌈8192/11⌉ = 745 → 768.
  EXPECT_EQ(gpu::fused_group_rows(8192, V, 2, stage, 0), 768);
  // 1000 rows: 2 groups of 500 → rounded up to 512 (fits 768).
  EXPECT_EQ(gpu::fused_group_rows(1000, V, 2, stage, 0), 512);
  EXPECT_EQ(gpu::fused_group_rows(700, V, 2, stage, 0), 700);       // one group
  EXPECT_EQ(gpu::fused_group_rows(4480, 4096, 2, stage, 0), 4480);  // one group
  // A stage below 128 rows: no rounding; 100 rows of V = 1000 fp32 entries → groups of 100,
  // balanced: 250 rows → 3 groups of ⌈250/3⌉ = 84.
  EXPECT_EQ(gpu::fused_group_rows(250, 1000, 4, 100 * 1000 * 4, 0), 84);
  EXPECT_EQ(gpu::fused_group_rows(250, 1000, 4, 1, 0), 1);  // at least one row
  // chunk_tokens sets the group, at most N.
  EXPECT_EQ(gpu::fused_group_rows(8192, V, 2, stage, 1000), 1000);
  EXPECT_EQ(gpu::fused_group_rows(500, V, 2, stage, 1000), 500);
}

// The fused emulation sums a row's exponentials in the kernel's tree (64 columns per thread and
// tile, quad, ranges pairwise), not sequentially over the row. All-zero logits, V = 49152
// (192 tiles of 256), N = 1, bf16 accumulator: every partial sum of the tree is 2^a or 3·2^a, exact
// in bf16, so lse = rnd_bf16(logf(49152)) = 10.8125. A sequential fold over the tiles in bf16 would
// stop at 32768 (32768 + 128 ties back to 32768) and give rnd_bf16(logf(32768)) = 10.375.
TEST(EmulationStructure, FusedSumExpFollowsTheKernelTree) {
  const std::int64_t V = 49152;
  Problem pb;
  pb.N = 1;
  pb.V = V;
  pb.logits = Tensor(DType::bf16, {1, V}, "logits");
  for (std::int64_t j = 0; j < V; ++j) pb.logits.set(j, 0.0);
  pb.targets = {7};
  const auto fused = make_strategy(Backend::cpu_emulation, "fused");
  ASSERT_TRUE(fused);
  RunRequest req;
  req.problem = &pb;
  req.recipe = parse_recipe("bf16/bf16/bf16/bf16");
  const double tree = round_to(static_cast<double>(std::log(49152.0f)), DType::bf16);
  const double sequential = round_to(static_cast<double>(std::log(32768.0f)), DType::bf16);
  ASSERT_EQ(tree, 10.8125);
  ASSERT_EQ(sequential, 10.375);
  for (const int sms : {0, 132, 1}) {  // 192 ranges of 1 tile (0 = 132); 16 ranges of 12 tiles
    req.emulated_sms = sms;
    const StrategyOutputs o = fused->run(req);
    EXPECT_EQ(o.lse[0], tree) << "SMs " << sms;
    EXPECT_EQ(o.loss[0], tree) << "SMs " << sms;  // lse − x_t with x_t = 0
  }
}

TEST(EmulationStructure, RecipesTheEmulationCannotHonourAreNotSupported) {
  const Problem pb = make_gaussian_linear(2, 10, 4, DType::bf16, 1.0, 3);
  for (const auto& s : make_strategies(Backend::cpu_emulation)) {
    EXPECT_TRUE(s->can_implement(pb, LossSpec{}, parse_recipe("bf16/bf16/fp32/bf16")).ok());
    const Status st = s->can_implement(pb, LossSpec{}, parse_recipe("fp16/fp16/fp32/fp16"));
    EXPECT_EQ(st.code, Status::Code::not_supported);
    EXPECT_NE(st.message.find("bf16"), std::string::npos) << st.message;
    RunRequest req;
    req.problem = &pb;
    req.recipe = parse_recipe("fp16/fp16/fp32/fp16");
    EXPECT_THROW(s->run(req), InputError);
  }
}

}  // namespace
}  // namespace xentlab
