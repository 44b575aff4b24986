#pragma once
// Seeded problem generators for the regimes of shared NUMERICS.md §6. Each is deterministic for its
// seed regardless of the number of OpenMP threads: every row (of H, of W, of the given logits) and
// every target draws from its own NormalStream seeded by (seed, purpose, row), and every logit used
// for sampling is a fixed-order double dot product of the stored (rounded) values. Values are
// rounded once, to nearest even, into the dtype. The catalog (datasets/catalog.hpp) names them.
#include <cstdint>

#include "datasets/problem.hpp"
#include "datasets/synthetic.hpp"
#include "numerics/loss_spec.hpp"

namespace xentlab {

enum class TargetMode : std::uint8_t {
  uniform,     ///< t ~ U[0, V): an untrained head; the one-hot dominates dz (hides errors)
  calibrated,  ///< t ~ softmax(z_i) after the spec's scale and softcap: a trained model's regime
};

/// The stream of row `row` for purpose `tag` (a small constant per use) of a generator seeded by
/// seed. Different (seed, tag, row) give independent streams.
NormalStream row_stream(std::uint64_t seed, std::uint64_t tag, std::int64_t row);

/// Stores v[0..n) at flat indices first.. of t, each rounded once to nearest even into t's dtype:
/// the same bits as t.set(first + k, v[k]) (which is the definition; tested), about 5× faster for
/// bf16 (a bit-level RNE on the double's encoding in the normal range) and fp32 (the IEEE
/// conversion). Used by the generators for LLM-sized tensors.
void store_rounded(Tensor& t, std::int64_t first, const double* v, std::int64_t n);

/// Linear head: H_id ~ N(0, 1), W_jd ~ N(0, sigma²/D) (so each logit is ≈ N(0, sigma²)), targets by
/// mode (calibrated: from the softmax of the spec-transformed logits of the stored values).
/// Generated in parallel (OpenMP) over rows. Throws InputError for N, V, D < 1 or sigma ≤ 0.
Problem make_head(std::int64_t N, std::int64_t V, std::int64_t D, DType dtype, double sigma,
                  std::uint64_t seed, TargetMode mode, const LossSpec& spec,
                  const std::string& name = "head");

/// Confident rows: a Gaussian head whose row i gets H_i ← H_i + c_i·W_{t_i} with c_i ≥ 0 chosen (by
/// bisection, in double) so that p_target = p*_i, 1 − p*_i log-uniform in [1 − p_hi, 1 − p_lo]
/// (default 0.9 … 0.9999); then rounded into dtype (p_target moves by the rounding, slightly). With
/// a softcap p* may be out of reach; the row then gets the largest c tried.
Problem make_confident_head(std::int64_t N, std::int64_t V, std::int64_t D, DType dtype,
                            double sigma, std::uint64_t seed, const LossSpec& spec,
                            double p_lo = 0.9, double p_hi = 0.9999);

/// Heavy-tailed logits (given): z = sigma·n/u^(1/alpha) (n normal, u uniform: a Pareto-tailed
/// scale mixture), clamped to ±65504 (the fp16 limit) before rounding. Targets by mode.
Problem make_heavy_logits(std::int64_t N, std::int64_t V, DType dtype, double sigma, double alpha,
                          std::uint64_t seed, TargetMode mode, const LossSpec& spec);

/// Gaussian logits (given) plus a large common offset: z = offset + sigma·n (cancellation in
/// lse − z_t; rounding of |z| ≈ offset costs u·offset). Calibrated targets.
Problem make_offset_logits(std::int64_t N, std::int64_t V, DType dtype, double sigma, double offset,
                           std::uint64_t seed, const LossSpec& spec);

/// Masked vocabulary (given logits, −inf entries): each entry masked with probability fraction,
/// never the (calibrated) target. Row 0 is fully masked and ignored (loss 0, gradient 0, no NaN);
/// row 1 (when N ≥ 2) has every entry masked but its target (loss 0). docs/cases.md C08.
Problem make_masked_logits(std::int64_t N, std::int64_t V, DType dtype, double sigma,
                           double fraction, std::uint64_t seed, const LossSpec& spec);

/// Ties: integer logits in {0, …, levels−1} (exact in every dtype), so rows hold many equal
/// maxima; calibrated targets.
Problem make_tied_logits(std::int64_t N, std::int64_t V, DType dtype, int levels,
                         std::uint64_t seed, const LossSpec& spec);

/// Replaces the target of a seeded fraction of rows by ignore_index (fraction 1: every row; the
/// mean of such a batch is NaN by default, docs/cases.md C03). Rows chosen independently with
/// probability fraction (exactly all for fraction ≥ 1).
void ignore_rows(Problem& p, double fraction, std::uint64_t seed, std::int64_t ignore_index);

}  // namespace xentlab
