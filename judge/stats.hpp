#pragma once
// Error statistics of one output tensor against its reference (shared NUMERICS.md §4).
//
// Inputs are plain arrays of doubles: `out` holds the values as the implementation returned them
// (each converted exactly to double from its dtype `out_dtype`), `ref` the reference values
// (float64, e.g. ReferenceResult), `bound` optional per-element a-priori error bounds
// (judge/bounds.hpp). Element i is the pair (out[i], ref[i]); e_i = out[i] − ref[i].
//
// Conventions (every one is tested in tests/judge/stats.cpp):
//  - Non-finite values are never skipped silently. They are counted (NaN, +Inf, −Inf, separately
//    for out and ref) and compared by kind: a "finiteness mismatch" is a pair whose kinds differ
//    (finite vs NaN vs +Inf vs −Inf). A pair where both are the same infinity, or both NaN, agrees.
//    All error magnitudes (max, RMS, mean, percentiles, relative, normwise, bias, ratios) are taken
//    over the pairs where both values are finite (`n_finite_pairs`).
//  - ±0: +0 and −0 compare equal (error 0, 0 ULP).
//  - ULP distance (numerics/ulp.hpp): between out and the correctly rounded reference
//    round_to(ref, out_dtype), counted in representable values of out_dtype, over pairs where both
//    are not NaN and at least one of them is finite or they are the same infinity (an infinity
//    counts as one step past the largest finite value). `out` values that are not representable in
//    out_dtype are rounded first (a fractional distance is never reported).
//  - Relative error: |e_i| / max(|ref_i|, floor) with floor = max(options.rel_floor_abs,
//    options.rel_floor_rel · max_i |ref_i|) (max over finite ref values), so near-zero reference
//    entries do not dominate.
//  - Normwise relative error ‖e‖₂/‖ref‖₂ over finite pairs; 0 when both norms are 0, +Inf when only
//    ‖ref‖₂ is 0.
//  - Bias: mean signed error over finite pairs, with its standard error sqrt(var(e)/n) (n−1
//    denominator), and the error of the batch mean mean(out) − mean(ref) (compensated sums).
//  - Percentiles of |e| are exact order statistics (nearest rank, ceil(q·n)-th smallest).
//  - Empty input (n = 0): every count 0, every error 0, fractions 0, `n = 0`; no exception.
// All sums are compensated (Ogita–Rump–Oishi Sum2, numerics/eft.hpp) so that the statistics
// themselves carry no visible rounding error.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "numerics/dtype.hpp"

namespace xentlab {

/// Histogram with fixed log2 bins, so histograms of different runs, tensors or threads can be
/// merged by adding counts. Bin layout (same for every histogram):
///   zero          — values exactly 0 (or −0)
///   bin k         — values in [2^(kMinExp + k), 2^(kMinExp + k + 1)), k = 0 … kBins − 1
///   underflow     — finite values in (0, 2^kMinExp)
///   overflow      — finite values ≥ 2^kMaxExp, and +Inf
///   nan           — NaN
/// Negative inputs are binned by their magnitude (histograms of |e|, ratios, relative errors).
class Histogram {
 public:
  static constexpr int kMinExp = -160;  ///< below every fp32/fp16/bf16 subnormal (2^-149)
  static constexpr int kMaxExp = 64;
  static constexpr int kBins = kMaxExp - kMinExp;

  inline void add(double x);
  /// Adds the counts of another histogram (commutative and associative).
  void merge(const Histogram& other);
  std::int64_t total() const;

  std::int64_t zero = 0, underflow = 0, overflow = 0, nan = 0;
  std::array<std::int64_t, kBins> bins{};

  /// Lower edge 2^(kMinExp + k) of bin k.
  static double bin_lower(int k);
  /// Index of the bin holding finite x > 0 with 2^kMinExp ≤ x < 2^kMaxExp; −1 below, kBins above.
  static int bin_of(double x) {
    // floor(log2 x), exact, from the exponent field (ilogb's value for normal doubles; a
    // subnormal double is far below 2^kMinExp).
    std::uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    const int field = static_cast<int>((b >> 52) & 0x7FF);
    if (field == 0) return -1;
    const int e = field - 1023;
    if (e < kMinExp) return -1;
    if (e >= kMaxExp) return kBins;
    return e - kMinExp;
  }
  /// Upper bound on the q-quantile (0 < q ≤ 1) of the binned values: the upper edge of the bin
  /// holding the ceil(q·total)-th smallest value (0 when it is in the zero bin, +Inf for overflow
  /// or NaN bins). Throws InputError for q outside (0, 1].
  double quantile_upper(double q) const;
};

inline void Histogram::add(double x) {
  if (std::isnan(x)) {
    ++nan;
    return;
  }
  const double a = std::fabs(x);
  if (a == 0.0) {
    ++zero;
    return;
  }
  if (a == std::numeric_limits<double>::infinity()) {
    ++overflow;
    return;
  }
  const int b = bin_of(a);
  if (b < 0)
    ++underflow;
  else if (b >= kBins)
    ++overflow;
  else
    ++bins[static_cast<std::size_t>(b)];
}

struct StatsOptions {
  double rel_floor_abs = 0.0;      ///< absolute floor of the relative error's denominator
  double rel_floor_rel = 0x1p-20;  ///< floor relative to max|ref| (about 1e-6)
  bool keep_histograms = true;     ///< fill abs_err_hist / rel_err_hist / ratio_hist
  /// When given: receives the counts of |e| (err) and of the ratios |e|/bound (ratio, with
  /// bounds) per 16-bit prefix of their bit patterns (kStatsBuckets each), which BlockedErrorStats
  /// merges into percentiles over blocks.
  struct PrefixCounts* prefix_counts = nullptr;
};

/// Buckets of the percentile selection: the top 16 bits of a non-negative double's bit pattern
/// (sign, exponent and 4 bits of the significand), so a bucket spans a relative 2^-4.
inline constexpr std::size_t kStatsBuckets = std::size_t{1} << 16;
struct PrefixCounts {
  std::vector<std::int64_t> err, ratio;
};

/// Statistics of out vs ref (see the file comment for every convention).
struct ErrorStats {
  std::int64_t n = 0;  ///< elements compared
  DType out_dtype = DType::fp32;

  // Non-finite values and finiteness mismatches.
  std::int64_t out_nan = 0, out_posinf = 0, out_neginf = 0;
  std::int64_t ref_nan = 0, ref_posinf = 0, ref_neginf = 0;
  std::int64_t finiteness_mismatches = 0;  ///< pairs whose kinds (finite/NaN/+Inf/−Inf) differ
  std::int64_t nonfinite_where_ref_finite = 0;  ///< out non-finite, ref finite (always a failure)
  std::int64_t first_mismatch_index = -1;       ///< first pair counted in finiteness_mismatches
  std::int64_t n_finite_pairs = 0;              ///< pairs where both are finite

  // Absolute error over finite pairs.
  double max_abs_err = 0.0;
  std::int64_t max_abs_err_index = -1;                  ///< first index attaining max_abs_err
  double max_abs_err_out = 0.0, max_abs_err_ref = 0.0;  ///< both values at that index
  double rms_abs_err = 0.0;                             ///< sqrt(Σe²/n_finite_pairs)
  double mean_abs_err = 0.0;

  // Relative error |e|/max(|ref|, rel_floor).
  double rel_floor = 0.0;  ///< the floor used
  double max_rel_err = 0.0;
  std::int64_t max_rel_err_index = -1;
  double mean_rel_err = 0.0;
  double normwise_rel_err = 0.0;            ///< ‖e‖₂/‖ref‖₂
  double err_norm2 = 0.0, ref_norm2 = 0.0;  ///< Σe² and Σref² over finite pairs

  // ULP distance to the correctly rounded reference in out_dtype.
  std::int64_t ulp_count = 0;  ///< pairs that entered the ULP statistics
  double frac_ulp_0 = 0.0, frac_ulp_le1 = 0.0, frac_ulp_le2 = 0.0, frac_ulp_le4 = 0.0;
  double max_ulp = 0.0;  ///< as double (distances may exceed 2^53 only for fp64)
  std::int64_t max_ulp_index = -1;

  // Bias.
  double bias = 0.0;                      ///< mean signed error Σe/n (over finite pairs)
  double bias_stderr = 0.0;               ///< sqrt(Σ(e − bias)²/(n−1)/n); 0 when n < 2
  double mean_out = 0.0, mean_ref = 0.0;  ///< means over finite pairs
  double mean_value_err = 0.0;            ///< mean(out) − mean(ref): error of the batch mean

  // Percentiles of |e| (exact order statistics over finite pairs; see percentiles_exact).
  double p50 = 0.0, p90 = 0.0, p99 = 0.0, p999 = 0.0, pmax = 0.0;
  /// false for statistics merged over blocks (BlockedErrorStats): p50…p999 and p99_ratio are then
  /// the upper edge of the 16-bit prefix bucket holding the order statistic (at most a relative
  /// 2^-4 above it, never below); pmax stays exact.
  bool percentiles_exact = true;

  // Ratio |e_i| / bound_i (only when bounds were given; has_bounds says so).
  bool has_bounds = false;
  double max_ratio = 0.0;  ///< +Inf if some |e| > 0 has bound 0; finite pairs only
  std::int64_t max_ratio_index = -1;
  double max_ratio_err = 0.0, max_ratio_bound = 0.0;  ///< |e| and bound at max_ratio_index
  double p99_ratio = 0.0;
  std::int64_t n_over_bound = 0;      ///< elements with |e| > bound
  std::int64_t n_infinite_bound = 0;  ///< elements whose bound is +Inf (no meaningful bound)
  double sqrt_sum_bound_sq = 0.0;     ///< sqrt(Σ bound²) over finite pairs with finite bound
  double mean_bound = 0.0;            ///< Σ bound / count over finite pairs with finite bound

  Histogram abs_err_hist;  ///< |e| over finite pairs
  Histogram rel_err_hist;  ///< relative errors
  Histogram ratio_hist;    ///< |e|/bound

  /// One line: "n=… nonfinite=… max|e|=… at i (out …, ref …) rms=… rel=… normwise=… ulp≤1=…%
  /// max_ulp=… bias=… ratio=…".
  std::string summary() const;
};

/// Statistics of out (n values, returned in out_dtype) against ref (n values). bound may be null;
/// otherwise n non-negative bounds (NaN bound → InputError, +Inf allowed). Throws InputError for
/// n < 0 or null out/ref with n > 0.
ErrorStats compute_error_stats(const double* out, const double* ref, std::int64_t n,
                               DType out_dtype, const double* bound = nullptr,
                               const StatsOptions& options = {});

/// The statistics of one output computed block by block (e.g. token rows audited in blocks so that
/// no whole S×V array is held): add each block's statistics, computed with the same
/// StatsOptions (a relative floor given absolutely, rel_floor_abs = 2^-20·max|ref| over every
/// block, so the blocks share the floor) and its prefix_counts, with the flat index of its first
/// element. finish() gives the statistics of the concatenation: counts, maxima (first index
/// attaining them) and histograms exactly as compute_error_stats; means, norms and the bias's
/// standard error (Chan's pairwise update) to rounding; percentiles as the upper edge of their
/// bucket (percentiles_exact = false).
class BlockedErrorStats {
 public:
  void add(const ErrorStats& block, const PrefixCounts& counts, std::int64_t first_index);
  ErrorStats finish() const;

 private:
  ErrorStats acc_;
  PrefixCounts counts_;
  bool any_ = false;
  double sum_abs_ = 0, sum_rel_ = 0, sum_e_ = 0, sum_out_ = 0, sum_ref_ = 0, m2_ = 0;
  double sum_b2_ = 0, sum_b_ = 0, n_finite_bound_ = 0;
  double ulp0_ = 0, ulp1_ = 0, ulp2_ = 0, ulp4_ = 0;
};

}  // namespace xentlab
