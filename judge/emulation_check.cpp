// The baseline-relative check of a device run against the CPU emulation of the same strategy.
#include "judge/emulation_check.hpp"

#include "numerics/dtype.hpp"

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

double emulation_check_floor(const ErrorStats& device) {
  return 8.0 * unit_roundoff(device.out_dtype) * device.rel_floor * 0x1p20;
}

Verdict judge_against_emulation(const RunAssessment& device, const RunAssessment& emulation,
                                const Policy& policy) {
  if (device.verdict.disposition != Disposition::passed) return device.verdict;
  const auto emulated = assessed_outputs(emulation);
  for (const auto& [name, stats] : assessed_outputs(device))
    for (const auto& [ename, estats] : emulated) {
      if (ename != name) continue;
      const Verdict v =
          judge_against_baseline(name, *stats, *estats, emulation_check_floor(*stats), policy);
      if (v.disposition != Disposition::passed) return v;
    }
  return device.verdict;
}

}  // namespace xentlab
