// Error profiles (judge/profile.hpp).
#include "judge/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
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

// The values of ranks[r] (0-based, each < n; at least one rank) among v's n values, which are ≥ +0
// (+inf allowed, no NaN), and the largest: exact order statistics by radix selection, in parallel,
// v unchanged. Non-negative doubles are ordered as their bit patterns, so each pass over v counts,
// per rank, the next 16 bits of the values that share the bits found so far (the first pass: the
// top 16 bits of every value), until at most kGatherMax values share them — those are gathered and
// the rank selected among them — or all 64 bits are known. At most four passes whatever the data (a
// bucket of 5·10⁸ equal errors costs what any other does; a selection in place over all of v took
// seconds serially), the same values as std::nth_element over v on any number of threads.
struct OrderStatistics {
  std::vector<double> at_rank;
  double max = 0;
};
OrderStatistics order_statistics(const double* v, std::size_t n,
                                 const std::vector<std::size_t>& ranks) {
  constexpr std::size_t kGatherMax = std::size_t{1} << 18;
  constexpr std::size_t kBuckets = std::size_t{1} << 16;
  const auto bits = [](double x) {
    std::uint64_t b = 0;
    std::memcpy(&b, &x, sizeof b);
    return b;
  };
  const std::size_t nr = ranks.size();
  OrderStatistics out;
  out.at_rank.assign(nr, 0.0);
  if (n == 0) return out;
  if (n <= kGatherMax) {  // few values: a copy and a selection cost less than the passes
    std::vector<double> w(v, v + n);
    out.max = *std::max_element(w.begin(), w.end());
    for (std::size_t r = 0; r < nr; ++r) {
      std::nth_element(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(ranks[r]), w.end());
      out.at_rank[r] = w[ranks[r]];
    }
    return out;
  }
  // Per rank: the top `known` bits found (prefix, right-aligned), how many values share them, the
  // rank among those, and whether the value is known.
  std::vector<std::uint64_t> prefix(nr, 0);
  std::vector<std::size_t> sharing(nr, n), within(ranks);
  std::vector<char> resolved(nr, 0);
  int known = 0;
  double mx = 0;
  while (std::find(resolved.begin(), resolved.end(), 0) != resolved.end()) {
    // The unresolved ranks' distinct prefixes: ranks that share one share its counts or values.
    std::vector<std::uint64_t> group;
    std::vector<std::size_t> group_of(nr, 0);
    std::vector<char> gather;
    for (std::size_t r = 0; r < nr; ++r) {
      if (resolved[r]) continue;
      const auto it = std::find(group.begin(), group.end(), prefix[r]);
      group_of[r] = static_cast<std::size_t>(it - group.begin());
      if (it == group.end()) {
        group.push_back(prefix[r]);
        gather.push_back(known > 0 && sharing[r] <= kGatherMax ? 1 : 0);
      }
    }
    const std::size_t ng = group.size();
    std::vector<std::vector<std::uint64_t>> count(ng);
    std::vector<std::vector<double>> gathered(ng);
    for (std::size_t k = 0; k < ng; ++k)
      if (!gather[k]) count[k].assign(kBuckets, 0);
    const int shift = 48 - known;  // the next 16 bits of a counting group
#pragma omp parallel
    {
      std::vector<std::vector<std::uint64_t>> c(ng);
      std::vector<std::vector<double>> g(ng);
      for (std::size_t k = 0; k < ng; ++k)
        if (!gather[k]) c[k].assign(kBuckets, 0);
      double m = 0;
      if (known == 0) {  // one group, every value: the top 16 bits, and the largest value
        std::uint64_t* const h = c[0].data();
#pragma omp for schedule(static) nowait
        for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i) {
          m = std::max(m, v[i]);
          ++h[bits(v[i]) >> 48];
        }
      } else {
#pragma omp for schedule(static) nowait
        for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i) {
          const std::uint64_t b = bits(v[i]), top = b >> (64 - known);
          for (std::size_t k = 0; k < ng; ++k)
            if (top == group[k]) {
              if (gather[k])
                g[k].push_back(v[i]);
              else
                ++c[k][static_cast<std::size_t>((b >> shift) & 0xFFFF)];
              break;
            }
        }
      }
#pragma omp critical
      {
        mx = std::max(mx, m);
        for (std::size_t k = 0; k < ng; ++k) {
          for (std::size_t j = 0; j < c[k].size(); ++j) count[k][j] += c[k][j];
          gathered[k].insert(gathered[k].end(), g[k].begin(), g[k].end());
        }
      }
    }
    for (std::size_t r = 0; r < nr; ++r) {
      if (resolved[r]) continue;
      const std::size_t k = group_of[r];
      if (gather[k]) {  // the rank among the values sharing the prefix (a selection keeps the
                        // multiset, so the group's other ranks select from the same vector)
        std::vector<double>& w = gathered[k];
        std::nth_element(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(within[r]), w.end());
        out.at_rank[r] = w[within[r]];
        resolved[r] = 1;
        continue;
      }
      std::size_t b = 0, below = 0;  // the bucket of the next 16 bits holding the rank
      while (below + count[k][b] <= within[r]) below += count[k][b++];
      prefix[r] = (prefix[r] << 16) | b;
      within[r] -= below;
      sharing[r] = count[k][b];
      if (known + 16 == 64) {  // every bit known: the value itself
        std::memcpy(&out.at_rank[r], &prefix[r], sizeof(double));
        resolved[r] = 1;
      }
    }
    known += 16;
  }
  out.max = mx;
  return out;
}

int ulp_bucket(double d) {
  if (d < 1) return 0;
  if (d < 2) return 1;
  const int b = 1 + std::ilogb(d);  // 1 + floor(log2 d), exactly
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
  // Sums of squares scaled by max|ref| (no overflow): x·s0·s, s0 = 2^600 (exact) where max|ref|
  // is subnormal and its reciprocal would overflow (the sums then NaN, the normwise error 0), else
  // 1 (x·s as it is).
  const double s0 = max_ref < std::numeric_limits<double>::min() ? 0x1p600 : 1.0;
  const double s = max_ref > 0 ? 1.0 / (max_ref * s0) : 1.0;
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
      const double es = err * s0 * s, rs = ref[i] * s0 * s;
      q.ee += es * es;
      q.rr += rs * rs;
      q.er += es * rs;
      q.er2 += (es * rs) * (es * rs);
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
