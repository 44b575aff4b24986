#include "datasets/synthetic.hpp"

#include <fmt/format.h>

#include <cmath>

#include "numerics/error.hpp"

namespace xentlab {

// xoshiro256** (Blackman & Vigna), seeded by splitmix64: fixed, portable output for a seed.
NormalStream::NormalStream(std::uint64_t seed) {
  std::uint64_t x = seed;
  for (auto& s : state_) {
    x += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    s = z ^ (z >> 31);
  }
}

std::uint64_t NormalStream::next_u64() {
  auto rotl = [](std::uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
  const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double NormalStream::uniform() {
  return static_cast<double>(next_u64() >> 11) * 0x1p-53;
}

std::int64_t NormalStream::uniform_int(std::int64_t n) {
  return static_cast<std::int64_t>(uniform() * static_cast<double>(n)) % n;
}

double NormalStream::next() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double th = 6.283185307179586 * u2;
  spare_ = r * std::sin(th);
  have_spare_ = true;
  return r * std::cos(th);
}

namespace {
void check_sizes(std::int64_t N, std::int64_t V, std::int64_t D, double sigma) {
  if (N < 1 || V < 1 || D < 1)
    throw InputError(fmt::format("sizes must be >= 1: N={} V={} D={}", N, V, D));
  if (!(sigma > 0) || !std::isfinite(sigma))
    throw InputError(fmt::format("sigma must be finite and > 0, got {}", sigma));
}
}  // namespace

Problem make_gaussian_linear(std::int64_t N, std::int64_t V, std::int64_t D, DType dtype,
                             double sigma, std::uint64_t seed) {
  check_sizes(N, V, D, sigma);
  NormalStream rng(seed);
  Tensor H(dtype, {N, D}, "H"), W(dtype, {V, D}, "W");
  for (std::int64_t k = 0; k < N * D; ++k) H.set(k, rng.next());
  const double ws = sigma / std::sqrt(static_cast<double>(D));
  for (std::int64_t k = 0; k < V * D; ++k) W.set(k, ws * rng.next());
  std::vector<std::int64_t> t(static_cast<std::size_t>(N));
  for (auto& x : t) x = rng.uniform_int(V);
  return Problem::linear(std::move(H), std::move(W), std::nullopt, std::move(t), -100,
                         "gaussian-linear");
}

Problem make_gaussian_logits(std::int64_t N, std::int64_t V, DType dtype, double sigma,
                             std::uint64_t seed) {
  check_sizes(N, V, 1, sigma);
  NormalStream rng(seed);
  Tensor Z(dtype, {N, V}, "logits");
  for (std::int64_t k = 0; k < N * V; ++k) Z.set(k, sigma * rng.next());
  std::vector<std::int64_t> t(static_cast<std::size_t>(N));
  for (auto& x : t) x = rng.uniform_int(V);
  return Problem::from_logits(std::move(Z), std::move(t), -100, "gaussian-logits");
}

}  // namespace xentlab
