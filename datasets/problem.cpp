#include "datasets/problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "numerics/error.hpp"

namespace xentlab {
namespace {

// True when the stored bit pattern is ±inf or NaN (exponent field all ones).
bool special16(std::uint16_t b, DType dt) {
  return dt == DType::bf16 ? (b & 0x7F80) == 0x7F80 : (b & 0x7C00) == 0x7C00;
}

// The first flat index whose value is not allowed (NaN, +inf, and −inf unless allowed), or n.
// Chunks are scanned in parallel; the smallest offending index wins, as in a sequential scan.
std::int64_t first_nonfinite(const Tensor& t, bool allow_neg_inf) {
  const std::int64_t n = t.numel();
  constexpr std::int64_t kChunk = std::int64_t{1} << 16;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::int64_t bad = n;
  const bool half = t.dtype() == DType::bf16 || t.dtype() == DType::fp16;
  const auto* b = static_cast<const std::uint16_t*>(t.data());
  // The exponent field all ones: ±inf or NaN (special16).
  const std::uint16_t mask = t.dtype() == DType::bf16 ? 0x7F80 : 0x7C00;
#pragma omp parallel for schedule(static) reduction(min : bad)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t first = c * kChunk, last = std::min(n, first + kChunk);
    if (half) {
      // Fast scan of the bit patterns (a branch-free OR over the chunk, which the compiler
      // vectorizes); only a chunk holding a special pattern is scanned again, decoding those.
      unsigned any = 0;
      for (std::int64_t k = first; k < last; ++k) any |= (b[k] & mask) == mask ? 1u : 0u;
      if (any == 0) continue;
      for (std::int64_t k = first; k < last; ++k)
        if (special16(b[k], t.dtype()) && !(allow_neg_inf && t.get(k) == -HUGE_VAL)) {
          bad = std::min(bad, k);
          break;
        }
    } else {
      std::vector<double> buf(static_cast<std::size_t>(last - first));
      t.read(first, last - first, buf.data());
      for (std::int64_t k = first; k < last; ++k) {
        const double v = buf[static_cast<std::size_t>(k - first)];
        if (std::isnan(v) || (std::isinf(v) && (v > 0 || !allow_neg_inf))) {
          bad = std::min(bad, k);
          break;
        }
      }
    }
  }
  return bad;
}

void check_finite(const Tensor& t, bool allow_neg_inf, const std::string& what) {
  const std::int64_t bad = first_nonfinite(t, allow_neg_inf);
  if (bad < t.numel())
    throw InputError(
        fmt::format("{} holds a non-finite value {} at flat index {}{}", what, t.get(bad), bad,
                    allow_neg_inf ? " (only -inf is allowed, as a mask)" : " (must be finite)"));
}

}  // namespace

Problem Problem::linear(Tensor H, Tensor W, std::optional<Tensor> bias,
                        std::vector<std::int64_t> targets, std::int64_t ignore_index,
                        std::string name) {
  Problem p;
  p.name = std::move(name);
  if (H.rank() != 2) throw InputError(fmt::format("H must be 2-D (N, D), got rank {}", H.rank()));
  if (W.rank() != 2) throw InputError(fmt::format("W must be 2-D (V, D), got rank {}", W.rank()));
  p.N = H.dim(0);
  p.D = H.dim(1);
  p.V = W.dim(0);
  p.H = std::move(H);
  p.W = std::move(W);
  p.bias = std::move(bias);
  p.targets = std::move(targets);
  if (p.D <= 0) throw InputError(fmt::format("H must have D >= 1 columns, got {}", p.D));
  p.validate(ignore_index);
  return p;
}

Problem Problem::from_logits(Tensor logits, std::vector<std::int64_t> targets,
                             std::int64_t ignore_index, std::string name) {
  Problem p;
  p.name = std::move(name);
  if (logits.rank() != 2)
    throw InputError(fmt::format("logits must be 2-D (N, V), got rank {}", logits.rank()));
  p.N = logits.dim(0);
  p.V = logits.dim(1);
  p.D = 0;
  p.logits = std::move(logits);
  p.targets = std::move(targets);
  p.validate(ignore_index);
  return p;
}

void Problem::validate(std::int64_t ignore_index) const {
  if (N <= 0) throw InputError(fmt::format("{}: N (tokens) must be >= 1, got {}", name, N));
  if (V <= 0) throw InputError(fmt::format("{}: V (vocabulary) must be >= 1, got {}", name, V));
  if (static_cast<std::int64_t>(targets.size()) != N)
    throw InputError(fmt::format("{}: targets has {} entries but there are N={} tokens", name,
                                 targets.size(), N));
  if (is_linear()) {
    if (H.rank() != 2 || H.dim(0) != N || H.dim(1) != D)
      throw InputError(fmt::format("{}: H must have shape ({}, {})", name, N, D));
    if (W.rank() != 2 || W.dim(0) != V)
      throw InputError(
          fmt::format("{}: W must have shape (V={}, D), got rank {}", name, V, W.rank()));
    if (W.dim(1) != D)
      throw InputError(
          fmt::format("{}: H is (N={}, D={}) but W is (V={}, D={}): the hidden sizes differ", name,
                      N, D, V, W.dim(1)));
    if (H.dtype() != W.dtype())
      throw InputError(fmt::format("{}: H is {} but W is {}: one input dtype is required", name,
                                   to_string(H.dtype()), to_string(W.dtype())));
    check_finite(H, false, name + ": H");
    check_finite(W, false, name + ": W");
    if (bias) {
      if (bias->rank() != 1 || bias->dim(0) != V)
        throw InputError(fmt::format("{}: bias must have shape (V={})", name, V));
      check_finite(*bias, true, name + ": bias");
    }
  } else {
    if (logits.rank() != 2 || logits.dim(0) != N || logits.dim(1) != V)
      throw InputError(fmt::format("{}: logits must have shape ({}, {})", name, N, V));
    check_finite(logits, true, name + ": logits");
  }
  for (std::int64_t i = 0; i < N; ++i) {
    const std::int64_t t = targets[static_cast<std::size_t>(i)];
    if (t != ignore_index && (t < 0 || t >= V))
      throw InputError(
          fmt::format("{}: target of row {} is {}, outside [0, {}) and not ignore_index {}", name,
                      i, t, V, ignore_index));
  }
}

std::int64_t Problem::count_valid(std::int64_t ignore_index) const {
  std::int64_t n = 0;
  for (std::int64_t t : targets) n += (t != ignore_index);
  return n;
}

std::string Problem::describe() const {
  return describe_as(N, is_linear() ? H.dtype() : logits.dtype());
}

std::string Problem::describe_as(std::int64_t n, DType input) const {
  if (is_linear())
    return fmt::format("{}: linear N={} V={} D={} {}{}", name, n, V, D, to_string(input),
                       bias ? " +bias" : "");
  return fmt::format("{}: logits N={} V={} {}", name, n, V, to_string(input));
}

}  // namespace xentlab
