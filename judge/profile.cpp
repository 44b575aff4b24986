// Error profiles (judge/profile.hpp).
#include "judge/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "judge/policy.hpp"
#include "numerics/error.hpp"
#include "numerics/ulp.hpp"

namespace xentlab {
namespace {

std::size_t sz(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// Nearest-rank q-quantile of v (v is reordered), given that v[from..) holds every element not
// below v[from] (from = 0: none known); from is set to the quantile's rank, so that quantiles
// taken in increasing order each select only among the elements above the previous one.
double quantile_from(double* v, std::size_t n, std::size_t& from, double q) {
  if (n == 0) return 0.0;
  auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(n)));
  k = std::min(std::max<std::size_t>(k, 1), n) - 1;
  k = std::max(k, from);
  std::nth_element(v + from, v + k, v + n);
  from = k;
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
  // Blocks of a fixed size, in parallel; the blocks' partial sums are added in block order, so
  // the profile is the same on any number of threads (its sums' rounding, relative ~n·u_fp64, is
  // far below any error it measures). The elements' relative errors go to their block's place.
  constexpr std::int64_t kBlock = std::int64_t{1} << 16;
  const std::int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> block_max(sz(nb), 0.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < nb; ++b) {
    double m = 0;
    for (std::int64_t i = b * kBlock, e = std::min(n, i + kBlock); i < e; ++i)
      if (std::isfinite(ref[i])) m = std::max(m, std::fabs(ref[i]));
    block_max[sz(b)] = m;
  }
  double max_ref = 0;
  for (const double m : block_max) max_ref = std::max(max_ref, m);
  p.rel_floor = 0x1p-20 * max_ref;
  // Sums of squares scaled by max|ref| (no overflow).
  const double s = max_ref > 0 ? 1.0 / max_ref : 1.0;
  struct Partial {
    double ee = 0, rr = 0, se = 0, er = 0, er2 = 0;
    std::int64_t count = 0;
    std::array<std::int64_t, kUlpBuckets> hist{};
  };
  std::vector<Partial> part(sz(nb));
  // Not value-initialised: every element read is written first (5·10⁸ of them at the
  // Llama-3-8B head's dW).
  const std::unique_ptr<double[]> rel_buffer(new double[sz(std::max<std::int64_t>(n, 1))]);
  double* const rel = rel_buffer.get();
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < nb; ++b) {
    Partial& q = part[sz(b)];
    double* r = rel + b * kBlock;  // this block's finite elements, packed at its start
    for (std::int64_t i = b * kBlock, e = std::min(n, i + kBlock); i < e; ++i) {
      if (!std::isfinite(out[i]) || !std::isfinite(ref[i])) continue;
      const double err = out[i] - ref[i];
      q.ee += (err * s) * (err * s);
      q.rr += (ref[i] * s) * (ref[i] * s);
      q.er += (err * s) * (ref[i] * s);
      q.er2 += ((err * s) * (ref[i] * s)) * ((err * s) * (ref[i] * s));
      q.se += err;
      // 0/0 (an exact value where the reference and its floor are 0) is an error of 0.
      r[q.count++] = err == 0 ? 0.0 : std::fabs(err) / std::max(std::fabs(ref[i]), p.rel_floor);
      ++q.hist[sz(ulp_bucket(ulp_distance(out[i], ref[i], ulp_dtype)))];
    }
  }
  double ee = 0, rr = 0, se = 0, er = 0, er2 = 0;
  std::array<std::int64_t, kUlpBuckets> hist{};
  std::int64_t count = 0;
  for (std::int64_t b = 0; b < nb; ++b) {
    const Partial& q = part[sz(b)];
    ee += q.ee;
    rr += q.rr;
    se += q.se;
    er += q.er;
    er2 += q.er2;
    for (int k = 0; k < kUlpBuckets; ++k) hist[sz(k)] += q.hist[sz(k)];
    // Pack the blocks' relative errors (each block's lie at its start).
    if (count != b * kBlock) std::copy_n(rel + b * kBlock, q.count, rel + count);
    count += q.count;
  }
  p.n = count;
  p.max_ref = max_ref;
  p.norm_ref = max_ref * std::sqrt(rr);
  p.normwise = rr > 0 ? std::sqrt(ee / rr) : (ee > 0 ? INFINITY : 0.0);
  p.scale = rr > 0 ? er / rr : 0.0;
  p.scale_spread = rr > 0 ? std::sqrt(er2) / rr : 0.0;
  if (p.n > 0) {
    p.bias = rr > 0 ? (se / static_cast<double>(p.n)) / (p.norm_ref / std::sqrt(double(p.n))) : 0.0;
    for (int b = 0; b < kUlpBuckets; ++b)
      p.ulp_hist[sz(b)] = static_cast<double>(hist[sz(b)]) / static_cast<double>(p.n);
    p.rel_max = *std::max_element(rel, rel + count);
    // Increasing quantiles, each selected among the elements above the previous one.
    static_assert(0.5 < kDifferentialQuantile && kDifferentialQuantile < 0.99);
    std::size_t from = 0;
    p.rel_p50 = quantile_from(rel, sz(count), from, 0.5);
    p.rel_q = quantile_from(rel, sz(count), from, kDifferentialQuantile);
    p.rel_p99 = quantile_from(rel, sz(count), from, 0.99);
  }
  return p;
}

}  // namespace xentlab
