#pragma once
// Floating-point storage formats of the lab and exact round-to-nearest-even conversions.
//
// Every value xentlab stores in fp32, fp16 or bf16 is exactly representable in double, so the
// reference can read inputs without error. Conversions from double round once, to nearest with ties
// to even (IEEE 754-2019 §4.3.1), with gradual underflow and overflow to ±inf; a double→float→bf16
// path would round twice and is not used.
#include <cstdint>
#include <string>
#include <string_view>

namespace xentlab {

enum class DType : std::uint8_t { fp32, fp16, bf16, fp64 };

/// Parameters of a binary floating-point format: precision p (significand bits including the
/// implicit one), minimum normal exponent emin and maximum exponent emax.
struct FormatInfo {
  int precision;
  int emin;
  int emax;
};

FormatInfo format_info(DType t);
/// Unit roundoff u = 2^-p: 2^-24 fp32, 2^-11 fp16, 2^-8 bf16, 2^-53 fp64.
double unit_roundoff(DType t);
/// Largest finite value of the format (fp16 65504, bf16 ≈ 3.39e38).
double max_finite(DType t);
/// Smallest positive subnormal of the format.
double min_subnormal(DType t);
/// Size in bytes of one stored element.
int size_of(DType t);

/// "fp32", "fp16", "bf16", "fp64".
std::string_view to_string(DType t);
/// Parses "fp32"/"float32"/"f32", "fp16"/"float16"/"half", "bf16"/"bfloat16", "fp64"/"float64".
/// Throws InputError naming the text otherwise.
DType parse_dtype(std::string_view s);

/// Rounds x to the nearest value of format t (ties to even), returned as a double. NaN stays NaN;
/// values past the largest finite value round to ±inf exactly as an IEEE conversion would.
double round_to(double x, DType t);
/// round_to by its definition alone (the binade's quantum, nearbyint, the overflow check): what the
/// fast paths of round_to are tested against.
double round_to_by_definition(double x, DType t);
/// True when x is exactly representable in format t (NaN and ±inf count as representable).
bool representable(double x, DType t);

// Bit-level encodings of the 16-bit formats (for storage, files and the GPU).
std::uint16_t bf16_bits_from_double(double x);  // rounds to nearest even
std::uint16_t fp16_bits_from_double(double x);  // rounds to nearest even
double bf16_bits_to_double(std::uint16_t b);    // exact
double fp16_bits_to_double(std::uint16_t b);    // exact

}  // namespace xentlab
