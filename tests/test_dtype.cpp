// Round-to-nearest-even conversions into fp32/fp16/bf16, checked against IEEE facts: hardware
// float conversion for fp32, and the formats' defining constants for the 16-bit ones.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "numerics/dtype.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace {

TEST(DType, UnitRoundoffAndLimits) {
  EXPECT_EQ(unit_roundoff(DType::fp32), std::ldexp(1.0, -24));
  EXPECT_EQ(unit_roundoff(DType::fp16), std::ldexp(1.0, -11));
  EXPECT_EQ(unit_roundoff(DType::bf16), std::ldexp(1.0, -8));
  EXPECT_EQ(max_finite(DType::fp16), 65504.0);
  EXPECT_EQ(max_finite(DType::fp32), static_cast<double>(std::numeric_limits<float>::max()));
  EXPECT_EQ(unit_roundoff(DType::fp64), std::numeric_limits<double>::epsilon() / 2);
  EXPECT_EQ(max_finite(DType::fp64), std::numeric_limits<double>::max());
  // The constants are the formats' fields: u = 2^-p, max = (2 − 2^(1−p))·2^emax.
  for (DType t : {DType::fp32, DType::fp16, DType::bf16, DType::fp64}) {
    const FormatInfo f = format_info(t);
    EXPECT_EQ(unit_roundoff(t), std::ldexp(1.0, -f.precision)) << to_string(t);
    EXPECT_EQ(max_finite(t), std::ldexp(2.0 - std::ldexp(1.0, 1 - f.precision), f.emax))
        << to_string(t);
  }
  EXPECT_EQ(min_subnormal(DType::fp16), std::ldexp(1.0, -24));
  EXPECT_EQ(min_subnormal(DType::fp32),
            static_cast<double>(std::numeric_limits<float>::denorm_min()));
}

TEST(DType, Fp32RoundingMatchesHardwareConversion) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> ex(-160, 130);
  for (int k = 0; k < 200000; ++k) {
    const double x = std::ldexp(mant(rng), ex(rng)) * (k % 2 ? -1 : 1);
    ASSERT_EQ(round_to(x, DType::fp32), static_cast<double>(static_cast<float>(x))) << x;
  }
}

TEST(DType, TiesToEven) {
  // bf16 has 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 → 1 (even).
  EXPECT_EQ(round_to(1.0 + std::ldexp(1.0, -8), DType::bf16), 1.0);
  EXPECT_EQ(round_to(1.0 + 3 * std::ldexp(1.0, -8), DType::bf16), 1.0 + std::ldexp(1.0, -6));
  // fp16: 2049 is a tie between 2048 and 2050 → 2048; 2051 → 2052.
  EXPECT_EQ(round_to(2049.0, DType::fp16), 2048.0);
  EXPECT_EQ(round_to(2051.0, DType::fp16), 2052.0);
  // Single rounding from double (double→float→bf16 would round twice): 1 + 2^-8 + 2^-30 is
  // above the tie, so it rounds up; via float it would first become the tie 1 + 2^-8 → 1.
  EXPECT_EQ(round_to(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), DType::bf16),
            1.0 + std::ldexp(1.0, -7));
}

TEST(DType, OverflowAndUnderflow) {
  EXPECT_EQ(round_to(65519.0, DType::fp16), 65504.0);
  EXPECT_EQ(round_to(65520.0, DType::fp16), HUGE_VAL);  // the tie rounds to even = 2^16 → inf
  EXPECT_EQ(round_to(-1e6, DType::fp16), -HUGE_VAL);
  EXPECT_EQ(round_to(std::ldexp(1.0, -25), DType::fp16), 0.0);                   // tie → 0
  EXPECT_EQ(round_to(std::ldexp(1.5, -25), DType::fp16), std::ldexp(1.0, -24));  // above tie
  EXPECT_EQ(round_to(std::ldexp(3.0, -25), DType::fp16), std::ldexp(1.0, -23));  // tie → even
  EXPECT_TRUE(std::isnan(round_to(std::nan(""), DType::bf16)));
  EXPECT_TRUE(std::signbit(round_to(-0.0, DType::fp16)));
}

TEST(DType, SixteenBitEncodingsRoundTripEveryPattern) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const double h = fp16_bits_to_double(bits);
    if (std::isnan(h)) {
      EXPECT_TRUE(std::isnan(fp16_bits_to_double(fp16_bits_from_double(h))));
    } else {
      ASSERT_EQ(fp16_bits_from_double(h), bits) << b;
      EXPECT_TRUE(representable(h, DType::fp16));
    }
    const double f = bf16_bits_to_double(bits);
    if (!std::isnan(f)) {
      ASSERT_EQ(bf16_bits_from_double(f), bits) << b;
    }
  }
  EXPECT_EQ(fp16_bits_to_double(0x3C00), 1.0);
  EXPECT_EQ(fp16_bits_to_double(0x7BFF), 65504.0);
  EXPECT_EQ(fp16_bits_to_double(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(bf16_bits_to_double(0x3F80), 1.0);
}

TEST(DType, Parse) {
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16"), DType::fp16);
  EXPECT_THROW(parse_dtype("fp8"), InputError);
}

}  // namespace
}  // namespace xentlab
