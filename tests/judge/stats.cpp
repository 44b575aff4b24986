// Error statistics (judge/stats.hpp) and ULP distance (numerics/ulp.hpp) on hand-computed
// arrays: every expected value below is worked out by hand in the comment beside it.
#include "judge/stats.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "numerics/error.hpp"
#include "numerics/ulp.hpp"

namespace xentlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

ErrorStats stats(const std::vector<double>& out, const std::vector<double>& ref,
                 DType t = DType::fp64, const std::vector<double>* bound = nullptr,
                 StatsOptions o = {}) {
  return compute_error_stats(out.data(), ref.data(), static_cast<std::int64_t>(out.size()), t,
                             bound ? bound->data() : nullptr, o);
}

TEST(Stats, EmptyInputIsAllZero) {
  const ErrorStats s = compute_error_stats(nullptr, nullptr, 0, DType::fp32);
  EXPECT_EQ(s.n, 0);
  EXPECT_EQ(s.n_finite_pairs, 0);
  EXPECT_EQ(s.finiteness_mismatches, 0);
  EXPECT_EQ(s.max_abs_err, 0.0);
  EXPECT_EQ(s.max_abs_err_index, -1);
  EXPECT_EQ(s.normwise_rel_err, 0.0);
  EXPECT_EQ(s.frac_ulp_le1, 0.0);
  EXPECT_EQ(s.p99, 0.0);
  EXPECT_EQ(s.abs_err_hist.total(), 0);
}

TEST(Stats, RejectsBadArguments) {
  const double v = 1.0, nan_bound = kNaN;
  EXPECT_THROW(compute_error_stats(&v, &v, -1, DType::fp32), InputError);
  EXPECT_THROW(compute_error_stats(nullptr, &v, 1, DType::fp32), InputError);
  EXPECT_THROW(compute_error_stats(&v, &v, 1, DType::fp32, &nan_bound), InputError);
}

TEST(Stats, AbsoluteRmsMeanNormwiseBias) {
  // e = {0, −0.5, +0.5}: max |e| 0.5 first at index 1 (out 2, ref 2.5); Σe² = 0.5, so
  // RMS = sqrt(0.5/3); mean |e| = 1/3; bias 0; ‖ref‖² = 1 + 6.25 + 9 = 16.25.
  const ErrorStats s = stats({1, 2, 3.5}, {1, 2.5, 3});
  EXPECT_EQ(s.n_finite_pairs, 3);
  EXPECT_EQ(s.max_abs_err, 0.5);
  EXPECT_EQ(s.max_abs_err_index, 1);
  EXPECT_EQ(s.max_abs_err_out, 2.0);
  EXPECT_EQ(s.max_abs_err_ref, 2.5);
  EXPECT_DOUBLE_EQ(s.rms_abs_err, std::sqrt(0.5 / 3));
  EXPECT_DOUBLE_EQ(s.mean_abs_err, 1.0 / 3);
  EXPECT_EQ(s.bias, 0.0);
  EXPECT_DOUBLE_EQ(s.normwise_rel_err, std::sqrt(0.5) / std::sqrt(16.25));
  // mean(out) = 6.5/3, mean(ref) = 6.5/3: the batch mean has no error.
  EXPECT_EQ(s.mean_value_err, 0.0);
}

TEST(Stats, BiasAndItsStandardError) {
  // e = {1, 3}: bias 2; deviations ±1, sample variance 2/(2−1) = 2, stderr sqrt(2/2) = 1.
  const ErrorStats s = stats({11, 23}, {10, 20});
  EXPECT_EQ(s.bias, 2.0);
  EXPECT_DOUBLE_EQ(s.bias_stderr, 1.0);
  EXPECT_EQ(s.mean_value_err, 2.0);  // (17) − (15)
}

TEST(Stats, NonFiniteValuesAreCountedAndCompared) {
  // pair 0 NaN vs 1 (mismatch, ref finite); 1 +Inf vs +Inf (agree); 2 −Inf vs 1 (mismatch, ref
  // finite); 3: 1 vs NaN (mismatch, ref non-finite); 4: +Inf vs 2 (mismatch, ref finite);
  // 5: NaN vs NaN (agree); 6: 5 vs 4 (the only finite pair).
  const ErrorStats s = stats({kNaN, kInf, -kInf, 1, kInf, kNaN, 5}, {1, kInf, 1, kNaN, 2, kNaN, 4});
  EXPECT_EQ(s.out_nan, 2);
  EXPECT_EQ(s.out_posinf, 2);
  EXPECT_EQ(s.out_neginf, 1);
  EXPECT_EQ(s.ref_nan, 2);
  EXPECT_EQ(s.ref_posinf, 1);
  EXPECT_EQ(s.ref_neginf, 0);
  EXPECT_EQ(s.finiteness_mismatches, 4);
  EXPECT_EQ(s.nonfinite_where_ref_finite, 3);
  EXPECT_EQ(s.first_mismatch_index, 0);
  EXPECT_EQ(s.n_finite_pairs, 1);
  EXPECT_EQ(s.max_abs_err, 1.0);
  EXPECT_EQ(s.max_abs_err_index, 6);
}

TEST(Stats, SignedZerosAgree) {
  const ErrorStats s = stats({-0.0, 0.0}, {0.0, -0.0}, DType::fp32);
  EXPECT_EQ(s.max_abs_err, 0.0);
  EXPECT_EQ(s.frac_ulp_0, 1.0);
  EXPECT_EQ(s.max_ulp, 0.0);
  EXPECT_EQ(s.finiteness_mismatches, 0);
}

TEST(Ulp, DistancesByHand) {
  // fp32: 1 and 1 + 2^-23 are adjacent.
  EXPECT_EQ(ulp_distance(1.0 + 0x1p-23, 1.0, DType::fp32), 1.0);
  // bf16 (p = 8): 1 and 1 + 2^-7 adjacent; 1 − 2^-8 is the value just below 1.
  EXPECT_EQ(ulp_distance(1.0 + 0x1p-7, 1.0, DType::bf16), 1.0);
  EXPECT_EQ(ulp_distance(1.0 - 0x1p-8, 1.0 + 0x1p-7, DType::bf16), 2.0);
  // Across zero: −min_subnormal, ±0, +min_subnormal: distance 2; ±0 distance 0.
  EXPECT_EQ(ulp_distance(-0x1p-149, 0x1p-149, DType::fp32), 2.0);
  EXPECT_EQ(ulp_distance(-0.0, 0.0, DType::fp16), 0.0);
  // fp16 subnormals are multiples of 2^-24.
  EXPECT_EQ(ulp_distance(3 * 0x1p-24, 0x1p-24, DType::fp16), 2.0);
  // Infinity is one step past the largest finite value.
  EXPECT_EQ(ulp_distance(kInf, 65504.0, DType::fp16), 1.0);
  EXPECT_EQ(ordinal(kInf, DType::bf16), ordinal(max_finite(DType::bf16), DType::bf16) + 1);
  // fp64: 1 and nextafter(1, 2).
  EXPECT_EQ(ulp_distance(std::nextafter(1.0, 2.0), 1.0, DType::fp64), 1.0);
  EXPECT_THROW(ulp_distance(kNaN, 1.0, DType::fp32), InputError);
}

// The inline fast paths that the statistics take per element give ulp_distance's value exactly:
// random magnitudes over every binade of the formats (and beyond), both signs, and the edges of
// the fast paths (0, the smallest normals and their neighbours, bf16's rounding limit 0x1.FFp127,
// fp16's 65504 and 65520, fp32's largest value and the doubles that round to it or overflow).
TEST(Ulp, FastPathsAreTheDistance) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> expo(-170, 140), sign(0, 1);
  std::vector<double> v = {0.0,
                           -0.0,
                           0x1p-126,
                           std::nextafter(0x1p-126, 0.0),
                           std::nextafter(0x1p-126, 1.0),
                           0x1.FEp127,
                           std::nextafter(0x1.FFp127, 0.0),
                           0x1.FFp127,
                           double(std::numeric_limits<float>::max()),
                           std::nextafter(double(std::numeric_limits<float>::max()), kInf),
                           0x1.FFFFFFp127,
                           0x1p-14,
                           std::nextafter(0x1p-14, 0.0),
                           65504.0,
                           std::nextafter(65520.0, 0.0),
                           65520.0,
                           1.0 + 0x1p-11,
                           1.0 + 0x1p-8,
                           1.0 + 3 * 0x1p-9,
                           1.0};
  for (int k = 0; k < 20000; ++k)
    v.push_back((sign(rng) ? -1.0 : 1.0) * std::ldexp(mant(rng), expo(rng)));
  // Where every fast path applies: 0, or between fp16's smallest normal 2^-14 and 2^15 (inside
  // fp16's, bf16's and fp32's normal ranges).
  const auto in_range = [](double x) {
    return x == 0.0 || (std::fabs(x) >= 0x1p-14 && std::fabs(x) < 0x1p15);
  };
  for (const DType t : {DType::bf16, DType::fp32, DType::fp16, DType::fp64}) {
    std::int64_t fast = 0;
    for (std::size_t i = 0; i + 1 < v.size(); ++i) {
      // Neighbours in the list, and a value against a value near it (a few ULPs of t away).
      const double a = v[i], b = v[i + 1], c = a * (1.0 + 3 * unit_roundoff(t));
      for (const double y : {b, c}) {
        double d = -1.0;
        if (ulp_distance_fast(a, y, t, d)) {
          ++fast;
          ASSERT_EQ(d, ulp_distance(a, y, t)) << to_string(t) << " " << a << " " << y;
        }
        if (t != DType::fp64 && in_range(a) && in_range(y)) {
          EXPECT_TRUE(ulp_distance_fast(a, y, t, d)) << to_string(t) << " " << a << " " << y;
        }
      }
    }
    if (t != DType::fp64)
      EXPECT_GT(fast, 1000) << to_string(t);  // the fast path is taken where it applies
    else
      EXPECT_EQ(fast, 0) << to_string(t);  // fp64 always takes ulp_distance
  }
}

// bin_of reads the exponent field: the bin of floor(log2 x) as ilogb gives it, for every binade
// of the doubles (subnormal doubles underflow).
TEST(Histogram, BinOfIsFloorLog2) {
  std::vector<double> v = {0x1p-1074,
                           0x1p-1022,
                           0x1p-161,
                           std::nextafter(0x1p-160, 0.0),
                           0x1p-160,
                           1.0,
                           std::nextafter(0x1p64, 0.0),
                           0x1p64,
                           0x1p1023};
  for (int e = -1074; e <= 1023; ++e) v.push_back(std::ldexp(1.5, e));
  for (const double x : v) {
    if (!(x > 0) || !std::isfinite(x)) continue;
    const int e = std::ilogb(x);
    const int want = e < Histogram::kMinExp    ? -1
                     : e >= Histogram::kMaxExp ? Histogram::kBins
                                               : e - Histogram::kMinExp;
    EXPECT_EQ(Histogram::bin_of(x), want) << x;
  }
}

TEST(Stats, UlpFractionsAgainstCorrectlyRoundedReference) {
  // fp32 around 1 (spacing 2^-23): distances 0, 1, 2, 3, 5 → fractions 0.2, 0.4, 0.6, 0.8, max 5.
  const double q = 0x1p-23;
  const ErrorStats s =
      stats({1, 1 + q, 1 + 2 * q, 1 + 3 * q, 1 + 5 * q}, {1, 1, 1, 1, 1}, DType::fp32);
  EXPECT_EQ(s.ulp_count, 5);
  EXPECT_DOUBLE_EQ(s.frac_ulp_0, 0.2);
  EXPECT_DOUBLE_EQ(s.frac_ulp_le1, 0.4);
  EXPECT_DOUBLE_EQ(s.frac_ulp_le2, 0.6);
  EXPECT_DOUBLE_EQ(s.frac_ulp_le4, 0.8);
  EXPECT_EQ(s.max_ulp, 5.0);
  EXPECT_EQ(s.max_ulp_index, 4);
  // The reference is rounded first: 1 + 2^-9 is 1 in bf16, so an output of 1 is 0 ULP away;
  // 70000 rounds to +Inf in fp16, so an output of +Inf is 0 ULP (and a finiteness mismatch
  // against the exact reference, counted separately).
  const ErrorStats r = stats({1.0}, {1.0 + 0x1p-9}, DType::bf16);
  EXPECT_EQ(r.max_ulp, 0.0);
  const ErrorStats o = stats({kInf}, {70000.0}, DType::fp16);
  EXPECT_EQ(o.ulp_count, 1);
  EXPECT_EQ(o.max_ulp, 0.0);
  EXPECT_EQ(o.finiteness_mismatches, 1);
  // Subnormal outputs in fp16: 2^-24 vs reference 2^-23 → 1 ULP.
  const ErrorStats sub = stats({0x1p-24}, {0x1p-23}, DType::fp16);
  EXPECT_EQ(sub.max_ulp, 1.0);
}

TEST(Stats, PercentilesAreOrderStatistics) {
  // |e| = 1, 2, …, 1000 (in a scrambled order): nearest rank ceil(q·1000).
  std::vector<double> out, ref;
  for (int k = 1; k <= 1000; ++k) {
    const int v =
        (k * 7919) % 1000 + 1;  // a permutation of 1..1000 (7919 is prime, coprime to 1000)
    out.push_back(static_cast<double>(v));
    ref.push_back(0.0);
  }
  const ErrorStats s = stats(out, ref);
  EXPECT_EQ(s.p50, 500.0);
  EXPECT_EQ(s.p90, 900.0);
  EXPECT_EQ(s.p99, 990.0);
  EXPECT_EQ(s.p999, 999.0);
  EXPECT_EQ(s.pmax, 1000.0);
}

TEST(Stats, RelativeErrorUsesTheFloor) {
  // floor = 2^-20·max|ref| = 2^-20·2^10 = 2^-10. ref 0, |e| = 2^-10 → relative 1; ref 1024, |e| = 1
  // → 2^-10.
  StatsOptions o;
  o.rel_floor_rel = 0x1p-20;
  const ErrorStats s = stats({0x1p-10, 1025}, {0, 1024}, DType::fp64, nullptr, o);
  EXPECT_EQ(s.rel_floor, 0x1p-10);
  EXPECT_EQ(s.max_rel_err, 1.0);
  EXPECT_EQ(s.max_rel_err_index, 0);
  EXPECT_DOUBLE_EQ(s.mean_rel_err, (1.0 + 0x1p-10) / 2);
}

TEST(Stats, RatioToBound) {
  // |e| = {0.5, 0.5, 0, 0.25}, bounds {1, 0.25, 0, +Inf}: ratios 0.5, 2, 0, 0 → max 2 at 1; one
  // element over its bound; one infinite bound; sqrt(Σb²) over finite bounds = sqrt(1 + 1/16).
  const std::vector<double> b{1, 0.25, 0, kInf};
  const ErrorStats s = stats({1.5, 2.5, 3, 4.25}, {1, 2, 3, 4}, DType::fp64, &b);
  EXPECT_TRUE(s.has_bounds);
  EXPECT_EQ(s.max_ratio, 2.0);
  EXPECT_EQ(s.max_ratio_index, 1);
  EXPECT_EQ(s.max_ratio_err, 0.5);
  EXPECT_EQ(s.max_ratio_bound, 0.25);
  EXPECT_EQ(s.n_over_bound, 1);
  EXPECT_EQ(s.n_infinite_bound, 1);
  EXPECT_DOUBLE_EQ(s.sqrt_sum_bound_sq, std::sqrt(1.0 + 1.0 / 16));
  // A non-zero error against a zero bound is an infinite ratio.
  const std::vector<double> z{0};
  EXPECT_EQ(stats({1}, {0}, DType::fp64, &z).max_ratio, kInf);
}

// Most values equal (one bucket holds nearly all of them): the zero ratios of elements whose
// bound is infinite, and one repeated error; the percentiles are still the nearest-rank order
// statistics, found without storing the bucket's values.
TEST(Stats, PercentilesAmongManyEqualValues) {
  const std::int64_t n = 200000;
  std::vector<double> ref(static_cast<std::size_t>(n), 1.0), out(ref.size()), bound(ref.size());
  std::vector<double> errs, ratios;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const bool rare = i % 199 == 0;  // about 0.5 % of the elements
    out[i] = 1.0 + (rare ? std::ldexp(1.0 + static_cast<double>(i % 13), -12) : 0x1p-20);
    bound[i] = rare ? 0x1p-9 : kInf;
    const double ae = std::fabs(out[i] - ref[i]);
    errs.push_back(ae);
    ratios.push_back(ae / bound[i]);
  }
  std::sort(errs.begin(), errs.end());
  std::sort(ratios.begin(), ratios.end());
  const auto nearest_rank = [](const std::vector<double>& v, double q) {
    const auto r = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::max<std::size_t>(r, 1) - 1];
  };
  const ErrorStats s = stats(out, ref, DType::fp32, &bound);
  EXPECT_EQ(s.p50, 0x1p-20);
  EXPECT_EQ(s.p50, nearest_rank(errs, 0.5));
  EXPECT_EQ(s.p90, nearest_rank(errs, 0.9));
  EXPECT_EQ(s.p99, nearest_rank(errs, 0.99));
  EXPECT_EQ(s.p999, nearest_rank(errs, 0.999));
  EXPECT_GT(s.p999, 0x1p-20);  // in the rare errors' range
  EXPECT_EQ(s.p99_ratio, nearest_rank(ratios, 0.99));
  EXPECT_EQ(s.p99_ratio, 0.0);
}

// Errors and ratios that share their top 16, 32 or 48 bits and differ below (each radix pass of
// the percentiles decides, or hands a small remainder to the gather), and small inputs (gathered
// at once): the percentiles are the nearest-rank order statistics of the sorted values.
TEST(Stats, PercentilesOfValuesThatDifferInTheirLowBits) {
  std::mt19937_64 rng(11);
  const auto nearest_rank = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    const auto r = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::max<std::size_t>(r, 1) - 1];
  };
  for (const std::uint64_t low :
       {0xFFFFFFFFFFFFull, 0x3FFFFFFFFull, 0xFFFFFFFFull, 0xFFFFull, 0x7ull}) {
    for (const std::size_t n : {std::size_t{300000}, std::size_t{5000}, std::size_t{3}}) {
      std::vector<double> ref(n, 0.0), out(n), bound(n), errs, ratios;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t bits = 0x3F10000000000000ull | (rng() & low);
        std::memcpy(&out[i], &bits, sizeof bits);
        bound[i] = rng() % 2 ? 0x1p-10 : 0x1p-300;
        errs.push_back(out[i]);
        ratios.push_back(out[i] / bound[i]);
      }
      const ErrorStats s = stats(out, ref, DType::fp64, &bound);
      EXPECT_EQ(s.p50, nearest_rank(errs, 0.5)) << low << " " << n;
      EXPECT_EQ(s.p90, nearest_rank(errs, 0.9)) << low << " " << n;
      EXPECT_EQ(s.p99, nearest_rank(errs, 0.99)) << low << " " << n;
      EXPECT_EQ(s.p999, nearest_rank(errs, 0.999)) << low << " " << n;
      EXPECT_EQ(s.p99_ratio, nearest_rank(ratios, 0.99)) << low << " " << n;
    }
  }
}

// Large inputs run over chunks in parallel and find percentiles by bucket selection: the order
// statistics must equal those of sorting every value (computed here independently), the maxima
// must sit at the first index attaining them, and every field must have the same bits on one
// thread and on several.
TEST(Stats, ChunkedStatisticsAreExactAndIndependentOfThreads) {
  const std::int64_t n = 300007;  // several chunks of 2^16 and a partial one
  std::mt19937_64 rng(7);
  std::normal_distribution<double> g;
  std::vector<double> ref(static_cast<std::size_t>(n)), out(ref.size()), bound(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    ref[i] = g(rng);
    // Errors over many octaves, with repeated values (ties) and exact zeros.
    const double e = (i % 7 == 0) ? 0.0 : std::ldexp(g(rng), -static_cast<int>(i % 40));
    out[i] = (i % 11 == 0) ? ref[i] + 0x1p-20 : ref[i] + e;
    bound[i] = (i % 13 == 0) ? kInf : std::ldexp(1.0, -static_cast<int>(i % 30));
  }
  out[5] = kNaN;
  out[70000] = kInf;
  ref[200000] = -kInf;
  // The largest error, twice: the first index attaining it is reported.
  ref[123456] = ref[250000] = 0.5;
  out[123456] = out[250000] = 1000.5;

  std::vector<double> errs, ratios;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i]) || !std::isfinite(ref[i])) continue;
    const double ae = std::fabs(out[i] - ref[i]);
    errs.push_back(ae);
    ratios.push_back(bound[i] > 0 ? ae / bound[i] : (ae > 0 ? kInf : 0.0));
  }
  std::sort(errs.begin(), errs.end());
  std::sort(ratios.begin(), ratios.end());
  const auto nearest_rank = [](const std::vector<double>& v, double q) {
    const auto r = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::max<std::size_t>(r, 1) - 1];
  };

  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const ErrorStats one = stats(out, ref, DType::fp32, &bound);
  omp_set_num_threads(3);
  const ErrorStats three = stats(out, ref, DType::fp32, &bound);
  omp_set_num_threads(saved);

  EXPECT_EQ(one.n_finite_pairs, static_cast<std::int64_t>(errs.size()));
  EXPECT_EQ(one.p50, nearest_rank(errs, 0.5));
  EXPECT_EQ(one.p90, nearest_rank(errs, 0.9));
  EXPECT_EQ(one.p99, nearest_rank(errs, 0.99));
  EXPECT_EQ(one.p999, nearest_rank(errs, 0.999));
  EXPECT_EQ(one.p99_ratio, nearest_rank(ratios, 0.99));
  EXPECT_EQ(one.pmax, errs.back());
  EXPECT_EQ(one.first_mismatch_index, 5);
  EXPECT_EQ(one.finiteness_mismatches, 3);
  EXPECT_EQ(one.max_abs_err, 1000.0);
  EXPECT_EQ(one.max_abs_err_index, 123456);
  EXPECT_EQ(three.max_abs_err_index, 123456);

  // Every field, bit for bit, on 1 and 3 threads.
  const auto same = [](double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  for (auto [a, b] : {std::pair{one.mean_abs_err, three.mean_abs_err},
                      {one.rms_abs_err, three.rms_abs_err},
                      {one.mean_rel_err, three.mean_rel_err},
                      {one.normwise_rel_err, three.normwise_rel_err},
                      {one.bias, three.bias},
                      {one.bias_stderr, three.bias_stderr},
                      {one.mean_value_err, three.mean_value_err},
                      {one.max_rel_err, three.max_rel_err},
                      {one.max_ulp, three.max_ulp},
                      {one.frac_ulp_le1, three.frac_ulp_le1},
                      {one.p50, three.p50},
                      {one.p999, three.p999},
                      {one.p99_ratio, three.p99_ratio},
                      {one.max_ratio, three.max_ratio},
                      {one.sqrt_sum_bound_sq, three.sqrt_sum_bound_sq},
                      {one.mean_bound, three.mean_bound}})
    EXPECT_TRUE(same(a, b)) << a << " vs " << b;
  EXPECT_EQ(one.max_rel_err_index, three.max_rel_err_index);
  EXPECT_EQ(one.max_ratio_index, three.max_ratio_index);
  EXPECT_EQ(one.max_ulp_index, three.max_ulp_index);
  EXPECT_EQ(one.n_over_bound, three.n_over_bound);
  EXPECT_EQ(one.n_infinite_bound, three.n_infinite_bound);
  EXPECT_EQ(one.abs_err_hist.bins, three.abs_err_hist.bins);
  EXPECT_EQ(one.ratio_hist.bins, three.ratio_hist.bins);
}

TEST(Histogram, FixedLog2BinsAndMerge) {
  Histogram h;
  for (double v : {0.0, -0.0, 1.0, 1.5, 2.0, -3.0, 0x1p-200, kInf, kNaN, 0x1p70}) h.add(v);
  EXPECT_EQ(h.zero, 2);
  EXPECT_EQ(h.bins[static_cast<std::size_t>(Histogram::bin_of(1.0))], 2);  // [1, 2): 1, 1.5
  EXPECT_EQ(h.bins[static_cast<std::size_t>(Histogram::bin_of(2.0))], 2);  // [2, 4): 2, |−3|
  EXPECT_EQ(Histogram::bin_of(1.0) + 1, Histogram::bin_of(2.0));
  EXPECT_EQ(Histogram::bin_lower(Histogram::bin_of(1.0)), 1.0);
  EXPECT_EQ(h.underflow, 1);
  EXPECT_EQ(h.overflow, 2);  // +Inf and 2^70
  EXPECT_EQ(h.nan, 1);
  EXPECT_EQ(h.total(), 10);
  Histogram g;
  g.add(1.25);
  Histogram gh = g, hg = h;
  gh.merge(h);
  hg.merge(g);
  EXPECT_EQ(gh.total(), 11);
  EXPECT_EQ(gh.bins, hg.bins);
  EXPECT_EQ(gh.bins[static_cast<std::size_t>(Histogram::bin_of(1.0))], 3);
  // Quantiles: of {0, 0, …} the 0.2-quantile (rank 2 of 10) is in the zero bin; rank 3 is the
  // underflow bin (upper edge 2^kMinExp); rank 4 (q = 0.4) is in [1, 2) → upper edge 2.
  EXPECT_EQ(h.quantile_upper(0.2), 0.0);
  EXPECT_EQ(h.quantile_upper(0.3), std::ldexp(1.0, Histogram::kMinExp));
  EXPECT_EQ(h.quantile_upper(0.4), 2.0);
  EXPECT_EQ(h.quantile_upper(1.0), kInf);
  EXPECT_THROW(h.quantile_upper(0.0), InputError);
}

TEST(Stats, HistogramsOfARunAreFilled) {
  const ErrorStats s = stats({1.5, 2.5}, {1, 2});
  EXPECT_EQ(s.abs_err_hist.total(), 2);
  EXPECT_EQ(s.abs_err_hist.bins[static_cast<std::size_t>(Histogram::bin_of(0.5))], 2);
}

}  // namespace
}  // namespace xentlab
