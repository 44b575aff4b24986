// Error statistics of an output tensor against its reference (see stats.hpp for conventions).
#include "numerics/stats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>
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

}  // namespace

// ---- Histogram ----------------------------------------------------------------------------------

double Histogram::bin_lower(int k) {
  return std::ldexp(1.0, kMinExp + k);
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

namespace {

// The statistics are accumulated over fixed chunks of kChunk elements (in parallel), and the
// chunks' partial results merged in chunk order: the same bits whatever the number of threads.
constexpr std::int64_t kChunk = std::int64_t{1} << 16;

// Exact order statistics of non-negative doubles without storing them: the bit pattern of a
// non-negative double orders as the value, so a histogram of its top 16 bits finds the bucket
// holding a given rank, and three more passes the next 16 bits each (radix selection).
constexpr int kBucketShift = 48;
constexpr std::size_t kBuckets = std::size_t{1} << 16;
std::size_t bucket_of(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return static_cast<std::size_t>(b >> kBucketShift);
}

// Where the ceil(q·n)-th smallest (nearest rank, as order_statistic) falls: its bucket and its
// 1-based rank among that bucket's values.
struct RankSpot {
  std::size_t bucket = 0;
  std::int64_t rank_in_bucket = 0;
  bool any = false;
};
RankSpot locate_rank(const std::vector<std::int64_t>& counts, std::int64_t n, double q) {
  RankSpot r;
  if (n == 0) return r;
  auto rank = static_cast<std::int64_t>(std::ceil(q * static_cast<double>(n)));
  rank = std::clamp<std::int64_t>(rank, 1, n);
  std::int64_t seen = 0;
  for (std::size_t b = 0; b < counts.size(); ++b) {
    if (seen + counts[b] >= rank) {
      r.bucket = b;
      r.rank_in_bucket = rank - seen;
      r.any = true;
      return r;
    }
    seen += counts[b];
  }
  return r;  // not reached: the counts add up to n
}

struct ChunkSums {
  eft::CompensatedSum e, abs, sq, ref_sq, rel, out, ref, b2, b;
  std::int64_t n_finite_bound = 0, ulp_count = 0, ulp0 = 0, ulp1 = 0, ulp2 = 0, ulp4 = 0;
  std::int64_t n_finite_pairs = 0, n_infinite_bound = 0, n_over_bound = 0;
  double max_ulp = 0.0;
  std::int64_t max_ulp_index = -1;
  double max_abs = 0.0, max_abs_out = 0.0, max_abs_ref = 0.0;
  std::int64_t max_abs_index = -1;
  double max_rel = 0.0;
  std::int64_t max_rel_index = -1;
  double max_ratio = 0.0, max_ratio_err = 0.0, max_ratio_bound = 0.0;
  std::int64_t max_ratio_index = -1;
};

}  // namespace

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
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  const auto chunk_range = [&](std::int64_t c) {
    return std::pair<std::int64_t, std::int64_t>{c * kChunk, std::min(n, (c + 1) * kChunk)};
  };

  // Pass 1: kinds, max |ref| (for the relative floor), the first NaN bound.
  struct Kinds {
    std::int64_t out_nan = 0, out_posinf = 0, out_neginf = 0, ref_nan = 0, ref_posinf = 0,
                 ref_neginf = 0, mismatches = 0, nonfinite_where_ref_finite = 0;
    std::int64_t first_mismatch = -1, first_nan_bound = -1;
    double max_abs_ref = 0.0;
  };
  std::vector<Kinds> kinds(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(dynamic, 16)
  for (std::int64_t c = 0; c < chunks; ++c) {
    Kinds& k = kinds[static_cast<std::size_t>(c)];
    const auto [lo, hi] = chunk_range(c);
    for (std::int64_t i = lo; i < hi; ++i) {
      const Kind ko = kind_of(out[i]), kr = kind_of(ref[i]);
      k.out_nan += ko == Kind::nan;
      k.out_posinf += ko == Kind::posinf;
      k.out_neginf += ko == Kind::neginf;
      k.ref_nan += kr == Kind::nan;
      k.ref_posinf += kr == Kind::posinf;
      k.ref_neginf += kr == Kind::neginf;
      if (ko != kr) {
        ++k.mismatches;
        if (k.first_mismatch < 0) k.first_mismatch = i;
        if (kr == Kind::finite) ++k.nonfinite_where_ref_finite;
      }
      if (kr == Kind::finite) k.max_abs_ref = std::max(k.max_abs_ref, std::fabs(ref[i]));
      if (bound != nullptr && std::isnan(bound[i]) && k.first_nan_bound < 0) k.first_nan_bound = i;
    }
  }
  double max_abs_ref = 0.0;
  for (const Kinds& k : kinds) {
    if (k.first_nan_bound >= 0)
      throw InputError(fmt::format("compute_error_stats: bound[{}] is NaN", k.first_nan_bound));
    st.out_nan += k.out_nan;
    st.out_posinf += k.out_posinf;
    st.out_neginf += k.out_neginf;
    st.ref_nan += k.ref_nan;
    st.ref_posinf += k.ref_posinf;
    st.ref_neginf += k.ref_neginf;
    st.finiteness_mismatches += k.mismatches;
    st.nonfinite_where_ref_finite += k.nonfinite_where_ref_finite;
    if (st.first_mismatch_index < 0) st.first_mismatch_index = k.first_mismatch;
    max_abs_ref = std::max(max_abs_ref, k.max_abs_ref);
  }
  st.rel_floor = std::max(opt.rel_floor_abs, opt.rel_floor_rel * max_abs_ref);

  // Pass 2: sums, maxima (first index attaining them), ULPs, histograms; bucket counts of |e|
  // and of the ratios for the percentiles.
  std::vector<ChunkSums> part(static_cast<std::size_t>(chunks));
  std::vector<std::int64_t> err_counts(kBuckets, 0), ratio_counts(bound ? kBuckets : 0, 0);
#pragma omp parallel
  {
    Histogram h_abs, h_rel, h_ratio;
    std::vector<std::int64_t> ec(kBuckets, 0), rc(bound ? kBuckets : 0, 0);
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t c = 0; c < chunks; ++c) {
      ChunkSums& p = part[static_cast<std::size_t>(c)];
      const auto [lo, hi] = chunk_range(c);
      for (std::int64_t i = lo; i < hi; ++i) {
        const double o = out[i], r = ref[i];
        // ULP statistics: against the correctly rounded reference, NaN excluded; an infinity on
        // one side only is a finiteness mismatch unless rounding the reference also gives that
        // infinity.
        if (!std::isnan(o) && !std::isnan(r)) {
          double d = 0.0;
          bool comparable = true;
          if (!ulp_distance_fast(o, r, out_dtype, d)) {  // ordinal(r) = ordinal(round_to(r))
            const double rr = round_to(r, out_dtype);
            comparable = (std::isfinite(o) || std::isfinite(rr) || o == rr);
            if (comparable) d = ulp_distance(o, rr, out_dtype);
          }
          if (comparable) {
            ++p.ulp_count;
            p.ulp0 += d == 0.0;
            p.ulp1 += d <= 1.0;
            p.ulp2 += d <= 2.0;
            p.ulp4 += d <= 4.0;
            if (d > p.max_ulp || p.max_ulp_index < 0) p.max_ulp = d, p.max_ulp_index = i;
          }
        }
        if (!std::isfinite(o) || !std::isfinite(r)) {
          if (bound && std::isinf(bound[i])) ++p.n_infinite_bound;
          continue;
        }
        ++p.n_finite_pairs;
        const double e = o - r;  // |fl(o−r) − (o−r)| ≤ u_64·|o−r|, negligible
        const double ae = std::fabs(e);
        p.e.add(e);
        p.abs.add(ae);
        p.sq.add(e * e);
        p.ref_sq.add(r * r);
        p.out.add(o);
        p.ref.add(r);
        ++ec[bucket_of(ae)];
        if (ae > p.max_abs || p.max_abs_index < 0)
          p.max_abs = ae, p.max_abs_index = i, p.max_abs_out = o, p.max_abs_ref = r;
        const double denom = std::max(std::fabs(r), st.rel_floor);
        const double rel = denom > 0 ? ae / denom : (ae > 0 ? kInf : 0.0);
        p.rel.add(rel);
        if (rel > p.max_rel || p.max_rel_index < 0) p.max_rel = rel, p.max_rel_index = i;
        if (opt.keep_histograms) {
          h_abs.add(ae);
          h_rel.add(rel);
        }
        if (bound) {
          const double b = bound[i];
          if (std::isinf(b)) {
            ++p.n_infinite_bound;
          } else {
            p.b2.add(b * b);
            p.b.add(b);
            ++p.n_finite_bound;
          }
          const double ratio = b > 0 ? ae / b : (ae > 0 ? kInf : 0.0);
          ++rc[bucket_of(ratio)];
          p.n_over_bound += ae > b;
          if (opt.keep_histograms) h_ratio.add(ratio);
          if (ratio > p.max_ratio || p.max_ratio_index < 0)
            p.max_ratio = ratio, p.max_ratio_index = i, p.max_ratio_err = ae, p.max_ratio_bound = b;
        }
      }
    }
    // Counts add in any order: the merge is deterministic.
#pragma omp critical
    {
      st.abs_err_hist.merge(h_abs);
      st.rel_err_hist.merge(h_rel);
      st.ratio_hist.merge(h_ratio);
      for (std::size_t b = 0; b < kBuckets; ++b) err_counts[b] += ec[b];
      for (std::size_t b = 0; b < rc.size(); ++b) ratio_counts[b] += rc[b];
    }
  }
  eft::CompensatedSum sum_e, sum_abs, sum_sq, sum_ref_sq, sum_rel, sum_out, sum_ref, sum_b2, sum_b;
  std::int64_t n_finite_bound = 0, ulp0 = 0, ulp1 = 0, ulp2 = 0, ulp4 = 0;
  for (const ChunkSums& p : part) {  // chunk order: the first index attaining a maximum wins
    sum_e.add(p.e);
    sum_abs.add(p.abs);
    sum_sq.add(p.sq);
    sum_ref_sq.add(p.ref_sq);
    sum_rel.add(p.rel);
    sum_out.add(p.out);
    sum_ref.add(p.ref);
    sum_b2.add(p.b2);
    sum_b.add(p.b);
    n_finite_bound += p.n_finite_bound;
    st.ulp_count += p.ulp_count;
    ulp0 += p.ulp0;
    ulp1 += p.ulp1;
    ulp2 += p.ulp2;
    ulp4 += p.ulp4;
    st.n_finite_pairs += p.n_finite_pairs;
    st.n_infinite_bound += p.n_infinite_bound;
    st.n_over_bound += p.n_over_bound;
    if (p.max_ulp_index >= 0 && (p.max_ulp > st.max_ulp || st.max_ulp_index < 0))
      st.max_ulp = p.max_ulp, st.max_ulp_index = p.max_ulp_index;
    if (p.max_abs_index >= 0 && (p.max_abs > st.max_abs_err || st.max_abs_err_index < 0))
      st.max_abs_err = p.max_abs, st.max_abs_err_index = p.max_abs_index,
      st.max_abs_err_out = p.max_abs_out, st.max_abs_err_ref = p.max_abs_ref;
    if (p.max_rel_index >= 0 && (p.max_rel > st.max_rel_err || st.max_rel_err_index < 0))
      st.max_rel_err = p.max_rel, st.max_rel_err_index = p.max_rel_index;
    if (p.max_ratio_index >= 0 && (p.max_ratio > st.max_ratio || st.max_ratio_index < 0))
      st.max_ratio = p.max_ratio, st.max_ratio_index = p.max_ratio_index,
      st.max_ratio_err = p.max_ratio_err, st.max_ratio_bound = p.max_ratio_bound;
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
      std::vector<eft::CompensatedSum> dev(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(dynamic, 16)
      for (std::int64_t c = 0; c < chunks; ++c) {
        const auto [lo, hi] = chunk_range(c);
        for (std::int64_t i = lo; i < hi; ++i)
          if (std::isfinite(out[i]) && std::isfinite(ref[i])) {
            const double d = (out[i] - ref[i]) - st.bias;
            dev[static_cast<std::size_t>(c)].add(d * d);
          }
      }
      eft::CompensatedSum total;
      for (const auto& d : dev) total.add(d);
      st.bias_stderr = std::sqrt(total.value() / (m - 1) / m);
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

  // Pass 3: the percentiles, by radix selection on the bit patterns (a non-negative double orders
  // as its bit pattern). Pass 2 counted the top 16 bits; each further pass counts the next 16 bits
  // of the values that share the prefix found so far, until all 64 bits — the value itself — are
  // known, or gathers those values once there are at most kGatherMax of them and selects the rank
  // among them. At most kGatherMax values are stored per percentile, so a rank among millions of
  // equal values (the zero ratios of an output without a finite bound, all in one bucket) costs
  // what any other rank costs, and a small input costs no 16-bit histograms at all. The same
  // nearest-rank order statistic as sorting every value.
  constexpr std::int64_t kGatherMax = std::int64_t{1} << 12;
  const double qs[] = {0.5, 0.9, 0.99, 0.999};
  std::array<RankSpot, 5> spots;
  for (int k = 0; k < 4; ++k)
    spots[static_cast<std::size_t>(k)] = locate_rank(err_counts, st.n_finite_pairs, qs[k]);
  if (bound) spots[4] = locate_rank(ratio_counts, st.n_finite_pairs, 0.99);
  std::array<std::uint64_t, 5> prefix{};  // the bits found so far, right-aligned
  std::array<std::int64_t, 5> sharing{};  // how many values share the prefix
  std::array<bool, 5> resolved{};         // prefix holds the whole value
  for (std::size_t k = 0; k < 5; ++k) {
    prefix[k] = spots[k].bucket;
    if (spots[k].any) sharing[k] = (k < 4 ? err_counts : ratio_counts)[spots[k].bucket];
    resolved[k] = !spots[k].any;
  }
  const auto bits_of = [](double x) {
    std::uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
  };
  for (int shift = kBucketShift - 16; shift >= 0; shift -= 16) {
    std::array<bool, 5> radix{}, gather{};
    bool any = false;
    for (std::size_t k = 0; k < 5; ++k) {
      radix[k] = !resolved[k] && sharing[k] > kGatherMax;
      gather[k] = !resolved[k] && sharing[k] <= kGatherMax;
      any = any || !resolved[k];
    }
    if (!any) break;
    std::array<std::vector<std::int64_t>, 5> counts;
    std::array<std::vector<std::uint64_t>, 5> gathered;
    for (std::size_t k = 0; k < 5; ++k)
      if (radix[k]) counts[k].assign(kBuckets, 0);
#pragma omp parallel
    {
      std::array<std::vector<std::int64_t>, 5> mine;
      std::array<std::vector<std::uint64_t>, 5> mine_values;
      for (std::size_t k = 0; k < 5; ++k)
        if (radix[k]) mine[k].assign(kBuckets, 0);
      const auto take = [&](std::size_t k, std::uint64_t v) {
        if (radix[k]) {
          if ((v >> (shift + 16)) == prefix[k])
            ++mine[k][static_cast<std::size_t>((v >> shift) & 0xFFFF)];
        } else if (gather[k]) {
          if ((v >> (shift + 16)) == prefix[k]) mine_values[k].push_back(v);
        }
      };
#pragma omp for schedule(dynamic, 16)
      for (std::int64_t c = 0; c < chunks; ++c) {
        const auto [lo, hi] = chunk_range(c);
        for (std::int64_t i = lo; i < hi; ++i) {
          if (!std::isfinite(out[i]) || !std::isfinite(ref[i])) continue;
          const double ae = std::fabs(out[i] - ref[i]);
          const std::uint64_t be = bits_of(ae);
          for (std::size_t k = 0; k < 4; ++k) take(k, be);
          if (bound && !resolved[4]) {
            const double b = bound[i];
            take(4, bits_of(b > 0 ? ae / b : (ae > 0 ? kInf : 0.0)));
          }
        }
      }
#pragma omp critical
      for (std::size_t k = 0; k < 5; ++k) {
        for (std::size_t b = 0; b < mine[k].size(); ++b) counts[k][b] += mine[k][b];
        gathered[k].insert(gathered[k].end(), mine_values[k].begin(), mine_values[k].end());
      }
    }
    for (std::size_t k = 0; k < 5; ++k) {
      if (gather[k]) {  // the rank among the values sharing the prefix, by their bits
        std::vector<std::uint64_t>& v = gathered[k];
        if (static_cast<std::int64_t>(v.size()) != sharing[k])
          throw std::logic_error("compute_error_stats: the percentile passes counted differently");
        const auto r = static_cast<std::ptrdiff_t>(spots[k].rank_in_bucket - 1);
        std::nth_element(v.begin(), v.begin() + r, v.end());
        prefix[k] = v[static_cast<std::size_t>(r)];
        resolved[k] = true;
      } else if (radix[k]) {  // the next 16 bits, and the rank among the values sharing them
        std::int64_t seen = 0;
        bool found = false;
        for (std::size_t b = 0; b < kBuckets && !found; ++b) {
          if (seen + counts[k][b] >= spots[k].rank_in_bucket) {
            prefix[k] = (prefix[k] << 16) | b;
            spots[k].rank_in_bucket -= seen;
            sharing[k] = counts[k][b];
            found = true;
          } else {
            seen += counts[k][b];
          }
        }
        if (!found)
          throw std::logic_error("compute_error_stats: the percentile passes counted differently");
        resolved[k] = shift == 0;
      }
    }
  }
  const auto select = [&](std::size_t k) {
    if (!spots[k].any) return 0.0;
    double v;
    std::memcpy(&v, &prefix[k], sizeof v);
    return v;
  };
  st.p50 = select(0);
  st.p90 = select(1);
  st.p99 = select(2);
  st.p999 = select(3);
  if (bound) st.p99_ratio = select(4);
  return st;
}

}  // namespace xentlab
