// The baseline-relative check of a device run against the CPU emulation's correct
// implementations of its recipe (judge/emulation_check.hpp).
#include "judge/emulation_check.hpp"

#include <fmt/format.h>

#include "judge/differential.hpp"

namespace xentlab {

std::vector<std::pair<std::string, const ErrorStats*>> assessed_outputs(const RunAssessment& a) {
  std::vector<std::pair<std::string, const ErrorStats*>> outs{
      {"loss", &a.loss}, {"lse", &a.lse}, {"reduced", &a.reduced_loss}};
  if (a.has_dz) outs.emplace_back("dz", &a.dz);
  if (a.has_dH) outs.emplace_back("dH", &a.dH);
  if (a.has_dW) outs.emplace_back("dW", &a.dW);
  if (a.has_db) outs.emplace_back("db", &a.db);
  return outs;
}

Verdict judge_against_emulation(const RunAssessment& device,
                                const std::vector<const RunAssessment*>& baseline,
                                const std::string& recipe) {
  if (device.verdict.disposition != Disposition::passed) return device.verdict;
  for (const auto& [name, prof] : device.profiles) {
    ErrorProfile base;
    bool any = false;
    for (const RunAssessment* b : baseline)
      if (const ErrorProfile* p = b->profile(name)) {
        merge_into_baseline(base, *p, !any);
        any = true;
      }
    if (!any) continue;
    const DifferentialResult d = compare_with_baseline(prof, base, prof.ulp_dtype, recipe);
    if (d.status == "passed") continue;
    Verdict v;
    v.disposition = Disposition::incorrect;
    v.output = name;
    v.error = prof.normwise;
    v.bound = d.limit_normwise;
    v.ratio = d.limit_normwise > 0 ? prof.normwise / d.limit_normwise : 0.0;
    v.reason = fmt::format("{}: against its CPU-emulated baseline: {}", name, d.message);
    return v;
  }
  return device.verdict;
}

}  // namespace xentlab
