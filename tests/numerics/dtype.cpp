// Round-to-nearest-even conversions into fp32/fp16/bf16, checked against IEEE facts: hardware
// float conversion for fp32, and the formats' defining constants for the 16-bit ones.
#include "numerics/dtype.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

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

TEST(DType, FastRoundingIsTheDefinition) {
  // round_to's fast paths (fp32 by conversion, bf16 by bits in its normal range) against the
  // definition: random values over every binade from below the subnormals to past the largest
  // finite value, exact ties between neighbours, and the overflow threshold.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> ex(-160, 130);
  std::vector<double> xs = {0x1.FEp127, 0x1.FF8p127, 0x1.FFp127, 0x1.FEFFFFFFFFFFFp127,
                            0x1p-126,   0x1.FFp-127, 0x1p-133,   0x1p-134,
                            0x1.8p-134, 65504.0,     65520.0};
  for (int k = 0; k < 200000; ++k) {
    const double m = std::ldexp(mant(rng), ex(rng));
    xs.push_back(m);
    // A tie of bf16 (8 significant bits) and of fp32 (24): a representable value plus half its
    // quantum.
    const double b = round_to_by_definition(m, DType::bf16);
    if (std::isfinite(b) && b != 0) {
      xs.push_back(b + std::ldexp(1.0, std::ilogb(b) - 8));
      xs.push_back(b - std::ldexp(1.0, std::ilogb(b) - 8));
    }
    const double f = round_to_by_definition(m, DType::fp32);
    // The half quantum: 2^(e−24) in a normal binade, 2^-150 among the subnormals.
    if (std::isfinite(f) && f != 0)
      xs.push_back(f + std::ldexp(1.0, std::max(std::ilogb(f), -126) - 24));
  }
  for (double x : xs)
    for (double v : {x, -x})
      for (DType t : {DType::fp32, DType::bf16, DType::fp16}) {
        const double fast = round_to(v, t), def = round_to_by_definition(v, t);
        ASSERT_TRUE(fast == def || (std::isnan(fast) && std::isnan(def)))
            << to_string(t) << " " << std::hexfloat << v << ": " << fast << " vs " << def;
      }
}

TEST(DType, Fp32RoundingMatchesHardwareConversion) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> ex(-160, 130);
  for (int k = 0; k < 200000; ++k) {
    const double x = std::ldexp(mant(rng), ex(rng)) * (k % 2 ? -1 : 1);
    ASSERT_EQ(round_to_by_definition(x, DType::fp32), static_cast<double>(static_cast<float>(x)))
        << x;
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
