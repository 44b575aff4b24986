#pragma once
// Exact emulation of reduced-precision arithmetic on the CPU (docs/arithmetic.md).
//
// An operation "in dtype X" is emulated as the IEEE binary32 operation (`float`, no fast-math,
// -ffp-contract=off) followed by one round-to-nearest-even into X. For X = bf16 (p = 8) and fp16
// (p = 11) this equals the correctly rounded result of the exact operation: rounding first to
// binary32 (p = 24) and then to X is innocuous for +, −, ×, ÷ and √ whenever 24 ≥ 2p + 1
// (Figueroa, "When is double rounding innocuous?", SIGNUM Newsl. 30(3), 1995; also Roux, "Innocuous
// double rounding of basic arithmetic operations", J. Formaliz. Reason. 7(1), 2014).
//
// rnd() is a bit-level RNE conversion float → X (same results as round_to(double(f), X) of
// numerics/dtype.hpp, checked on every fp32 bit class in tests/numerics/emulate.cpp) because
// the emulation rounds hundreds of millions of times per audit.
//
// Reductions (shared NUMERICS.md §2; constants of their error bounds: judge/bounds.hpp):
//   sequential   s ← rnd(s + x_j), j = 0, 1, …
//   pairwise     sum(x[0,n)) = rnd(sum(x[0,h)) + sum(x[h,n))), h = ⌊n/2⌋, leaves are single terms
//   blocked      element j belongs to thread (j / group) mod T; each thread sums its elements in
//                increasing j sequentially; partials combined by partial[t] ← rnd(partial[t] +
//                partial[t + s]) for s = T/2, …, 1 (T a power of two; docs/arithmetic.md §4)
//   online_tiles (fused): tiles of `tile` columns; per tile m_new = max(m, tile max), tile sum
//                sequential of rnd(expf(x_j − m_new)), s ← rnd(fp32(s·expf(m − m_new)) + tile_sum)
#include <cmath>
#include <cstdint>
#include <cstring>

#include "numerics/arithmetic.hpp"
#include "numerics/dtype.hpp"

namespace xentlab::emu {

/// Round-to-nearest-even of binary32 x into bf16, result as float (exact). NaN stays NaN,
/// overflow gives ±Inf.
inline float rnd_bf16(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7F800000u) == 0x7F800000u) return x;  // Inf, NaN
  // bf16 is the top 16 bits of binary32 with the same exponent range (subnormals included), so
  // RNE on the low 16 bits is exact; a carry into the exponent rounds up to the next binade or Inf.
  const std::uint32_t lsb = (b >> 16) & 1u;
  b += 0x7FFFu + lsb;
  b &= 0xFFFF0000u;
  float y;
  std::memcpy(&y, &b, 4);
  return y;
}

/// Round-to-nearest-even of binary32 x into fp16 (p = 11, emin = −14, max 65504), as float.
inline float rnd_fp16(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  const std::uint32_t sign = b & 0x80000000u;
  const std::uint32_t ab = b & 0x7FFFFFFFu;
  if (ab >= 0x7F800000u) return x;  // Inf, NaN
  float a;
  std::memcpy(&a, &ab, 4);
  float r;
  if (a >= 0x1p-14f) {
    // Normal range of fp16: keep 10 fraction bits of 23 (drop 13), RNE on the integer pattern.
    const std::uint32_t lsb = (ab >> 13) & 1u;
    std::uint32_t q = (ab + 0xFFFu + lsb) & ~0x1FFFu;
    std::memcpy(&r, &q, 4);
    if (r > 65504.0f) r = INFINITY;  // past max finite after rounding: overflow to Inf
  } else {
    // Subnormal range: quantum 2^-24. a·2^24 < 2^10 is exact in binary32; nearbyint is RNE in the
    // default rounding mode; scaling back is exact.
    r = std::nearbyint(a * 0x1p24f) * 0x1p-24f;
  }
  std::uint32_t rb;
  std::memcpy(&rb, &r, 4);
  rb |= sign;
  std::memcpy(&r, &rb, 4);
  return r;
}

/// Rounds binary32 x into t (fp32 and fp64: unchanged).
inline float rnd(float x, DType t) {
  switch (t) {
    case DType::bf16:
      return rnd_bf16(x);
    case DType::fp16:
      return rnd_fp16(x);
    default:
      return x;
  }
}

/// Rounds a double into t through one correct rounding, as float (fp64 is taken as fp32: the
/// emulation never holds fp64 values). Used for inputs and for products that are exact in double.
inline float rnd_from_double(double x, DType t) {
  return static_cast<float>(round_to(x, t == DType::fp64 ? DType::fp32 : t));
}

/// x rounded toward zero into fp32: the float of largest magnitude with |f| ≤ |x| and x's sign
/// (±FLT_MAX past the float range, never ±Inf; NaN stays NaN). Branch-free, so that a loop over
/// many values vectorizes: the correctly rounded float, one unit of its magnitude less where
/// that rounding went away from zero.
inline float rnd_toward_zero(double x) {
  constexpr double kMax = 3.4028234663852886e38;               // FLT_MAX
  const double c = x > kMax ? kMax : (x < -kMax ? -kMax : x);  // NaN passes unchanged
  const float f = static_cast<float>(c);
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  // |f| > |c| only where f ≠ 0: one less in the magnitude's bits is the next float toward zero.
  bits -= static_cast<std::uint32_t>(std::fabs(static_cast<double>(f)) > std::fabs(c));
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

/// Sequential sum of x[0..n) with every addition rounded to t. n = 0 gives 0.
float sum_sequential(const float* x, std::int64_t n, DType t);
/// Pairwise (balanced recursive) sum, every addition rounded to t.
float sum_pairwise(const float* x, std::int64_t n, DType t);
/// Blocked sum of a GPU block reduce (T threads, groups of `group` consecutive elements). T must be
/// a power of two ≥ 1 and group ≥ 1 (InputError otherwise).
float sum_blocked(const float* x, std::int64_t n, DType t, std::int64_t T = 256,
                  std::int64_t group = 8);
/// Dispatch on a declared order (online_tiles sums sequentially within `a.tile`-sized tiles and
/// adds tile sums sequentially: the reduction of values that need no rescale).
float sum_ordered(const float* x, std::int64_t n, DType t, const DeclaredArithmetic& a);

/// Running (max, sum) of the online softmax.
struct OnlineState {
  float m = -INFINITY;
  float s = 0.0f;
};
/// Merges the tile x[0..n) into st (online_tiles, see the file comment), sums in accum dtype t.
/// A tile (or state) whose max is −Inf contributes nothing.
void online_merge_tile(OnlineState& st, const float* x, std::int64_t n, DType t);
/// Σ_j rnd(expf(x_j − m)) in the declared order over the row x[0..n) (sum-exp of
/// docs/arithmetic.md §4; online_tiles rescales per §9 and returns the final sum relative to the
/// final max, written to m_out). m_out receives the max used (max_j x_j). Masked x = −Inf
/// contribute 0; an all-masked row returns 0 with m_out = −Inf. `scratch` must hold n floats.
float sum_exp(const float* x, std::int64_t n, DType t, const DeclaredArithmetic& a, float* scratch,
              float* m_out);

}  // namespace xentlab::emu
