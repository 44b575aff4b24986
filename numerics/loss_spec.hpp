#pragma once
// LossSpec: every option of the cross-entropy loss, with PyTorch's semantics where PyTorch has one.
//
// For token i with raw logits r_i = H_i·Wᵀ + b (or given logits), the lab defines
//   z_ij = logit_scale · r_ij                                  (1/temperature)
//   z_ij ← softcap · tanh(z_ij / softcap)      if softcap > 0  (Gemma-2 style)
//   lse_i = log Σ_j exp(z_ij)
//   ce_i  = lse_i − (1 − ε)·z_i,t − (ε/V)·Σ_j z_ij             (label smoothing ε as PyTorch)
//   loss_i = ce_i + λ·lse_i²                                    (z-loss, PaLM)
// for rows whose target is not ignore_index; ignored rows have loss 0 and gradient 0.
// Reduction: none (per-token, times an optional upstream gradient), sum, or mean over the
// non-ignored rows. The mean of a batch with no valid row is NaN (PyTorch) unless
// empty_mean = zero is chosen; its gradient is 0 in both cases.
// A caller-given normaliser n > 0 (reduction mean only) replaces the batch's own count of valid
// rows: loss = Σ_i loss_i / n and dL/dloss_i = 1/n, the mean over the valid tokens of all the
// micro-batches of a gradient-accumulation step (Hugging Face transformers' `num_items_in_batch`:
// the sum over the micro-batch divided by the step's token count). A batch with no valid row then
// has loss 0 (a sum of no terms over n), not NaN.
#include <cstdint>
#include <string>
#include <string_view>

namespace xentlab {

enum class Reduction : std::uint8_t { none, mean, sum };
enum class EmptyMean : std::uint8_t { nan, zero };

struct LossSpec {
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;  ///< ε in [0, 1]
  double z_loss = 0.0;           ///< λ ≥ 0 (0 switches the z-loss off)
  double softcap = 0.0;          ///< c > 0 enables c·tanh(z/c); 0 disables
  double logit_scale = 1.0;      ///< finite, > 0
  Reduction reduction = Reduction::mean;
  EmptyMean empty_mean = EmptyMean::nan;
  /// Reduction mean only: the count the sum is divided by; 0 = the batch's own valid rows.
  std::int64_t normalizer = 0;

  /// Throws InputError naming the option when a value is out of range (NaN, ε ∉ [0,1], λ < 0,
  /// softcap < 0, logit_scale ≤ 0 or non-finite), or when λ, softcap (other than 0) or
  /// logit_scale is not a normal fp32 number ([1.18e-38, 3.40e38]; the strategies take them as
  /// fp32), or when normalizer is negative, above 2^24 (the strategies hold the count in fp32,
  /// exact for every integer only up to there), or set (> 0) with a reduction other than
  /// mean.
  void validate() const;
  /// The divisor of reduction mean for a batch with n_valid non-ignored rows: normalizer when set
  /// (> 0), else n_valid. (Undefined meaning for reductions none and sum.)
  std::int64_t mean_count(std::int64_t n_valid) const {
    return normalizer > 0 ? normalizer : n_valid;
  }
  /// One-line human-readable form, e.g. "mean ignore=-100 eps=0 z=0 softcap=off scale=1".
  std::string describe() const;
};

std::string_view to_string(Reduction r);
/// "none", "mean", "sum"; throws InputError otherwise.
Reduction parse_reduction(std::string_view s);

}  // namespace xentlab
