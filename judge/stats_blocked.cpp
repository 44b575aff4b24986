// Statistics of an output computed block by block (stats.hpp, BlockedErrorStats).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "judge/stats.hpp"

namespace xentlab {
namespace {

// The upper edge of the bucket holding the ceil(q·n)-th smallest value (nearest rank), capped by
// the largest value (exact): an upper bound on the order statistic within a relative 2^-4.
double bucket_quantile(const std::vector<std::int64_t>& counts, std::int64_t n, double q,
                       double max_value) {
  if (n <= 0 || counts.empty()) return 0.0;
  auto rank = static_cast<std::int64_t>(std::ceil(q * static_cast<double>(n)));
  rank = std::clamp<std::int64_t>(rank, 1, n);
  std::int64_t seen = 0;
  for (std::size_t b = 0; b < counts.size(); ++b) {
    seen += counts[b];
    if (seen >= rank) {
      const std::uint64_t bits = static_cast<std::uint64_t>(b + 1) << 48;
      double edge;
      std::memcpy(&edge, &bits, sizeof edge);
      return std::min(edge, max_value);
    }
  }
  return max_value;
}

void add_counts(std::vector<std::int64_t>& into, const std::vector<std::int64_t>& from) {
  if (from.empty()) return;
  if (into.empty()) into.assign(from.size(), 0);
  for (std::size_t b = 0; b < from.size(); ++b) into[b] += from[b];
}

}  // namespace

void BlockedErrorStats::add(const ErrorStats& s, const PrefixCounts& counts,
                            std::int64_t first_index) {
  ErrorStats& a = acc_;
  const auto shift = [first_index](std::int64_t i) { return i < 0 ? i : i + first_index; };
  if (!any_) {
    a.out_dtype = s.out_dtype;
    a.has_bounds = s.has_bounds;
    a.rel_floor = s.rel_floor;
    any_ = true;
  }
  a.n += s.n;
  a.out_nan += s.out_nan, a.out_posinf += s.out_posinf, a.out_neginf += s.out_neginf;
  a.ref_nan += s.ref_nan, a.ref_posinf += s.ref_posinf, a.ref_neginf += s.ref_neginf;
  a.finiteness_mismatches += s.finiteness_mismatches;
  a.nonfinite_where_ref_finite += s.nonfinite_where_ref_finite;
  if (a.first_mismatch_index < 0) a.first_mismatch_index = shift(s.first_mismatch_index);
  a.rel_floor = std::max(a.rel_floor, s.rel_floor);
  // Maxima: a later block wins only when strictly larger (the first index attaining them).
  if (s.max_abs_err_index >= 0 && (a.max_abs_err_index < 0 || s.max_abs_err > a.max_abs_err))
    a.max_abs_err = s.max_abs_err, a.max_abs_err_index = shift(s.max_abs_err_index),
    a.max_abs_err_out = s.max_abs_err_out, a.max_abs_err_ref = s.max_abs_err_ref;
  if (s.max_rel_err_index >= 0 && (a.max_rel_err_index < 0 || s.max_rel_err > a.max_rel_err))
    a.max_rel_err = s.max_rel_err, a.max_rel_err_index = shift(s.max_rel_err_index);
  if (s.max_ulp_index >= 0 && (a.max_ulp_index < 0 || s.max_ulp > a.max_ulp))
    a.max_ulp = s.max_ulp, a.max_ulp_index = shift(s.max_ulp_index);
  if (s.max_ratio_index >= 0 && (a.max_ratio_index < 0 || s.max_ratio > a.max_ratio))
    a.max_ratio = s.max_ratio, a.max_ratio_index = shift(s.max_ratio_index),
    a.max_ratio_err = s.max_ratio_err, a.max_ratio_bound = s.max_ratio_bound;
  a.n_over_bound += s.n_over_bound;
  a.n_infinite_bound += s.n_infinite_bound;
  a.abs_err_hist.merge(s.abs_err_hist);
  a.rel_err_hist.merge(s.rel_err_hist);
  a.ratio_hist.merge(s.ratio_hist);
  add_counts(counts_.err, counts.err);
  add_counts(counts_.ratio, counts.ratio);
  // Sums from the block's means (one rounding each); the bias's M2 by Chan's update.
  const auto m = static_cast<double>(s.n_finite_pairs);
  const auto m0 = static_cast<double>(a.n_finite_pairs);
  if (m > 0) {
    const double block_m2 = m > 1 ? s.bias_stderr * s.bias_stderr * m * (m - 1) : 0.0;
    const double mean0 = m0 > 0 ? sum_e_ / m0 : 0.0;
    const double delta = s.bias - mean0;
    m2_ += block_m2 + (m0 > 0 ? delta * delta * m0 * m / (m0 + m) : 0.0);
    sum_abs_ += s.mean_abs_err * m;
    sum_rel_ += s.mean_rel_err * m;
    sum_e_ += s.bias * m;
    sum_out_ += s.mean_out * m;
    sum_ref_ += s.mean_ref * m;
    a.err_norm2 += s.err_norm2;
    a.ref_norm2 += s.ref_norm2;
    sum_b2_ += s.sqrt_sum_bound_sq * s.sqrt_sum_bound_sq;
    const double nb = static_cast<double>(s.n_finite_pairs - s.n_infinite_bound);
    sum_b_ += s.mean_bound * nb;
    n_finite_bound_ += nb;
  }
  a.n_finite_pairs += s.n_finite_pairs;
  const auto u = static_cast<double>(s.ulp_count);
  ulp0_ += std::round(s.frac_ulp_0 * u), ulp1_ += std::round(s.frac_ulp_le1 * u);
  ulp2_ += std::round(s.frac_ulp_le2 * u), ulp4_ += std::round(s.frac_ulp_le4 * u);
  a.ulp_count += s.ulp_count;
}

ErrorStats BlockedErrorStats::finish() const {
  ErrorStats st = acc_;
  st.percentiles_exact = false;
  const auto m = static_cast<double>(st.n_finite_pairs);
  if (st.n_finite_pairs > 0) {
    st.mean_abs_err = sum_abs_ / m;
    st.rms_abs_err = std::sqrt(st.err_norm2 / m);
    st.mean_rel_err = sum_rel_ / m;
    st.bias = sum_e_ / m;
    st.mean_out = sum_out_ / m;
    st.mean_ref = sum_ref_ / m;
    st.mean_value_err = st.mean_out - st.mean_ref;
    const double ne = std::sqrt(st.err_norm2), nr = std::sqrt(st.ref_norm2);
    st.normwise_rel_err = nr > 0 ? ne / nr : (ne > 0 ? INFINITY : 0.0);
    st.bias_stderr = st.n_finite_pairs > 1 ? std::sqrt(m2_ / (m - 1) / m) : 0.0;
    st.sqrt_sum_bound_sq = std::sqrt(sum_b2_);
    st.mean_bound = n_finite_bound_ > 0 ? sum_b_ / n_finite_bound_ : 0.0;
  }
  if (st.ulp_count > 0) {
    const auto u = static_cast<double>(st.ulp_count);
    st.frac_ulp_0 = ulp0_ / u, st.frac_ulp_le1 = ulp1_ / u;
    st.frac_ulp_le2 = ulp2_ / u, st.frac_ulp_le4 = ulp4_ / u;
  }
  st.pmax = st.max_abs_err;
  const std::int64_t n = st.n_finite_pairs;
  st.p50 = bucket_quantile(counts_.err, n, 0.5, st.max_abs_err);
  st.p90 = bucket_quantile(counts_.err, n, 0.9, st.max_abs_err);
  st.p99 = bucket_quantile(counts_.err, n, 0.99, st.max_abs_err);
  st.p999 = bucket_quantile(counts_.err, n, 0.999, st.max_abs_err);
  if (st.has_bounds) st.p99_ratio = bucket_quantile(counts_.ratio, n, 0.99, st.max_ratio);
  return st;
}

}  // namespace xentlab
