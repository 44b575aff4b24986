// The judge's check of a device run against its baseline (judge/emulation_check.hpp) with the one
// criterion (judge/differential.hpp compare_with_baseline: normwise ≤ 2·baseline's + floor, floor =
// 2u + 4 ULP of fp32 at the largest reference; the scale test): expected verdicts follow from that
// formula on hand-made errors. The outcome of one output from its two checks (judge/
// output_verdict.hpp). And the judge of a run checked on sampled rows (judge/sampled_check.hpp,
// the bench's): emulated strategies pass, corrupted outputs do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "datasets/synthetic.hpp"
#include "gpu/registry.hpp"
#include "judge/bounds.hpp"
#include "judge/differential.hpp"
#include "judge/emulation_check.hpp"
#include "judge/output_verdict.hpp"
#include "judge/policy.hpp"
#include "judge/sampled_check.hpp"
#include "judge/stats.hpp"
#include "numerics/dtype.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"

namespace xentlab {
namespace {

// The profile of ref + e (every element off by e) against ref = {1, 2, 3}, in fp32.
ErrorProfile off_by(double e) {
  const std::vector<double> ref{1.0, 2.0, 3.0};
  std::vector<double> out(ref);
  for (double& x : out) x += e;
  return error_profile(out.data(), ref.data(), 3, DType::fp32);
}

RunAssessment with_loss_error(double e) {
  RunAssessment a;
  a.profiles.emplace_back("loss", off_by(e));
  return a;
}

TEST(Judge, AssessedOutputsInAFixedOrder) {
  RunAssessment a;
  a.has_dH = true;
  a.has_db = true;
  std::vector<std::string> names;
  for (const auto& [name, stats] : assessed_outputs(a)) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"loss", "lse", "reduced", "dH", "db"}));
}

TEST(Judge, DeviceRunHeldToItsBaseline) {
  // A constant error e on ref = {1, 2, 3}: normwise e·√3/√14, and the limit against a baseline
  // of error b is 2·b·√3/√14 + the larger of (2 + 8)·2^-24·3/√14 (one ULP of fp32 and four for the
  // elementary functions, at the largest reference) and √(7/3) ULP of fp32 (2^-23: the elementary
  // functions' root mean square difference on every element).
  const RunAssessment emulation = with_loss_error(0x1p-22);
  const double k = std::sqrt(3.0 / 14.0);
  const double limit =
      2 * 0x1p-22 * k + std::max(10 * 0x1p-24 * 3 / std::sqrt(14.0), std::sqrt(7.0 / 3) * 0x1p-23);
  ASSERT_LT(0x1p-20 * k, limit);
  ASSERT_GT(0x1p-18 * k, limit);
  EXPECT_EQ(judge_against_emulation(with_loss_error(0x1p-20), {&emulation}, "r").disposition,
            Disposition::passed);
  const Verdict v = judge_against_emulation(with_loss_error(0x1p-18), {&emulation}, "r");
  EXPECT_EQ(v.disposition, Disposition::incorrect);
  EXPECT_EQ(v.output, "loss");
  EXPECT_NEAR(v.bound, limit, 16 * 0x1p-53 * limit);  // the same formula, other roundings
  // The baseline is the least accurate of the correct implementations given: a model whose error
  // is 2^-18 makes the same run pass.
  const RunAssessment model = with_loss_error(0x1p-18);
  EXPECT_EQ(
      judge_against_emulation(with_loss_error(0x1p-18), {&emulation, &model}, "r").disposition,
      Disposition::passed);
  // A device verdict that did not pass is returned as it is.
  RunAssessment failed = with_loss_error(0x1p-18);
  failed.verdict = verdict_not_run(Disposition::failed, "kernel failed");
  EXPECT_EQ(judge_against_emulation(failed, {&emulation}, "r").reason, "kernel failed");
}

// The scale test: an output off by a factor 1 + s has the error's projection on the reference
// exactly s; against a baseline of rounding-sized errors, 1% fails where the normwise and quantile
// limits would let it pass (a baseline of ±2^-7 relative errors, one bf16 ULP, on 256 values: the
// normwise limit is about 2·2^-7 = 0.0156, the scale limit 4·6.3e-4 + 2^-8 ≈ 0.0064).
TEST(Judge, ScaleTestCatchesASystematicFactor) {
  std::vector<double> ref(256), base(256), good(256), scaled(256);
  for (std::size_t i = 0; i < ref.size(); ++i) {
    ref[i] = 1.0 + static_cast<double>(i % 7);
    const double sign = (i * 2654435761u) % 2 == 0 ? 1.0 : -1.0;  // errors of both signs
    base[i] = ref[i] * (1 + sign * 0x1p-7);
    good[i] = ref[i] * (1 - sign * 0x1p-7);
    scaled[i] = ref[i] * 1.01;
  }
  const ErrorProfile b = error_profile(base.data(), ref.data(), 256, DType::bf16);
  const ErrorProfile s = error_profile(scaled.data(), ref.data(), 256, DType::bf16);
  EXPECT_NEAR(s.scale, 0.01, 256 * 0x1p-53);  // 256 sums of doubles: their rounding
  const DifferentialResult d = compare_with_baseline(s, b, DType::bf16, "r");
  EXPECT_LT(s.normwise, d.limit_normwise);  // the normwise limit alone passes it
  EXPECT_EQ(d.status, "incorrect") << d.message;
  EXPECT_NE(d.message.find("systematic scale"), std::string::npos) << d.message;
  const ErrorProfile g = error_profile(good.data(), ref.data(), 256, DType::bf16);
  EXPECT_EQ(compare_with_baseline(g, b, DType::bf16, "r").status, "passed");
}

// One output's outcome from its bound verdict and its baseline-relative check (verify's): either
// check that judged and did not pass fails it; vacuous checks, or a wanted baseline check that
// could not run, leave it inconclusive; with neither judging (the finiteness check alone), it is
// not judged.
TEST(Judge, OutputOutcomeFromBoundAndBaseline) {
  Verdict passed, incorrect;
  incorrect.disposition = Disposition::incorrect;
  OutputChecks c;
  c.bound = passed;
  EXPECT_EQ(judge_output(c), Outcome::passed);  // the bound alone
  c.baseline_judged = true;
  EXPECT_EQ(judge_output(c), Outcome::passed);  // both
  c.vacuous = true;
  EXPECT_EQ(judge_output(c), Outcome::inconclusive);
  c.vacuous = false;
  c.baseline = Disposition::incorrect;
  EXPECT_EQ(judge_output(c), Outcome::failed);
  c.bound_checked = false;  // the baseline alone
  EXPECT_EQ(judge_output(c), Outcome::failed);
  c.baseline = Disposition::passed;
  EXPECT_EQ(judge_output(c), Outcome::passed);
  c.baseline_judged = false;  // neither: finiteness only
  EXPECT_EQ(judge_output(c), Outcome::not_judged);
  c.bound_checked = true;  // the bound alone where the baseline was wanted
  c.baseline_wanted = true;
  EXPECT_EQ(judge_output(c), Outcome::inconclusive);
  c.bound = incorrect;  // a non-finite value where the reference is finite
  EXPECT_EQ(judge_output(c), Outcome::failed);
  c.baseline_judged = true;
  EXPECT_EQ(judge_output(c), Outcome::failed);  // the bound fails, the baseline passes
  EXPECT_EQ(to_string(Outcome::not_judged), "not judged");
  EXPECT_EQ(worse(Outcome::inconclusive, Outcome::failed), Outcome::failed);
  EXPECT_EQ(worse(Outcome::passed, Outcome::not_judged), Outcome::not_judged);
}

// An output of zeros passes a tolerance at least |ref| everywhere: such a tolerance is vacuous.
TEST(Judge, ZeroOutputPassesOnlyAVacuousTolerance) {
  const std::vector<double> ref{1e-4, -2e-4, 0.0}, loose{1e-3, 1e-3, 1e-3}, tight{1e-5, 1, 1};
  EXPECT_TRUE(zero_output_passes(ref.data(), loose.data(), 3));
  EXPECT_FALSE(zero_output_passes(ref.data(), tight.data(), 3));
  EXPECT_FALSE(zero_output_passes(ref.data(), loose.data(), 0));
}

// The fused kernel splits each row's vocabulary into ranges by its token count
// (gpu/plans/fused_plan.hpp): a run on N tokens judged on a sub-problem of its rows is bounded with
// the run's N (run_tokens), which changes the declared vocabulary constant where N is large enough
// to shrink the ranges; a blocked declaration does not depend on N.
TEST(SampledCheck, RunTokensReachTheVocabularyConstant) {
  const Problem pb = make_gaussian_linear(8, 4096, 16, DType::bf16, 2.0, 3);
  LossSpec spec;
  ReferenceOptions ro;
  ro.want_dW = false;
  const ReferenceResult ref = compute_reference(pb, spec, ro);
  const Recipe recipe = parse_recipe("bf16/bf16/fp32/bf16");
  const DeclaredArithmetic fused =
      make_strategy(Backend::cpu_emulation, "fused")->arithmetic(recipe);
  const DeclaredArithmetic blocked =
      make_strategy(Backend::cpu_emulation, "chunked")->arithmetic(recipe);
  const std::int64_t big = std::int64_t{1} << 22;  // ranges limited by the kernel's row states
  EXPECT_NE(bounds_for_reference(pb, spec, recipe, fused, ref, 0, big).c_vocab,
            bounds_for_reference(pb, spec, recipe, fused, ref).c_vocab);
  EXPECT_EQ(bounds_for_reference(pb, spec, recipe, blocked, ref, 0, big).c_vocab,
            bounds_for_reference(pb, spec, recipe, blocked, ref).c_vocab);
  // 0 means the problem's own N.
  EXPECT_EQ(bounds_for_reference(pb, spec, recipe, fused, ref, 0, pb.N).c_vocab,
            bounds_for_reference(pb, spec, recipe, fused, ref).c_vocab);
}

// The bench's check (judge/sampled_check.hpp): a full run of N tokens judged on S sampled rows
// against the reference of the sub-problem of those rows, dH at the full run's gradient scale 1/N,
// dW from a second run on the sub-problem. Every emulated strategy passes; the errors are the
// normwise relative errors the bench reported before it judged (the same doubles); and the judge
// finds the wrong results a bench can meet: dH judged at the sub-problem's scale (a scaling bug),
// one dW entry moved by twice its bound, outputs of the wrong size.
TEST(SampledCheck, SampledRowsJudgedAsTheAudit) {
  const std::int64_t N = 48, V = 300, D = 24;
  const Problem pb = make_gaussian_linear(N, V, D, DType::bf16, 2.0, 7);
  const std::vector<std::int64_t> rows = sample_rows(N, 8, 1);
  const auto S = static_cast<std::int64_t>(rows.size());
  ASSERT_EQ(S, 8);
  Tensor H(DType::bf16, {S, D}, "H (sampled rows)");
  std::vector<std::int64_t> t;
  for (std::int64_t q = 0; q < S; ++q) {
    const std::int64_t i = rows[static_cast<std::size_t>(q)];
    for (std::int64_t d = 0; d < D; ++d) H.set(q * D + d, pb.H.get(i * D + d));
    t.push_back(pb.targets[static_cast<std::size_t>(i)]);
  }
  const Problem sub = Problem::linear(std::move(H), pb.W, std::nullopt, t);
  LossSpec spec;
  ReferenceOptions ro;
  ro.vocab_rows = sample_rows(V, 64, 2);
  ro.want_db = false;
  const ReferenceResult ref = compute_reference(sub, spec, ro);
  const auto J = static_cast<std::int64_t>(ref.vocab_rows.size());
  const Recipe recipe = parse_recipe("bf16/bf16/fp32/bf16");
  const Policy policy = policy_by_name("audit");
  StatsOptions plain;  // the bench's former statistics: no bounds, no histograms
  plain.keep_histograms = false;
  auto normwise = [&](const std::vector<double>& out, const double* r, DType dt) {
    return compute_error_stats(out.data(), r, static_cast<std::int64_t>(out.size()), dt, nullptr,
                               plain)
        .normwise_rel_err;
  };
  for (const auto& s : make_strategies(Backend::cpu_emulation)) {
    const std::string name = s->name();
    const DeclaredArithmetic arith = s->arithmetic(recipe);
    RunRequest req;
    req.problem = &pb;
    req.spec = spec;
    req.recipe = recipe;
    req.chunk_tokens = 16;
    const StrategyOutputs full = s->run(req);
    req.problem = &sub;
    req.chunk_tokens = 3;
    const StrategyOutputs subrun = s->run(req);
    SampledOutputs so;
    for (std::int64_t i : rows) {
      so.loss.push_back(full.loss[static_cast<std::size_t>(i)]);
      so.lse.push_back(full.lse[static_cast<std::size_t>(i)]);
      so.dH.insert(so.dH.end(), full.dH.begin() + i * D, full.dH.begin() + (i + 1) * D);
    }
    for (std::int64_t j : ref.vocab_rows)
      so.dW.insert(so.dW.end(), subrun.dW.begin() + j * D, subrun.dW.begin() + (j + 1) * D);
    so.reduced_loss = subrun.reduced_loss;
    so.loss_dtype = recipe.accum;
    so.grad_dtype = recipe.grad;
    so.dH_scale = double(S) / double(N);
    const RunAssessment ra = assess_sampled_run(sub, spec, recipe, arith, so, ref, policy);
    EXPECT_EQ(ra.verdict.disposition, Disposition::passed) << name << ": " << ra.verdict.reason;
    ASSERT_TRUE(ra.has_dH && ra.has_dW) << name;
    // The bench's former formulas, the same doubles.
    EXPECT_EQ(ra.loss.normwise_rel_err, normwise(so.loss, ref.loss.data(), recipe.accum)) << name;
    EXPECT_EQ(ra.lse.normwise_rel_err, normwise(so.lse, ref.lse.data(), recipe.accum)) << name;
    EXPECT_EQ(ra.reduced_loss.normwise_rel_err,
              std::fabs(so.reduced_loss - ref.reduced_loss) / std::fabs(ref.reduced_loss))
        << name;
    std::vector<double> ref_dH(ref.dH.begin(), ref.dH.end());
    for (double& x : ref_dH) x *= double(S) / double(N);
    EXPECT_EQ(ra.dH.normwise_rel_err, normwise(so.dH, ref_dH.data(), recipe.grad)) << name;
    EXPECT_EQ(ra.dW.normwise_rel_err, normwise(so.dW, ref.dW.data(), recipe.grad)) << name;
    EXPECT_GT(ra.dH.normwise_rel_err, 0.0) << name;  // bf16 gradients: not exact

    // A scaling bug: the full run's dH (scale 1/N) held to the sub-problem's (1/S), N/S = 6×.
    SampledOutputs unscaled = so;
    unscaled.dH_scale = 1.0;
    const Verdict v1 = assess_sampled_run(sub, spec, recipe, arith, unscaled, ref, policy).verdict;
    EXPECT_EQ(v1.disposition, Disposition::incorrect) << name;
    EXPECT_EQ(v1.output, "dH") << name;
    // One dW entry moved by twice its bound.
    SampledOutputs moved = so;
    moved.dW[5] = ref.dW[5] + 2 * ra.bounds.dW[5];
    const Verdict v2 = assess_sampled_run(sub, spec, recipe, arith, moved, ref, policy).verdict;
    EXPECT_EQ(v2.disposition, Disposition::incorrect) << name;
    EXPECT_EQ(v2.output, "dW") << name;
    EXPECT_EQ(v2.index, 5) << name;
  }
  // Outputs of the wrong size, and a scale that is not a positive number, are input errors.
  SampledOutputs bad;
  bad.loss.assign(static_cast<std::size_t>(S), 0.0);
  bad.lse.assign(static_cast<std::size_t>(S), 0.0);
  bad.dW.assign(static_cast<std::size_t>(J * D - 1), 0.0);
  const DeclaredArithmetic arith = make_strategies(Backend::cpu_emulation)[0]->arithmetic(recipe);
  EXPECT_THROW(assess_sampled_run(sub, spec, recipe, arith, bad, ref, policy), InputError);
  bad.dW.clear();
  bad.dH_scale = 0.0;
  EXPECT_THROW(assess_sampled_run(sub, spec, recipe, arith, bad, ref, policy), InputError);
}

}  // namespace
}  // namespace xentlab
