// Error statistics of an output tensor against its reference (see stats.hpp for conventions).
#include "judge/stats.hpp"

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
std::uint64_t bits_of(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
std::size_t bucket_of(double x) {
  return static_cast<std::size_t>(bits_of(x) >> kBucketShift);
}

/// |e| / denominator, with 0/0 = 0 and x/0 = +Inf (the relative errors and the ratios).
double ratio_of(double ae, double denom) {
  return denom > 0 ? ae / denom : (ae > 0 ? kInf : 0.0);
}

/// The arrays of one compute_error_stats call and their chunks.
struct Inputs {
  const double* out;
  const double* ref;
  const double* bound;  ///< null without bounds
  std::int64_t n;
  DType out_dtype;
  const StatsOptions& opt;

  std::int64_t chunks() const { return (n + kChunk - 1) / kChunk; }
  std::pair<std::int64_t, std::int64_t> range(std::int64_t c) const {
    return {c * kChunk, std::min(n, (c + 1) * kChunk)};
  }
  /// Whether element i enters the error magnitudes (both values finite).
  bool finite_pair(std::int64_t i) const { return std::isfinite(out[i]) && std::isfinite(ref[i]); }
};

// ---- pass 1: kinds, max |ref| (for the relative floor), the first NaN bound ---------------------

struct Kinds {
  std::int64_t out_nan = 0, out_posinf = 0, out_neginf = 0, ref_nan = 0, ref_posinf = 0,
               ref_neginf = 0, mismatches = 0, nonfinite_where_ref_finite = 0;
  std::int64_t first_mismatch = -1, first_nan_bound = -1;
  double max_abs_ref = 0.0;
};

void count_kinds(const Inputs& in, std::int64_t c, Kinds& k) {
  const auto [lo, hi] = in.range(c);
  for (std::int64_t i = lo; i < hi; ++i) {
    const Kind ko = kind_of(in.out[i]), kr = kind_of(in.ref[i]);
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
    if (kr == Kind::finite) k.max_abs_ref = std::max(k.max_abs_ref, std::fabs(in.ref[i]));
    if (in.bound != nullptr && std::isnan(in.bound[i]) && k.first_nan_bound < 0)
      k.first_nan_bound = i;
  }
}

/// Pass 1: fills the counts of non-finite values and mismatches of st and its rel_floor; throws
/// InputError for the first NaN bound.
void pass_kinds(const Inputs& in, ErrorStats& st) {
  const std::int64_t chunks = in.chunks();
  std::vector<Kinds> kinds(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(dynamic, 16)
  for (std::int64_t c = 0; c < chunks; ++c) count_kinds(in, c, kinds[static_cast<std::size_t>(c)]);
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
  st.rel_floor = std::max(in.opt.rel_floor_abs, in.opt.rel_floor_rel * max_abs_ref);
}

// ---- pass 2: sums, maxima (first index attaining them), ULPs, histograms, buckets ---------------

struct Sums {
  eft::CompensatedSum e, abs, sq, ref_sq, rel, out, ref, b2, b;
  std::int64_t n_finite_bound = 0, ulp0 = 0, ulp1 = 0, ulp2 = 0, ulp4 = 0;
};

struct ChunkSums : Sums {
  std::int64_t ulp_count = 0, n_finite_pairs = 0, n_infinite_bound = 0, n_over_bound = 0;
  double max_ulp = 0.0;
  std::int64_t max_ulp_index = -1;
  double max_abs = 0.0, max_abs_out = 0.0, max_abs_ref = 0.0;
  std::int64_t max_abs_index = -1;
  double max_rel = 0.0;
  std::int64_t max_rel_index = -1;
  double max_ratio = 0.0, max_ratio_err = 0.0, max_ratio_bound = 0.0;
  std::int64_t max_ratio_index = -1;
};

/// One thread's histograms and bucket counts (of |e| and of the ratios), merged at the end.
struct ThreadCounts {
  Histogram h_abs, h_rel, h_ratio;
  std::vector<std::int64_t> ec, rc;
};

/// The top-16-bit bucket counts of |e| and of the ratios (empty without bounds).
struct Buckets {
  std::vector<std::int64_t> err, ratio;
};

// ULP statistics: against the correctly rounded reference, NaN excluded; an infinity on one side
// only is a finiteness mismatch unless rounding the reference also gives that infinity.
void add_ulp(double o, double r, DType out_dtype, std::int64_t i, ChunkSums& p) {
  if (std::isnan(o) || std::isnan(r)) return;
  double d = 0.0;
  bool comparable = true;
  if (!ulp_distance_fast(o, r, out_dtype, d)) {  // ordinal(r) = ordinal(round_to(r))
    const double rr = round_to(r, out_dtype);
    comparable = (std::isfinite(o) || std::isfinite(rr) || o == rr);
    if (comparable) d = ulp_distance(o, rr, out_dtype);
  }
  if (!comparable) return;
  ++p.ulp_count;
  p.ulp0 += d == 0.0;
  p.ulp1 += d <= 1.0;
  p.ulp2 += d <= 2.0;
  p.ulp4 += d <= 4.0;
  if (d > p.max_ulp || p.max_ulp_index < 0) p.max_ulp = d, p.max_ulp_index = i;
}

// The ratio |e|/bound of a finite pair (bounds given).
void add_bound(double ae, double b, std::int64_t i, bool keep_histograms, ChunkSums& p,
               ThreadCounts& t) {
  if (std::isinf(b)) {
    ++p.n_infinite_bound;
  } else {
    p.b2.add(b * b);
    p.b.add(b);
    ++p.n_finite_bound;
  }
  const double ratio = ratio_of(ae, b);
  ++t.rc[bucket_of(ratio)];
  p.n_over_bound += ae > b;
  if (keep_histograms) t.h_ratio.add(ratio);
  if (ratio > p.max_ratio || p.max_ratio_index < 0)
    p.max_ratio = ratio, p.max_ratio_index = i, p.max_ratio_err = ae, p.max_ratio_bound = b;
}

void sum_chunk(const Inputs& in, double rel_floor, std::int64_t c, ChunkSums& p, ThreadCounts& t) {
  const auto [lo, hi] = in.range(c);
  for (std::int64_t i = lo; i < hi; ++i) {
    const double o = in.out[i], r = in.ref[i];
    add_ulp(o, r, in.out_dtype, i, p);
    if (!std::isfinite(o) || !std::isfinite(r)) {
      if (in.bound && std::isinf(in.bound[i])) ++p.n_infinite_bound;
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
    ++t.ec[bucket_of(ae)];
    if (ae > p.max_abs || p.max_abs_index < 0)
      p.max_abs = ae, p.max_abs_index = i, p.max_abs_out = o, p.max_abs_ref = r;
    const double denom = std::max(std::fabs(r), rel_floor);
    const double rel = ratio_of(ae, denom);
    p.rel.add(rel);
    if (rel > p.max_rel || p.max_rel_index < 0) p.max_rel = rel, p.max_rel_index = i;
    if (in.opt.keep_histograms) {
      t.h_abs.add(ae);
      t.h_rel.add(rel);
    }
    if (in.bound) add_bound(ae, in.bound[i], i, in.opt.keep_histograms, p, t);
  }
}

/// Pass 2: the partial results of every chunk; fills st's histograms and `buckets`.
std::vector<ChunkSums> pass_sums(const Inputs& in, ErrorStats& st, Buckets& buckets) {
  const std::int64_t chunks = in.chunks();
  const bool bounded = in.bound != nullptr;
  std::vector<ChunkSums> part(static_cast<std::size_t>(chunks));
  buckets.err.assign(kBuckets, 0);
  buckets.ratio.assign(bounded ? kBuckets : 0, 0);
#pragma omp parallel
  {
    ThreadCounts t;
    t.ec.assign(kBuckets, 0);
    t.rc.assign(bounded ? kBuckets : 0, 0);
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t c = 0; c < chunks; ++c)
      sum_chunk(in, st.rel_floor, c, part[static_cast<std::size_t>(c)], t);
      // Counts add in any order: the merge is deterministic.
#pragma omp critical
    {
      st.abs_err_hist.merge(t.h_abs);
      st.rel_err_hist.merge(t.h_rel);
      st.ratio_hist.merge(t.h_ratio);
      for (std::size_t b = 0; b < kBuckets; ++b) buckets.err[b] += t.ec[b];
      for (std::size_t b = 0; b < t.rc.size(); ++b) buckets.ratio[b] += t.rc[b];
    }
  }
  return part;
}

/// The chunks' results in chunk order (the first index attaining a maximum wins): the sums are
/// returned, the counts and maxima go to st.
Sums merge_chunks(const std::vector<ChunkSums>& part, ErrorStats& st) {
  Sums s;
  for (const ChunkSums& p : part) {
    s.e.add(p.e);
    s.abs.add(p.abs);
    s.sq.add(p.sq);
    s.ref_sq.add(p.ref_sq);
    s.rel.add(p.rel);
    s.out.add(p.out);
    s.ref.add(p.ref);
    s.b2.add(p.b2);
    s.b.add(p.b);
    s.n_finite_bound += p.n_finite_bound;
    st.ulp_count += p.ulp_count;
    s.ulp0 += p.ulp0;
    s.ulp1 += p.ulp1;
    s.ulp2 += p.ulp2;
    s.ulp4 += p.ulp4;
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
  return s;
}

// ---- the bias's standard error, means and fractions ---------------------------------------------

/// Σ(e − bias)² over the finite pairs (per chunk, then in chunk order).
double sum_sq_deviation(const Inputs& in, double bias) {
  const std::int64_t chunks = in.chunks();
  std::vector<eft::CompensatedSum> dev(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(dynamic, 16)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const auto [lo, hi] = in.range(c);
    for (std::int64_t i = lo; i < hi; ++i)
      if (in.finite_pair(i)) {
        const double d = (in.out[i] - in.ref[i]) - bias;
        dev[static_cast<std::size_t>(c)].add(d * d);
      }
  }
  eft::CompensatedSum total;
  for (const auto& d : dev) total.add(d);
  return total.value();
}

/// The means, norms, bias (with the pass of its standard error) and ULP fractions from the sums.
void finish_moments(const Inputs& in, const Sums& s, ErrorStats& st) {
  const auto m = static_cast<double>(st.n_finite_pairs);
  if (st.n_finite_pairs > 0) {
    st.mean_abs_err = s.abs.value() / m;
    st.rms_abs_err = std::sqrt(s.sq.value() / m);
    st.mean_rel_err = s.rel.value() / m;
    st.bias = s.e.value() / m;
    st.mean_out = s.out.value() / m;
    st.mean_ref = s.ref.value() / m;
    st.mean_value_err = st.mean_out - st.mean_ref;
    st.err_norm2 = s.sq.value();
    st.ref_norm2 = s.ref_sq.value();
    const double ne = std::sqrt(s.sq.value()), nr = std::sqrt(s.ref_sq.value());
    st.normwise_rel_err = ratio_of(ne, nr);
    if (st.n_finite_pairs > 1)
      st.bias_stderr = std::sqrt(sum_sq_deviation(in, st.bias) / (m - 1) / m);
    st.sqrt_sum_bound_sq = std::sqrt(s.b2.value());
    if (s.n_finite_bound > 0) st.mean_bound = s.b.value() / static_cast<double>(s.n_finite_bound);
  }
  if (st.ulp_count > 0) {
    const auto u = static_cast<double>(st.ulp_count);
    st.frac_ulp_0 = static_cast<double>(s.ulp0) / u;
    st.frac_ulp_le1 = static_cast<double>(s.ulp1) / u;
    st.frac_ulp_le2 = static_cast<double>(s.ulp2) / u;
    st.frac_ulp_le4 = static_cast<double>(s.ulp4) / u;
  }
  st.pmax = st.max_abs_err;
}

// ---- pass 3: the percentiles --------------------------------------------------------------------
//
// Radix selection on the bit patterns (a non-negative double orders as its bit pattern). Pass 2
// counted the top 16 bits; each further round counts the next 16 bits of the values that share
// the prefix found so far, until all 64 bits — the value itself — are known, or gathers those
// values once there are at most kGatherMax of them and selects the rank among them. At most
// kGatherMax values are stored per percentile, so a rank among millions of equal values (the zero
// ratios of an output without a finite bound, all in one bucket) costs what any other rank costs,
// and a small input costs no 16-bit histograms at all. The same nearest-rank order statistic as
// sorting every value.

constexpr std::int64_t kGatherMax = std::int64_t{1} << 12;
/// The selections: p50, p90, p99, p999 of |e| (0–3), p99 of the ratios (4).
constexpr std::size_t kSelections = 5;

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

template <class T>
using PerSelection = std::array<T, kSelections>;

/// The state of the selections between rounds.
struct Selections {
  PerSelection<RankSpot> spots;
  PerSelection<std::uint64_t> prefix{};  ///< the bits found so far, right-aligned
  PerSelection<std::int64_t> sharing{};  ///< how many values share the prefix
  PerSelection<bool> resolved{};         ///< prefix holds the whole value
};

Selections locate_selections(const Buckets& buckets, std::int64_t n, bool bounded) {
  Selections s;
  const double qs[] = {0.5, 0.9, 0.99, 0.999};
  for (int k = 0; k < 4; ++k)
    s.spots[static_cast<std::size_t>(k)] = locate_rank(buckets.err, n, qs[k]);
  if (bounded) s.spots[4] = locate_rank(buckets.ratio, n, 0.99);
  for (std::size_t k = 0; k < kSelections; ++k) {
    s.prefix[k] = s.spots[k].bucket;
    if (s.spots[k].any) s.sharing[k] = (k < 4 ? buckets.err : buckets.ratio)[s.spots[k].bucket];
    s.resolved[k] = !s.spots[k].any;
  }
  return s;
}

/// One round: which selections count the next 16 bits (radix) or gather their values (gather),
/// and what the pass over the data found for them.
struct Round {
  int shift = 0;
  PerSelection<bool> radix{}, gather{};
  PerSelection<std::vector<std::int64_t>> counts;
  PerSelection<std::vector<std::uint64_t>> gathered;
};

/// The pass of one round over the finite pairs.
void count_round(const Inputs& in, const Selections& s, Round& rd) {
  const std::int64_t chunks = in.chunks();
  const int shift = rd.shift;
#pragma omp parallel
  {
    PerSelection<std::vector<std::int64_t>> mine;
    PerSelection<std::vector<std::uint64_t>> mine_values;
    for (std::size_t k = 0; k < kSelections; ++k)
      if (rd.radix[k]) mine[k].assign(kBuckets, 0);
    const auto take = [&](std::size_t k, std::uint64_t v) {
      if (rd.radix[k]) {
        if ((v >> (shift + 16)) == s.prefix[k])
          ++mine[k][static_cast<std::size_t>((v >> shift) & 0xFFFF)];
      } else if (rd.gather[k]) {
        if ((v >> (shift + 16)) == s.prefix[k]) mine_values[k].push_back(v);
      }
    };
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t c = 0; c < chunks; ++c) {
      const auto [lo, hi] = in.range(c);
      for (std::int64_t i = lo; i < hi; ++i) {
        if (!in.finite_pair(i)) continue;
        const double ae = std::fabs(in.out[i] - in.ref[i]);
        const std::uint64_t be = bits_of(ae);
        for (std::size_t k = 0; k < 4; ++k) take(k, be);
        if (in.bound && !s.resolved[4]) take(4, bits_of(ratio_of(ae, in.bound[i])));
      }
    }
#pragma omp critical
    for (std::size_t k = 0; k < kSelections; ++k) {
      for (std::size_t b = 0; b < mine[k].size(); ++b) rd.counts[k][b] += mine[k][b];
      rd.gathered[k].insert(rd.gathered[k].end(), mine_values[k].begin(), mine_values[k].end());
    }
  }
}

/// Narrows selection k by what its round found.
void resolve(Selections& s, Round& rd, std::size_t k) {
  if (rd.gather[k]) {  // the rank among the values sharing the prefix, by their bits
    std::vector<std::uint64_t>& v = rd.gathered[k];
    if (static_cast<std::int64_t>(v.size()) != s.sharing[k])
      throw std::logic_error("compute_error_stats: the percentile passes counted differently");
    const auto r = static_cast<std::ptrdiff_t>(s.spots[k].rank_in_bucket - 1);
    std::nth_element(v.begin(), v.begin() + r, v.end());
    s.prefix[k] = v[static_cast<std::size_t>(r)];
    s.resolved[k] = true;
  } else if (rd.radix[k]) {  // the next 16 bits, and the rank among the values sharing them
    const std::vector<std::int64_t>& counts = rd.counts[k];
    std::int64_t seen = 0;
    bool found = false;
    for (std::size_t b = 0; b < kBuckets && !found; ++b) {
      if (seen + counts[b] >= s.spots[k].rank_in_bucket) {
        s.prefix[k] = (s.prefix[k] << 16) | b;
        s.spots[k].rank_in_bucket -= seen;
        s.sharing[k] = counts[b];
        found = true;
      } else {
        seen += counts[b];
      }
    }
    if (!found)
      throw std::logic_error("compute_error_stats: the percentile passes counted differently");
    s.resolved[k] = rd.shift == 0;
  }
}

/// Pass 3: p50, p90, p99, p999 of |e| and (with bounds) p99 of the ratios into st.
void pass_percentiles(const Inputs& in, const Buckets& buckets, ErrorStats& st) {
  Selections s = locate_selections(buckets, st.n_finite_pairs, in.bound != nullptr);
  for (int shift = kBucketShift - 16; shift >= 0; shift -= 16) {
    Round rd;
    rd.shift = shift;
    bool any = false;
    for (std::size_t k = 0; k < kSelections; ++k) {
      rd.radix[k] = !s.resolved[k] && s.sharing[k] > kGatherMax;
      rd.gather[k] = !s.resolved[k] && s.sharing[k] <= kGatherMax;
      any = any || !s.resolved[k];
    }
    if (!any) break;
    for (std::size_t k = 0; k < kSelections; ++k)
      if (rd.radix[k]) rd.counts[k].assign(kBuckets, 0);
    count_round(in, s, rd);
    for (std::size_t k = 0; k < kSelections; ++k) resolve(s, rd, k);
  }
  const auto select = [&](std::size_t k) {
    if (!s.spots[k].any) return 0.0;
    double v;
    std::memcpy(&v, &s.prefix[k], sizeof v);
    return v;
  };
  st.p50 = select(0);
  st.p90 = select(1);
  st.p99 = select(2);
  st.p999 = select(3);
  if (in.bound) st.p99_ratio = select(4);
}

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
  const Inputs in{out, ref, bound, n, out_dtype, opt};
  pass_kinds(in, st);
  Buckets buckets;
  const std::vector<ChunkSums> part = pass_sums(in, st, buckets);
  finish_moments(in, merge_chunks(part, st), st);
  pass_percentiles(in, buckets, st);
  if (opt.prefix_counts) {
    opt.prefix_counts->err = std::move(buckets.err);
    opt.prefix_counts->ratio = std::move(buckets.ratio);
  }
  return st;
}

}  // namespace xentlab
