// ULP distance: ordinal position of a value among the values of its format (see ulp.hpp).
#include "numerics/ulp.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include "numerics/error.hpp"

namespace xentlab {
namespace {

// Magnitude ordinal of a finite |x| ≥ 0 that is representable in t: the number of non-negative
// values of t below |x|. For the IEEE formats this is the bit pattern of |x| read as an integer
// (exponent field above the significand field, subnormals first).
std::int64_t magnitude_ordinal(double ax, DType t) {
  switch (t) {
    case DType::fp64: {
      std::uint64_t b;
      std::memcpy(&b, &ax, sizeof b);
      return static_cast<std::int64_t>(b);
    }
    case DType::fp32: {
      const float f = static_cast<float>(ax);  // exact: ax representable in fp32
      std::uint32_t b;
      std::memcpy(&b, &f, sizeof b);
      return static_cast<std::int64_t>(b);
    }
    case DType::bf16:
      return static_cast<std::int64_t>(bf16_bits_from_double(ax));
    case DType::fp16:
      return static_cast<std::int64_t>(fp16_bits_from_double(ax));
  }
  return 0;
}

}  // namespace

std::int64_t ordinal(double x, DType t) {
  if (std::isnan(x))
    throw InputError("ordinal: NaN has no position among the values of " +
                     std::string(to_string(t)));
  const double r = round_to(x, t);
  // ±Inf: the bit pattern of Inf is exactly one past that of the largest finite value.
  const std::int64_t m = magnitude_ordinal(std::fabs(r), t);
  return std::signbit(r) ? -m : m;
}

double ulp_distance(double a, double b, DType t) {
  if (std::isnan(a) || std::isnan(b))
    throw InputError("ulp_distance: NaN operand (" + std::to_string(a) + ", " + std::to_string(b) +
                     ")");
  const std::int64_t oa = ordinal(a, t), ob = ordinal(b, t);
  // Differences of fp64 ordinals can exceed int64 when signs differ: form them in double
  // (exact below 2^53, which covers every fp32/fp16/bf16 distance).
  if ((oa < 0) != (ob < 0))
    return static_cast<double>(oa < 0 ? -oa : oa) + static_cast<double>(ob < 0 ? -ob : ob);
  return static_cast<double>(oa > ob ? oa - ob : ob - oa);
}

}  // namespace xentlab
