#pragma once
// The error profile of one output against a reference: what the baseline-relative criterion
// (judge/differential.hpp compare_with_baseline) and `--explain` compare — normwise error,
// quantiles of the element-wise relative error, bias, the projection on the reference (scale)
// and a histogram of ULP distances.
#include <array>
#include <cstdint>

#include "numerics/dtype.hpp"

namespace xentlab {

/// Buckets of the ULP histogram of ErrorProfile: distance 0, 1, [2,4), [4,8), …, ≥ 2^(n−2).
inline constexpr int kUlpBuckets = 24;

/// The error profile of one output against the certified reference: what the differential check
/// and `--explain` compare. Computed over the pairs where both values are finite.
struct ErrorProfile {
  std::int64_t n = 0;   ///< elements compared
  double normwise = 0;  ///< ‖e‖₂/‖ref‖₂ (0 when both are 0)
  double rel_q = 0;     ///< kDifferentialQuantile-quantile of |e_i|/max(|ref_i|, rel_floor)
  double rel_p50 = 0, rel_p99 = 0;
  double rel_max = 0;    ///< the largest element-wise relative error
  double rel_floor = 0;  ///< 2^-20·max|ref| (as judge/stats.hpp)
  double bias = 0;       ///< mean signed error / rms(ref): a systematic shift, dimensionless
  /// The error's projection on the reference, ⟨e, ref⟩/⟨ref, ref⟩: the relative scale error of
  /// an output off by a factor 1 + s (s exactly), ~0 for rounding errors (dimensionless).
  double scale = 0;
  /// Its spread were the errors independent: ‖e∘ref‖₂/‖ref‖₂² (the standard deviation of
  /// `scale` for independent zero-mean errors of the measured sizes; dimensionless).
  double scale_spread = 0;
  double max_ref = 0, norm_ref = 0;            ///< max|ref_i| and ‖ref‖₂
  DType ulp_dtype = DType::fp32;               ///< the format the ULP distances are counted in
  std::array<double, kUlpBuckets> ulp_hist{};  ///< fractions of elements per ULP bucket
};
/// The profile of out (n values) against ref, ULP distances counted in ulp_dtype (out rounded
/// into it first). Throws InputError for n < 0.
ErrorProfile error_profile(const double* out, const double* ref, std::int64_t n, DType ulp_dtype);

}  // namespace xentlab
