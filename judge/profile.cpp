// Error profiles (judge/profile.hpp).
#include "judge/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "judge/policy.hpp"
#include "numerics/error.hpp"
#include "numerics/ulp.hpp"

namespace xentlab {
namespace {

std::size_t sz(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// Nearest-rank q-quantile of v (v is reordered).
double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  k = std::min(std::max<std::size_t>(k, 1), v.size()) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

int ulp_bucket(double d) {
  if (d < 1) return 0;
  if (d < 2) return 1;
  const int b = 1 + static_cast<int>(std::floor(std::log2(d)));
  return std::min(b, kUlpBuckets - 1);
}

}  // namespace

ErrorProfile error_profile(const double* out, const double* ref, std::int64_t n, DType ulp_dtype) {
  if (n < 0) throw InputError(fmt::format("error_profile: n = {} < 0", n));
  ErrorProfile p;
  p.ulp_dtype = ulp_dtype;
  double max_ref = 0;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::isfinite(ref[i])) max_ref = std::max(max_ref, std::fabs(ref[i]));
  p.rel_floor = 0x1p-20 * max_ref;
  std::vector<double> rel;
  rel.reserve(sz(n));
  // Sums of squares scaled by max|ref| (no overflow); the profile's own rounding (relative
  // ~n·u_fp64) is far below any error it measures.
  const double s = max_ref > 0 ? 1.0 / max_ref : 1.0;
  double ee = 0, rr = 0, se = 0, er = 0, er2 = 0;
  std::array<std::int64_t, kUlpBuckets> hist{};
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i]) || !std::isfinite(ref[i])) continue;
    const double e = out[i] - ref[i];
    ee += (e * s) * (e * s);
    rr += (ref[i] * s) * (ref[i] * s);
    er += (e * s) * (ref[i] * s);
    er2 += ((e * s) * (ref[i] * s)) * ((e * s) * (ref[i] * s));
    se += e;
    // 0/0 (an exact value where the reference and its floor are 0) is an error of 0.
    rel.push_back(e == 0 ? 0.0 : std::fabs(e) / std::max(std::fabs(ref[i]), p.rel_floor));
    ++hist[sz(ulp_bucket(ulp_distance(out[i], ref[i], ulp_dtype)))];
  }
  p.n = static_cast<std::int64_t>(rel.size());
  p.max_ref = max_ref;
  p.norm_ref = max_ref * std::sqrt(rr);
  p.normwise = rr > 0 ? std::sqrt(ee / rr) : (ee > 0 ? INFINITY : 0.0);
  p.scale = rr > 0 ? er / rr : 0.0;
  p.scale_spread = rr > 0 ? std::sqrt(er2) / rr : 0.0;
  if (p.n > 0) {
    p.bias = rr > 0 ? (se / static_cast<double>(p.n)) / (p.norm_ref / std::sqrt(double(p.n))) : 0.0;
    for (int b = 0; b < kUlpBuckets; ++b)
      p.ulp_hist[sz(b)] = static_cast<double>(hist[sz(b)]) / static_cast<double>(p.n);
    p.rel_q = quantile(rel, kDifferentialQuantile);
    p.rel_p50 = quantile(rel, 0.5);
    p.rel_p99 = quantile(rel, 0.99);
    p.rel_max = *std::max_element(rel.begin(), rel.end());
  }
  return p;
}

}  // namespace xentlab
