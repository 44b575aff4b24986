#pragma once
// The baseline-relative check of a device run: each output's largest error against that of the
// CPU emulation of the same strategy and recipe on the same problem (judge/policy.hpp
// judge_against_baseline), with the floor that two correct implementations of the elementary
// functions may differ by.
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

/// The floor of the baseline-relative check of one output: 8·u(out dtype)·max|ref|. The GPU's
/// elementary functions are not glibc's: the CUDA C++ Programming Guide bounds expf at 2 ULP and
/// logf at 1 ULP (single precision, no fast-math), the emulation's glibc expf/logf are within
/// 1 ULP, so a per-token value formed from one of each may differ by 2 + 1 + 1 = 4 ULP = 8u
/// between two correct implementations, and a mean inherits it (stats' rel_floor is
/// 2^-20·max|ref|). Measured on the H200 (docs/audit.md): the fp32 mean loss of the GPU
/// strategies 1.1 ULP from the reference where the emulation was 0.1 ULP away.
double emulation_check_floor(const ErrorStats& device);

/// The verdict of a device run `device` (assessed against the reference: its verdict passed)
/// held to its emulation `emulation` (the CPU emulation of the same strategy and recipe, assessed
/// against the same reference): the first output, in assessed_outputs order, that both hold and
/// that fails judge_against_baseline decides (incorrect); if none fails, device.verdict. A device
/// verdict that is not passed is returned as it is.
Verdict judge_against_emulation(const RunAssessment& device, const RunAssessment& emulation,
                                const Policy& policy);

}  // namespace xentlab
