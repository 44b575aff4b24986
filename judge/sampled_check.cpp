// The judge of a run checked on sampled token rows (see sampled_check.hpp).
#include "judge/sampled_check.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "numerics/error.hpp"

namespace xentlab {
namespace {

void check_size(const char* name, std::size_t have, std::int64_t want) {
  if (static_cast<std::int64_t>(have) != want)
    throw InputError(
        fmt::format("assess_sampled_run: {} has {} values, the reference {}", name, have, want));
}

}  // namespace

RunAssessment assess_sampled_run(const Problem& sub, const LossSpec& spec, const Recipe& recipe,
                                 const DeclaredArithmetic& arith, const SampledOutputs& out,
                                 const ReferenceResult& ref, const Policy& policy) {
  const auto S = static_cast<std::int64_t>(ref.token_rows.size());
  const auto J = static_cast<std::int64_t>(ref.vocab_rows.size());
  const std::int64_t D = sub.D;
  if (S != sub.N)
    throw InputError(fmt::format(
        "assess_sampled_run: the reference holds {} of the sub-problem's {} rows", S, sub.N));
  if (!(std::isfinite(out.dH_scale) && out.dH_scale > 0))
    throw InputError(
        fmt::format("assess_sampled_run: dH_scale must be finite and > 0, got {}", out.dH_scale));
  check_size("loss", out.loss.size(), S);
  check_size("lse", out.lse.size(), S);
  if (!out.dH.empty()) check_size("dH", out.dH.size(), S * D);
  if (!out.dW.empty()) check_size("dW", out.dW.size(), J * D);

  RunAssessment ra;
  const auto t_bounds = std::chrono::steady_clock::now();
  ra.bounds = bounds_for_reference(sub, spec, recipe, arith, ref, 0, out.run_tokens);
  // dW comes from the run on the sub-problem's own S tokens.
  if (!out.dW.empty() && out.run_tokens > 0 && out.run_tokens != sub.N)
    ra.bounds.dW = bounds_for_reference(sub, spec, recipe, arith, ref).dW;
  // dH of a run whose gradient scale is dH_scale times the reference's: the reference's gradient
  // quantities rescaled, and the bounds of that run.
  ReferenceResult scaled;
  const bool rescale = !out.dH.empty() && !ref.dH.empty() && out.dH_scale != 1.0;
  if (rescale) {
    scaled = ref;
    scaled.dW = {};
    scaled.dW_cond = {};
    scaled.db.clear();
    for (double& x : scaled.grad_scale) x *= out.dH_scale;
    for (double& x : scaled.dH) x *= out.dH_scale;
    for (double& x : scaled.dH_cond) x *= out.dH_scale;
    ra.bounds.dH = bounds_for_reference(sub, spec, recipe, arith, scaled, 0, out.run_tokens).dH;
  }
  ra.bounds_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_bounds).count();
  const Bounds& b = ra.bounds;
  ra.loss = compute_error_stats(out.loss.data(), ref.loss.data(), S, out.loss_dtype, b.loss.data());
  ra.lse = compute_error_stats(out.lse.data(), ref.lse.data(), S, out.loss_dtype, b.lse.data());
  ra.reduced_loss =
      compute_error_stats(&out.reduced_loss, &ref.reduced_loss, 1, out.loss_dtype, &b.reduced_loss);
  std::vector<JudgedOutput> judged{
      {"loss", &ra.loss, true}, {"lse", &ra.lse, false}, {"reduced_loss", &ra.reduced_loss, false}};
  if (!out.dH.empty() && !ref.dH.empty()) {
    const HostArray<double>& dH_ref = rescale ? scaled.dH : ref.dH;
    ra.dH = compute_error_stats(out.dH.data(), dH_ref.data(), S * D, out.grad_dtype,
                                b.dH.empty() ? nullptr : b.dH.data());
    ra.has_dH = true;
    judged.push_back({"dH", &ra.dH, false});
  }
  if (!out.dW.empty() && !ref.dW.empty()) {
    ra.dW = compute_error_stats(out.dW.data(), ref.dW.data(), J * D, out.grad_dtype,
                                b.dW.empty() ? nullptr : b.dW.data());
    ra.has_dW = true;
    judged.push_back({"dW", &ra.dW, false});
  }
  ra.verdict = judge(judged, policy);
  return ra;
}

}  // namespace xentlab
