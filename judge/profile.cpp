// Error profiles (judge/profile.hpp).
#include "judge/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
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

// The nearest-rank q-quantile's 0-based rank among n values.
std::size_t quantile_rank(std::size_t n, double q) {
  auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(n)));
  return std::min(std::max<std::size_t>(k, 1), n) - 1;
}

// The values of ranks[r] (0-based, each < n) among v's n values, which are ≥ +0 (+inf allowed,
// no NaN), and the largest: exact order statistics, found in parallel. Non-negative doubles are
// ordered as their bit patterns, so one pass counts the values per top-16-bit bucket (sign,
// exponent, 4 mantissa bits), a second gathers the values of the buckets holding the ranks, and a
// selection among those gives each rank. The same values as std::nth_element over all of v on any
// number of threads (the gathered order differs; the selected value does not), in a fraction of
// its time: 5·10⁸ values (the Llama-3-8B head's dW) took 3 s serially. A bucket of more than
// kGatherMax values (many equal or nearly equal errors) is not copied: its rank is selected in
// place in v, as before (v is reordered then); so are the ranks of fewer than 2^16 values.
struct OrderStatistics {
  std::vector<double> at_rank;
  double max = 0;
};
OrderStatistics order_statistics(double* v, std::size_t n, const std::vector<std::size_t>& ranks) {
  constexpr std::uint64_t kGatherMax = std::uint64_t{1} << 25;
  constexpr int kShift = 48;
  constexpr std::size_t kBuckets = std::size_t{1} << 16;
  const auto bucket = [](double x) {
    std::uint64_t b = 0;
    std::memcpy(&b, &x, sizeof b);
    return static_cast<std::size_t>(b >> kShift);
  };
  OrderStatistics out;
  out.at_rank.assign(ranks.size(), 0.0);
  if (n == 0) return out;
  if (n < kBuckets) {  // few values: the buckets' tables would cost more than selecting in place
    out.max = *std::max_element(v, v + n);
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      std::nth_element(v, v + ranks[r], v + n);
      out.at_rank[r] = v[ranks[r]];
    }
    return out;
  }
  std::vector<std::uint64_t> count(kBuckets, 0);
  double mx = 0;
#pragma omp parallel
  {
    std::vector<std::uint64_t> local(kBuckets, 0);
    double m = 0;
#pragma omp for schedule(static) nowait
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i) {
      ++local[bucket(v[i])];
      m = std::max(m, v[i]);
    }
#pragma omp critical
    {
      for (std::size_t b = 0; b < kBuckets; ++b) count[b] += local[b];
      mx = std::max(mx, m);
    }
  }
  out.max = mx;
  // Each rank's bucket and its rank within the bucket.
  std::vector<std::size_t> want(ranks.size()), within(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    std::uint64_t below = 0;
    std::size_t b = 0;
    while (below + count[b] <= ranks[r]) below += count[b++];
    want[r] = b;
    within[r] = ranks[r] - below;
  }
  std::vector<char> wanted(kBuckets, 0);
  for (const std::size_t b : want) wanted[b] = count[b] <= kGatherMax ? 1 : 0;
  std::vector<std::vector<double>> gathered(kBuckets);
  for (const std::size_t b : want)
    if (wanted[b]) gathered[b].reserve(count[b]);
#pragma omp parallel
  {
    std::vector<std::vector<double>> local(ranks.size());
#pragma omp for schedule(static) nowait
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i) {
      const std::size_t b = bucket(v[i]);
      if (!wanted[b]) continue;
      for (std::size_t r = 0; r < ranks.size(); ++r)
        if (want[r] == b) {
          local[r].push_back(v[i]);
          break;
        }
    }
#pragma omp critical
    for (std::size_t r = 0; r < ranks.size(); ++r)
      if (!local[r].empty()) {
        // The first rank of a bucket holds its values (shared by the later ranks of that bucket).
        std::size_t first = r;
        while (want[first] != want[r]) ++first;
        auto& g = gathered[want[first]];
        g.insert(g.end(), local[r].begin(), local[r].end());
      }
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (!wanted[want[r]]) {
      std::nth_element(v, v + ranks[r], v + n);
      out.at_rank[r] = v[ranks[r]];
      continue;
    }
    std::vector<double>& g = gathered[want[r]];
    std::nth_element(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(within[r]), g.end());
    out.at_rank[r] = g[within[r]];
  }
  return out;
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
    const std::size_t c = sz(count);
    const OrderStatistics os = order_statistics(
        rel, c,
        {quantile_rank(c, 0.5), quantile_rank(c, kDifferentialQuantile), quantile_rank(c, 0.99)});
    p.rel_max = os.max;
    p.rel_p50 = os.at_rank[0];
    p.rel_q = os.at_rank[1];
    p.rel_p99 = os.at_rank[2];
  }
  return p;
}

}  // namespace xentlab
