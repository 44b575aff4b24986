#pragma once
// ULP distance in a floating-point format: the number of representable values of the format
// stepped over between two values (SLEEF/CORE-MATH convention of measuring against the correctly
// rounded result).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "numerics/dtype.hpp"

namespace xentlab {

/// Position of x among the values of format t, ordered: ordinal(+0) = ordinal(−0) = 0, the next
/// value above 0 (smallest subnormal) is 1, −x has −ordinal(x), ±Inf is ±(ordinal(max finite)+1).
/// x is rounded to t first (round_to). Throws InputError for NaN.
std::int64_t ordinal(double x, DType t);

/// |ordinal(a, t) − ordinal(b, t)| as a double (exact below 2^53): 0 for +0 vs −0, 1 between
/// adjacent values, including across zero (−min_subnormal to +min_subnormal is 2). Throws
/// InputError when a or b is NaN.
double ulp_distance(double a, double b, DType t);

namespace ulp_detail {
// ordinal(x, t) for finite x where t is bf16, fp16 or fp32 and |x| is 0 or in t's normal range
// (bf16 and fp16 rounded by adding half an ULP minus one plus the kept last bit, as round_to's
// bf16 path in numerics/dtype.cpp; fp32 by the conversion); false where it does not apply.
inline bool fast_ordinal(double x, DType t, std::int64_t& ord) {
  if (t == DType::fp64) return false;
  const double a = std::fabs(x);
  if (a == 0.0) {
    ord = 0;
    return true;
  }
  std::int64_t m = 0;
  if (t == DType::bf16) {
    if (!(a >= 0x1p-126 && a < 0x1.FFp127)) return false;
    std::uint64_t b;
    std::memcpy(&b, &a, sizeof b);
    b += (std::uint64_t{1} << 44) - 1 + ((b >> 45) & 1);  // round to nearest even at 8 bits
    // The double's exponent field and top 7 fraction bits; bf16's exponent bias is 896 less.
    m = static_cast<std::int64_t>(b >> 45) - (std::int64_t{896} << 7);
  } else if (t == DType::fp16) {
    // fp16's normal range; from 65520 on a value rounds to infinity.
    if (!(a >= 0x1p-14 && a < 65520.0)) return false;
    std::uint64_t b;
    std::memcpy(&b, &a, sizeof b);
    b += (std::uint64_t{1} << 41) - 1 + ((b >> 42) & 1);  // round to nearest even at 11 bits
    // The double's exponent field and top 10 fraction bits; fp16's exponent bias is 1008 less.
    m = static_cast<std::int64_t>(b >> 42) - (std::int64_t{1008} << 10);
  } else {
    if (!(a >= 0x1p-126)) return false;
    const float f = static_cast<float>(a);
    if (std::isinf(f)) return false;
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    m = static_cast<std::int64_t>(u);
  }
  ord = std::signbit(x) ? -m : m;
  return true;
}
}  // namespace ulp_detail

/// ulp_distance(a, b, t) for finite a and b on the fast paths (bf16, fp16 or fp32, each value 0
/// or in the format's normal range), inline: true and the distance in d. false, d
/// untouched, everywhere else (call ulp_distance). The error statistics take one per element.
inline bool ulp_distance_fast(double a, double b, DType t, double& d) {
  std::int64_t oa = 0, ob = 0;
  if (!ulp_detail::fast_ordinal(a, t, oa) || !ulp_detail::fast_ordinal(b, t, ob)) return false;
  if ((oa < 0) != (ob < 0))
    d = static_cast<double>(oa < 0 ? -oa : oa) + static_cast<double>(ob < 0 ? -ob : ob);
  else
    d = static_cast<double>(oa > ob ? oa - ob : ob - oa);
  return true;
}

}  // namespace xentlab
