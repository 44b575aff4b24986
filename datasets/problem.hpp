#pragma once
// Problem: the inputs of one LM-head cross-entropy evaluation, held exactly as stored.
//
// Two kinds:
//  - linear:  H (N×D), W (V×D) in one input dtype, optional bias b (V, fp32 or the input dtype;
//             −inf entries mask vocabulary rows), targets t (N, int64). logits = H·Wᵀ + b.
//  - logits:  given logits Z (N×V) in their dtype (−inf allowed as a mask), targets t (N).
// Targets are in [0, V) or equal to the LossSpec's ignore_index.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "datasets/tensor.hpp"
#include "numerics/loss_spec.hpp"

namespace xentlab {

struct Problem {
  std::string name = "problem";
  std::int64_t N = 0;                 ///< tokens
  std::int64_t V = 0;                 ///< vocabulary size
  std::int64_t D = 0;                 ///< hidden size (0 for a logits problem)
  Tensor H;                           ///< (N, D), linear problems
  Tensor W;                           ///< (V, D), linear problems
  std::optional<Tensor> bias;         ///< (V), linear problems, optional
  Tensor logits;                      ///< (N, V), logits problems
  std::vector<std::int64_t> targets;  ///< (N)
  /// Calibrated targets (drawn from the softmax of the head's fp64 logits): what drew them, for
  /// provenance — "cpu: <the BLAS>" or the TargetEngine's describe() ("cuda: NVIDIA H200 …").
  /// Empty for targets of another kind. Kept by select_rows and with_input_dtype.
  std::string targets_drawn_by;

  bool is_linear() const { return D > 0; }
  /// dtype of the stored inputs (H/W, or the given logits).
  DType input_dtype() const { return is_linear() ? H.dtype() : logits.dtype(); }

  /// Builds a linear problem; validates it (see validate) with the given ignore_index.
  static Problem linear(Tensor H, Tensor W, std::optional<Tensor> bias,
                        std::vector<std::int64_t> targets, std::int64_t ignore_index = -100,
                        std::string name = "linear");
  /// Builds a logits problem; validates it with the given ignore_index.
  static Problem from_logits(Tensor logits, std::vector<std::int64_t> targets,
                             std::int64_t ignore_index = -100, std::string name = "logits");

  /// Checks shapes (N, V ≥ 1, D ≥ 1 for linear; H/W same dtype and D; bias length V), finiteness
  /// (H, W finite; bias and logits finite or −inf; never NaN or +inf) and targets (each in [0, V)
  /// or == ignore_index). Throws InputError naming the tensor, the first offending index and value.
  void validate(std::int64_t ignore_index) const;
  /// Number of rows whose target is not ignore_index.
  std::int64_t count_valid(std::int64_t ignore_index) const;
  /// "name: N=.. V=.. D=.. dtype".
  std::string describe() const;
  /// describe() of this problem with n token rows in input dtype `input`: what a sub-batch of it
  /// converted to that dtype (select_rows, with_input_dtype) describes, without making it.
  std::string describe_as(std::int64_t n, DType input) const;
};

}  // namespace xentlab
