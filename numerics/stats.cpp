// Error statistics of an output tensor against its reference (see stats.hpp for conventions).
#include "numerics/stats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "numerics/eft.hpp"
#include "numerics/error.hpp"
#include "numerics/ulp.hpp"

namespace xentlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Kind { finite, nan, posinf, neginf };
Kind kind_of(double x) {
  if (std::isnan(x)) return Kind::nan;
  if (x == kInf) return Kind::posinf;
  if (x == -kInf) return Kind::neginf;
  return Kind::finite;
}

// Nearest-rank order statistic: the ceil(q·n)-th smallest of v (v is reordered).
double order_statistic(std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  const auto n = static_cast<double>(v.size());
  auto rank = static_cast<std::size_t>(std::ceil(q * n));
  if (rank < 1) rank = 1;
  if (rank > v.size()) rank = v.size();
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank - 1), v.end());
  return v[rank - 1];
}

}  // namespace

// ---- Histogram ----------------------------------------------------------------------------------

int Histogram::bin_of(double x) {
  int e = std::ilogb(x);  // floor(log2 x) for finite x > 0, exact
  if (e < kMinExp) return -1;
  if (e >= kMaxExp) return kBins;
  return e - kMinExp;
}

double Histogram::bin_lower(int k) {
  return std::ldexp(1.0, kMinExp + k);
}

void Histogram::add(double x) {
  if (std::isnan(x)) {
    ++nan;
    return;
  }
  const double a = std::fabs(x);
  if (a == 0.0) {
    ++zero;
    return;
  }
  if (a == kInf) {
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

void Histogram::merge(const Histogram& o) {
  zero += o.zero;
  underflow += o.underflow;
  overflow += o.overflow;
  nan += o.nan;
  for (int k = 0; k < kBins; ++k)
    bins[static_cast<std::size_t>(k)] += o.bins[static_cast<std::size_t>(k)];
}

std::int64_t Histogram::total() const {
  std::int64_t t = zero + underflow + overflow + nan;
  for (auto c : bins) t += c;
  return t;
}

double Histogram::quantile_upper(double q) const {
  if (!(q > 0.0 && q <= 1.0))
    throw InputError(fmt::format("Histogram::quantile_upper: q = {} is not in (0, 1]", q));
  const std::int64_t tot = total();
  if (tot == 0) return 0.0;
  auto rank = static_cast<std::int64_t>(std::ceil(q * static_cast<double>(tot)));
  if (rank < 1) rank = 1;
  std::int64_t seen = zero;
  if (rank <= seen) return 0.0;
  seen += underflow;
  if (rank <= seen) return std::ldexp(1.0, kMinExp);
  for (int k = 0; k < kBins; ++k) {
    seen += bins[static_cast<std::size_t>(k)];
    if (rank <= seen) return bin_lower(k + 1);
  }
  return kInf;  // overflow or NaN bins
}

// ---- ErrorStats ---------------------------------------------------------------------------------

std::string ErrorStats::summary() const {
  std::string s = fmt::format(
      "n={} nonfinite(out nan/+inf/-inf={}/{}/{}, mismatches={}) max|e|={:.3e} at {} (out {:.17g}, "
      "ref {:.17g}) rms={:.3e} mean|e|={:.3e} max_rel={:.3e} normwise={:.3e} ulp0={:.1f}% "
      "ulp<=1={:.1f}% ulp<=4={:.1f}% max_ulp={:.0f} bias={:.3e}±{:.1e} p99={:.3e}",
      n, out_nan, out_posinf, out_neginf, finiteness_mismatches, max_abs_err, max_abs_err_index,
      max_abs_err_out, max_abs_err_ref, rms_abs_err, mean_abs_err, max_rel_err, normwise_rel_err,
      100 * frac_ulp_0, 100 * frac_ulp_le1, 100 * frac_ulp_le4, max_ulp, bias, bias_stderr, p99);
  if (has_bounds)
    s += fmt::format(" max_ratio={:.3g} (|e| {:.3e} / bound {:.3e} at {}) over_bound={}", max_ratio,
                     max_ratio_err, max_ratio_bound, max_ratio_index, n_over_bound);
  return s;
}

ErrorStats compute_error_stats(const double* out, const double* ref, std::int64_t n,
                               DType out_dtype, const double* bound, const StatsOptions& opt) {
  if (n < 0) throw InputError(fmt::format("compute_error_stats: negative element count {}", n));
  if (n > 0 && (out == nullptr || ref == nullptr))
    throw InputError("compute_error_stats: null out or ref array with n > 0");
  ErrorStats st;
  st.n = n;
  st.out_dtype = out_dtype;
  st.has_bounds = bound != nullptr;
  if (n == 0) return st;

  // Pass 1: kinds, max |ref| (for the relative floor).
  double max_abs_ref = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const Kind ko = kind_of(out[i]), kr = kind_of(ref[i]);
    st.out_nan += ko == Kind::nan;
    st.out_posinf += ko == Kind::posinf;
    st.out_neginf += ko == Kind::neginf;
    st.ref_nan += kr == Kind::nan;
    st.ref_posinf += kr == Kind::posinf;
    st.ref_neginf += kr == Kind::neginf;
    if (ko != kr) {
      ++st.finiteness_mismatches;
      if (st.first_mismatch_index < 0) st.first_mismatch_index = i;
      if (kr == Kind::finite) ++st.nonfinite_where_ref_finite;
    }
    if (kr == Kind::finite) max_abs_ref = std::max(max_abs_ref, std::fabs(ref[i]));
    if (bound != nullptr && std::isnan(bound[i]))
      throw InputError(fmt::format("compute_error_stats: bound[{}] is NaN", i));
  }
  st.rel_floor = std::max(opt.rel_floor_abs, opt.rel_floor_rel * max_abs_ref);

  eft::CompensatedSum sum_e, sum_abs, sum_sq, sum_ref_sq, sum_rel, sum_out, sum_ref, sum_b2, sum_b;
  std::int64_t n_finite_bound = 0;
  std::vector<double> abs_err, ratios;
  abs_err.reserve(static_cast<std::size_t>(n));
  if (bound) ratios.reserve(static_cast<std::size_t>(n));
  std::int64_t ulp0 = 0, ulp1 = 0, ulp2 = 0, ulp4 = 0;

  for (std::int64_t i = 0; i < n; ++i) {
    const double o = out[i], r = ref[i];
    // ULP statistics: against the correctly rounded reference, NaN excluded; an infinity on one
    // side only is a finiteness mismatch unless rounding the reference also gives that infinity.
    if (!std::isnan(o) && !std::isnan(r)) {
      const double rr = round_to(r, out_dtype);
      const bool comparable = (std::isfinite(o) || std::isfinite(rr) || o == rr);
      if (comparable) {
        const double d = ulp_distance(o, rr, out_dtype);
        ++st.ulp_count;
        ulp0 += d == 0.0;
        ulp1 += d <= 1.0;
        ulp2 += d <= 2.0;
        ulp4 += d <= 4.0;
        if (d > st.max_ulp || st.max_ulp_index < 0) {
          st.max_ulp = d;
          st.max_ulp_index = i;
        }
      }
    }
    if (!std::isfinite(o) || !std::isfinite(r)) {
      if (bound && std::isinf(bound[i])) ++st.n_infinite_bound;
      continue;
    }
    ++st.n_finite_pairs;
    const double e = o - r;  // exact? not always; |fl(o−r) − (o−r)| ≤ u_64·|o−r|, negligible
    const double ae = std::fabs(e);
    sum_e.add(e);
    sum_abs.add(ae);
    sum_sq.add(e * e);
    sum_ref_sq.add(r * r);
    sum_out.add(o);
    sum_ref.add(r);
    abs_err.push_back(ae);
    if (ae > st.max_abs_err || st.max_abs_err_index < 0) {
      st.max_abs_err = ae;
      st.max_abs_err_index = i;
      st.max_abs_err_out = o;
      st.max_abs_err_ref = r;
    }
    const double denom = std::max(std::fabs(r), st.rel_floor);
    const double rel = denom > 0 ? ae / denom : (ae > 0 ? kInf : 0.0);
    sum_rel.add(rel);
    if (rel > st.max_rel_err || st.max_rel_err_index < 0) {
      st.max_rel_err = rel;
      st.max_rel_err_index = i;
    }
    if (opt.keep_histograms) {
      st.abs_err_hist.add(ae);
      st.rel_err_hist.add(rel);
    }
    if (bound) {
      const double b = bound[i];
      if (std::isinf(b))
        ++st.n_infinite_bound;
      else {
        sum_b2.add(b * b);
        sum_b.add(b);
        ++n_finite_bound;
      }
      const double ratio = b > 0 ? ae / b : (ae > 0 ? kInf : 0.0);
      ratios.push_back(ratio);
      st.n_over_bound += ae > b;
      if (opt.keep_histograms) st.ratio_hist.add(ratio);
      if (ratio > st.max_ratio || st.max_ratio_index < 0) {
        st.max_ratio = ratio;
        st.max_ratio_index = i;
        st.max_ratio_err = ae;
        st.max_ratio_bound = b;
      }
    }
  }

  const auto m = static_cast<double>(st.n_finite_pairs);
  if (st.n_finite_pairs > 0) {
    st.mean_abs_err = sum_abs.value() / m;
    st.rms_abs_err = std::sqrt(sum_sq.value() / m);
    st.mean_rel_err = sum_rel.value() / m;
    st.bias = sum_e.value() / m;
    st.mean_out = sum_out.value() / m;
    st.mean_ref = sum_ref.value() / m;
    st.mean_value_err = st.mean_out - st.mean_ref;
    const double ne = std::sqrt(sum_sq.value()), nr = std::sqrt(sum_ref_sq.value());
    st.normwise_rel_err = nr > 0 ? ne / nr : (ne > 0 ? kInf : 0.0);
    if (st.n_finite_pairs > 1) {
      eft::CompensatedSum dev;
      for (std::int64_t i = 0; i < n; ++i)
        if (std::isfinite(out[i]) && std::isfinite(ref[i])) {
          const double d = (out[i] - ref[i]) - st.bias;
          dev.add(d * d);
        }
      st.bias_stderr = std::sqrt(dev.value() / (m - 1) / m);
    }
    st.sqrt_sum_bound_sq = std::sqrt(sum_b2.value());
    if (n_finite_bound > 0) st.mean_bound = sum_b.value() / static_cast<double>(n_finite_bound);
  }
  if (st.ulp_count > 0) {
    const auto u = static_cast<double>(st.ulp_count);
    st.frac_ulp_0 = static_cast<double>(ulp0) / u;
    st.frac_ulp_le1 = static_cast<double>(ulp1) / u;
    st.frac_ulp_le2 = static_cast<double>(ulp2) / u;
    st.frac_ulp_le4 = static_cast<double>(ulp4) / u;
  }
  st.pmax = st.max_abs_err;
  st.p50 = order_statistic(abs_err, 0.5);
  st.p90 = order_statistic(abs_err, 0.9);
  st.p99 = order_statistic(abs_err, 0.99);
  st.p999 = order_statistic(abs_err, 0.999);
  if (bound) st.p99_ratio = order_statistic(ratios, 0.99);
  return st;
}

}  // namespace xentlab
