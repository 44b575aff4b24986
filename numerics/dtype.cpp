#include "numerics/dtype.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "numerics/error.hpp"

namespace xentlab {

FormatInfo format_info(DType t) {
  switch (t) {
    case DType::fp32:
      return {24, -126, 127};
    case DType::fp16:
      return {11, -14, 15};
    case DType::bf16:
      return {8, -126, 127};
    case DType::fp64:
      return {53, -1022, 1023};
  }
  throw InputError("unknown dtype");
}

// unit_roundoff and max_finite are called per element by the bounds: constants by format, the
// values of 2^-precision and (2 − 2^(1−precision))·2^emax for format_info's fields (tested).
double unit_roundoff(DType t) {
  switch (t) {
    case DType::fp32:
      return 0x1p-24;
    case DType::fp16:
      return 0x1p-11;
    case DType::bf16:
      return 0x1p-8;
    case DType::fp64:
      return 0x1p-53;
  }
  throw InputError("unknown dtype");
}

double max_finite(DType t) {
  switch (t) {
    case DType::fp32:
      return 0x1.fffffep127;
    case DType::fp16:
      return 65504.0;
    case DType::bf16:
      return 0x1.fep127;
    case DType::fp64:
      return 0x1.fffffffffffffp1023;
  }
  throw InputError("unknown dtype");
}

double min_subnormal(DType t) {
  const FormatInfo f = format_info(t);
  return std::ldexp(1.0, f.emin - (f.precision - 1));
}

int size_of(DType t) {
  switch (t) {
    case DType::fp32:
      return 4;
    case DType::fp16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::fp64:
      return 8;
  }
  return 0;
}

std::string_view to_string(DType t) {
  switch (t) {
    case DType::fp32:
      return "fp32";
    case DType::fp16:
      return "fp16";
    case DType::bf16:
      return "bf16";
    case DType::fp64:
      return "fp64";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "float32" || s == "f32" || s == "float") return DType::fp32;
  if (s == "fp16" || s == "float16" || s == "f16" || s == "half") return DType::fp16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp64" || s == "float64" || s == "f64" || s == "double") return DType::fp64;
  throw InputError("unknown dtype '" + std::string(s) + "' (expected fp32, fp16, bf16 or fp64)");
}

double round_to(double x, DType t) {
  if (t == DType::fp64 || !std::isfinite(x) || x == 0.0) return x;
  // Fast paths (the error statistics round every reference value): the IEEE double → float
  // conversion is round to nearest even with gradual underflow and overflow to ±inf, the
  // definition below for fp32; bf16 in its normal range keeps the double's top 7 fraction bits
  // after adding half an ULP minus one plus the kept LSB (ties to even). Both are tested against
  // round_to_by_definition.
  // The conversion only in fp32's normal range: a flush-to-zero mode that a library of the same
  // process may set would change its subnormal results.
  if (t == DType::fp32 && std::fabs(x) >= 0x1p-126) return static_cast<float>(x);
  if (t == DType::bf16) {
    const double a = std::fabs(x);
    if (a >= 0x1p-126 && a < 0x1.FFp127) {  // the carry can raise the exponent by one at most
      std::uint64_t b;
      std::memcpy(&b, &x, 8);
      b += (std::uint64_t{1} << 44) - 1 + ((b >> 45) & 1);
      b &= ~((std::uint64_t{1} << 45) - 1);
      double y;
      std::memcpy(&y, &b, 8);
      return y;
    }
  }
  return round_to_by_definition(x, t);
}

double round_to_by_definition(double x, DType t) {
  if (t == DType::fp64 || !std::isfinite(x) || x == 0.0) return x;
  const FormatInfo f = format_info(t);
  // Quantum of the binade of x, clamped at the subnormal quantum: x is rounded to an integer
  // multiple of 2^q. ldexp is exact here (no double underflow for these formats) and nearbyint
  // rounds to nearest even in the default rounding mode.
  const int e = std::ilogb(x);
  const int q = (e < f.emin ? f.emin : e) - (f.precision - 1);
  const double y = std::ldexp(std::nearbyint(std::ldexp(x, -q)), q);
  if (std::fabs(y) > max_finite(t))
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  return y;
}

bool representable(double x, DType t) {
  if (std::isnan(x)) return true;
  return round_to(x, t) == x;
}

std::uint16_t bf16_bits_from_double(double x) {
  if (std::isnan(x)) return 0x7FC0;
  const float f = static_cast<float>(round_to(x, DType::bf16));  // exact: bf16 ⊂ fp32
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>(u >> 16);
}

double bf16_bits_to_double(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint16_t fp16_bits_from_double(double x) {
  if (std::isnan(x)) return 0x7E00;
  const double y = round_to(x, DType::fp16);
  const std::uint16_t sign = std::signbit(y) ? 0x8000 : 0;
  const double a = std::fabs(y);
  if (std::isinf(a)) return sign | 0x7C00;
  if (a == 0.0) return sign;
  const int e = std::ilogb(a);
  if (e < -14) {  // subnormal: a = m · 2^-24 with m < 1024
    return sign | static_cast<std::uint16_t>(std::ldexp(a, 24));
  }
  const auto mant = static_cast<std::uint16_t>(std::ldexp(a, 10 - e) - 1024.0);
  return sign | static_cast<std::uint16_t>((e + 15) << 10) | mant;
}

double fp16_bits_to_double(std::uint16_t b) {
  const double sign = (b & 0x8000) ? -1.0 : 1.0;
  const int exp = (b >> 10) & 0x1F;
  const int mant = b & 0x3FF;
  if (exp == 0x1F) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

}  // namespace xentlab
