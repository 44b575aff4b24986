#pragma once
// Seeded synthetic problems. Every generator is deterministic for a given seed (std::mt19937_64
// and Box–Muller written out here, so the values do not depend on the standard library's
// distribution implementations) and rounds its values once, to nearest even, into the dtype.
#include <cstdint>

#include "datasets/problem.hpp"

namespace xentlab {

/// Gaussian logits of scale sigma through a linear head: H_id ~ N(0, 1), W_jd ~ N(0, sigma²/D), so
/// each logit is ≈ N(0, sigma²); targets uniform in [0, V). Regime: an untrained head — the
/// one-hot term dominates dz and hides most gradient errors (shared NUMERICS.md §6).
Problem make_gaussian_linear(std::int64_t N, std::int64_t V, std::int64_t D, DType dtype,
                             double sigma, std::uint64_t seed);

/// Gaussian logits given directly (N×V, ≈ N(0, sigma²)) in dtype, uniform targets.
Problem make_gaussian_logits(std::int64_t N, std::int64_t V, DType dtype, double sigma,
                             std::uint64_t seed);

/// Deterministic standard normal stream (Box–Muller on mt19937_64's 53-bit uniforms).
class NormalStream {
 public:
  explicit NormalStream(std::uint64_t seed);
  double next();
  /// Uniform integer in [0, n).
  std::int64_t uniform_int(std::int64_t n);
  /// Uniform double in [0, 1).
  double uniform();

 private:
  std::uint64_t state_[4];
  bool have_spare_ = false;
  double spare_ = 0.0;
  std::uint64_t next_u64();
};

}  // namespace xentlab
