#include "numerics/loss_spec.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "numerics/error.hpp"

namespace xentlab {

void LossSpec::validate() const {
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
    throw InputError(fmt::format("label_smoothing must be in [0, 1], got {}", label_smoothing));
  if (!(z_loss >= 0.0) || !std::isfinite(z_loss))
    throw InputError(fmt::format("z_loss must be finite and >= 0, got {}", z_loss));
  if (!(softcap >= 0.0) || !std::isfinite(softcap))
    throw InputError(fmt::format("softcap must be finite and >= 0 (0 = off), got {}", softcap));
  if (!(logit_scale > 0.0) || !std::isfinite(logit_scale))
    throw InputError(fmt::format("logit_scale must be finite and > 0, got {}", logit_scale));
  // The strategies take these parameters as fp32 (or narrower) numbers: one that fp32 cannot hold
  // as a normal number would become 0 or inf there (a softcap of 1e-300 switched off, a logit scale
  // of 1e300 infinite) and blame the kernels for the parameter.
  const auto fp32_normal = [](double v) {
    return v >= static_cast<double>(std::numeric_limits<float>::min()) &&
           v <= static_cast<double>(std::numeric_limits<float>::max());
  };
  const auto check = [&](const char* name, double v, bool zero_ok) {
    if ((v == 0.0 && zero_ok) || fp32_normal(v)) return;
    throw InputError(fmt::format(
        "{} = {} is not a normal fp32 number (the strategies compute in fp32 or narrower): use "
        "{}a value in [{:.3g}, {:.3g}]",
        name, v, zero_ok ? "0 or " : "", static_cast<double>(std::numeric_limits<float>::min()),
        static_cast<double>(std::numeric_limits<float>::max())));
  };
  if (normalizer < 0)
    throw InputError(fmt::format(
        "normalizer must be >= 0 (a count of tokens; 0 = the batch's own valid rows), got {}",
        normalizer));
  if (normalizer > (std::int64_t{1} << 24))
    throw InputError(fmt::format(
        "normalizer = {} is above 2^24 = 16777216: the strategies hold the count in fp32 (the "
        "mean's division, 1/n), which represents every integer only up to 2^24",
        normalizer));
  if (normalizer > 0 && reduction != Reduction::mean)
    throw InputError(fmt::format(
        "normalizer = {} is given with reduction {}: a normaliser divides the sum of reduction "
        "mean only (use reduction mean, or no normalizer)",
        normalizer, to_string(reduction)));
  check("z_loss", z_loss, true);
  check("softcap", softcap, true);
  check("logit_scale", logit_scale, false);
}

std::string LossSpec::describe() const {
  return fmt::format(
      "{} ignore_index={} label_smoothing={} z_loss={} softcap={} logit_scale={}{}{}",
      to_string(reduction), ignore_index, label_smoothing, z_loss,
      softcap > 0 ? fmt::format("{}", softcap) : std::string("off"), logit_scale,
      empty_mean == EmptyMean::zero ? " empty_mean=zero" : "",
      normalizer > 0 ? fmt::format(" normalizer={}", normalizer) : std::string());
}

std::string_view to_string(Reduction r) {
  switch (r) {
    case Reduction::none:
      return "none";
    case Reduction::mean:
      return "mean";
    case Reduction::sum:
      return "sum";
  }
  return "?";
}

Reduction parse_reduction(std::string_view s) {
  if (s == "none") return Reduction::none;
  if (s == "mean") return Reduction::mean;
  if (s == "sum") return Reduction::sum;
  throw InputError("unknown reduction '" + std::string(s) + "' (expected none, mean or sum)");
}

}  // namespace xentlab
