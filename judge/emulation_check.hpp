#pragma once
// The baseline-relative check of a device run: each output's error profile against the least
// accurate of the correct implementations the CPU emulation models for its recipe — the emulation
// of the same strategy, and the baseline models (gpu/registry.hpp make_baseline_models: sequential
// sums; tensor-core accumulation for 16-bit inputs with fp32 accumulation) — with the one
// criterion of the judge (judge/differential.hpp compare_with_baseline), as verify's differential
// check applies it.
#include <string>
#include <utility>
#include <vector>

#include "judge/bounds.hpp"
#include "judge/bounds_for.hpp"
#include "judge/policy.hpp"
#include "judge/stats.hpp"

namespace xentlab {

/// The statistics of every output an assessment holds, by name, in a fixed order: loss, lse,
/// reduced (the reduced loss), then dz, dH, dW, db where present. The pointers point into `a`.
std::vector<std::pair<std::string, const ErrorStats*>> assessed_outputs(const RunAssessment& a);

/// The verdict of a device run `device` (assessed against the reference: its verdict passed) held
/// to its baseline: per output (in the order of device.profiles), the merged profile of the
/// `baseline` assessments (each of a correct implementation of the same recipe on the same
/// problem, against the same reference) and compare_with_baseline; the first output that fails
/// decides (incorrect, the reason naming the numbers); if none fails, device.verdict. An output no
/// baseline assessment holds is not compared. A device verdict that is not passed is returned as
/// it is.
Verdict judge_against_emulation(const RunAssessment& device,
                                const std::vector<const RunAssessment*>& baseline,
                                const std::string& recipe);

}  // namespace xentlab
