// The judge's check of a device run against its CPU emulation (judge/emulation_check.hpp): the
// limit is baseline_factor·(emulation's max|e|) + k·8·u(out)·max|ref| (numerics/bounds.hpp
// judge_against_baseline; the floor's derivation is in the header). Expected verdicts follow from
// that formula on hand-made errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "judge/emulation_check.hpp"
#include "numerics/bounds.hpp"
#include "numerics/dtype.hpp"
#include "numerics/stats.hpp"

namespace xentlab {
namespace {

// Statistics of ref + e (every element off by e) against ref = {1, 2, 3}, returned in fp32.
ErrorStats off_by(double e) {
  const std::vector<double> ref{1.0, 2.0, 3.0};
  std::vector<double> out(ref);
  for (double& x : out) x += e;
  return compute_error_stats(out.data(), ref.data(), 3, DType::fp32);
}

RunAssessment with_loss_error(double e) {
  RunAssessment a;
  a.loss = off_by(e);
  return a;
}

TEST(Judge, EmulationCheckFloorIsEightUnitRoundoffsOfTheLargestReference) {
  // 8 · 2^-24 · max|ref| = 8 · 2^-24 · 3.
  EXPECT_DOUBLE_EQ(emulation_check_floor(off_by(0.0)), 8.0 * 0x1p-24 * 3.0);
}

TEST(Judge, AssessedOutputsInAFixedOrder) {
  RunAssessment a;
  a.has_dH = true;
  a.has_db = true;
  std::vector<std::string> names;
  for (const auto& [name, stats] : assessed_outputs(a)) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"loss", "lse", "reduced", "dH", "db"}));
}

TEST(Judge, DeviceRunHeldToItsEmulation) {
  // Errors are powers of two, exact in fp32 at 1, 2 and 3. Policy default: factor 2, k = 1.
  const Policy policy = policy_by_name("default");
  const RunAssessment emulation = with_loss_error(0x1p-22);
  // Limit: 2 · 2^-22 + 8 · 2^-24 · 3 = 2^-21 + 3 · 2^-21 = 2^-19.
  const RunAssessment close = with_loss_error(0x1p-20);
  EXPECT_EQ(judge_against_emulation(close, emulation, policy).disposition, Disposition::passed);
  const RunAssessment far = with_loss_error(0x1p-18);
  const Verdict v = judge_against_emulation(far, emulation, policy);
  EXPECT_EQ(v.disposition, Disposition::incorrect);
  EXPECT_EQ(v.output, "loss");
  EXPECT_DOUBLE_EQ(v.bound, 0x1p-19);
  EXPECT_DOUBLE_EQ(v.error, 0x1p-18);
  // A device verdict that did not pass is returned as it is.
  RunAssessment failed = far;
  failed.verdict = verdict_not_run(Disposition::failed, "kernel failed");
  EXPECT_EQ(judge_against_emulation(failed, emulation, policy).reason, "kernel failed");
}

}  // namespace
}  // namespace xentlab
