#pragma once
// ULP distance in a floating-point format: the number of representable values of the format
// stepped over between two values (SLEEF/CORE-MATH convention of measuring against the correctly
// rounded result).
#include <cstdint>

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

}  // namespace xentlab
