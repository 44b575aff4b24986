#pragma once
// Case C02 of docs/cases.md (fp16 logits all 0, N rows, t_i = 7i mod V) and its expected values
// at two sizes: the case's own, and a quarter of its logits with the same faults, which the CPU
// suite runs (the case's own size, 2^28 logits, is labelled slow: the nightly suite runs it).
#include <cstdint>
#include <vector>

#include "datasets/problem.hpp"

namespace xentlab {
namespace testing {

struct C02Size {
  std::int64_t N, V;
  const char* row_loss;    ///< every row's loss: ln V (and the mean)
  const char* sum;         ///< N·ln V, past fp16's 65504
  const char* off_target;  ///< mean gradient off the target: 1/(N·V), below 2^-25
  const char* target;      ///< mean gradient at the target: (1/V − 1)/N
};

/// The case as docs/cases.md gives it (values at 40 digits).
inline constexpr C02Size kC02Case{8192,           32768,           "10.3972077084", "85173.9255472",
                                  "3.7252903e-9", "-1.22066587e-4"};
/// V = 8192: the same faults at a quarter of the work. The token sum 8192·ln 8192 = 73817.4 still
/// overflows fp16 (> 65504), and the off-target gradient 2^-26 is still below half the smallest
/// fp16 subnormal (2^-25), so its correctly rounded fp16 value is 0 (not a tie, as V = 4096 would
/// give). ln 8192 = 13·ln 2 = 9.010913347279289022…; N·ln V = 73817.40214091193567…;
/// 1/(N·V) = 2^-26 = 1.490116119384765625e-8; (1/V − 1)/N = −1.2205541133880615234375e-4.
inline constexpr C02Size kC02Quarter{
    8192, 8192, "9.01091334728", "73817.4021409", "1.49011612e-8", "-1.22055411e-4"};

/// The case's problem at size c: fp16 logits all 0, t_i = 7i mod V.
inline Problem c02_problem(const C02Size& c) {
  Tensor Z(DType::fp16, {c.N, c.V}, "logits");
  std::vector<std::int64_t> t(static_cast<std::size_t>(c.N));
  for (std::int64_t i = 0; i < c.N; ++i) t[static_cast<std::size_t>(i)] = (7 * i) % c.V;
  return Problem::from_logits(std::move(Z), t);
}

}  // namespace testing
}  // namespace xentlab
