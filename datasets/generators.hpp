#pragma once
// Seeded problem generators for the regimes of shared NUMERICS.md §6. Each is deterministic for its
// seed and shape regardless of the number of OpenMP threads: every row (of H, of W, of the given
// logits) and every target draws from its own NormalStream seeded by (seed, purpose, row), and
// every logit of a linear head used for sampling comes from the same one-thread fp64 GEMM call
// (HeadLogits) whatever the thread count. Values are rounded once, to nearest even, into the
// dtype. The catalog (datasets/catalog.hpp) names them.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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

/// Progress of a long generation: (rows done, rows in all), called on the calling thread.
using GenerationProgress = std::function<void(std::int64_t, std::int64_t)>;

/// The raw logits of a linear head in fp64, as make_head's calibrated targets use them:
/// Z = X·Wᵀ for a block of m rows X (m × D doubles) against W (V × D, any dtype, read exactly).
/// One fp64 GEMM on the system BLAS (numerics/blas.hpp), split over the OpenMP threads in tiles of
/// 256 vocabulary rows, each tile a one-thread dgemm of m × 256 × D: the bits of Z depend on
/// (m, V, D), the values, the BLAS build and the kernel it picks for the CPU, not on the number of
/// threads nor on how W is held.
/// W is converted to doubles once (V × D) when that takes at most 1 GiB, else a panel at a time
/// in every compute() (panel_rows rows, rounded up to a multiple of 256; 0: 256 MiB of doubles).
///
/// Products of bf16/fp16/fp32 values are exact in double, so the error of a logit is its sum's
/// alone, in whatever order the BLAS adds: |Z_ij − X_i·W_j| ≤ γ_D·Σ_d |X_id||W_jd| (Higham,
/// Accuracy and Stability, 2nd ed., §3.1, (3.4); docs/design.md, "Calibrated targets through fp64
/// GEMM").
class HeadLogits {
 public:
  /// Throws InputError when W is not a matrix, or panel_rows < 0.
  explicit HeadLogits(const Tensor& W, std::int64_t panel_rows = 0);
  /// Z (m × V, row-major, resized) = X (m × D, row-major) · Wᵀ.
  void compute(const double* X, std::int64_t m, std::vector<double>& Z) const;
  bool whole() const { return !whole_.empty(); }  ///< W held as doubles once
  /// The bytes an instance holds for a V × D head at its largest (W whole as doubles, or one
  /// panel of it), before the m × V logits compute resizes Z to.
  static double held_bytes(std::int64_t V, std::int64_t D, std::int64_t panel_rows = 0);

 private:
  const Tensor& W_;
  std::int64_t V_, D_, panel_;
  std::vector<double> whole_;
  mutable std::vector<double> panel_buf_;
};

/// Another place to draw a linear head's calibrated targets than HeadLogits on the CPU BLAS: the
/// GPU (reference/reference.hpp, make_cuda_target_engine). An engine computes each row's fp64
/// logits H_i·Wᵀ (any summation order: within γ_D·Σ|h||w| of the exact ones, as HeadLogits) and
/// draws t_i as make_head's CPU path does: the first j, in vocabulary order, whose cumulative sum
/// of the weights exp(z_j − max z) passes u_i·Σ_j exp(z_j − max z), with z the spec-transformed
/// logits (scale, then softcap). Its GEMM, the order of its sums and its exp and tanh may differ
/// from the CPU's, so a target can differ from the CPU's only where u_i falls within those
/// roundings (relative γ_V ≈ V·2⁻⁵³ for the sums, a few ULPs for exp) of a boundary, or within the
/// logits' own margin above (docs/design.md, "Calibrated targets on the GPU").
class TargetEngine {
 public:
  virtual ~TargetEngine() = default;
  /// What computes the targets, for progress and provenance lines ("cuda: NVIDIA H200").
  virtual std::string describe() const = 0;
  /// t[i] for every row i of H (N × D) against W (V × D), H and W of one dtype (bf16, fp16 or
  /// fp32), u[i] in [0, 1) the row's uniform; t is resized to N. progress, when given, hears
  /// (rows done, N) after each block of rows. Throws InputError when the work does not fit the
  /// device (naming the bytes) and std::runtime_error on a device failure.
  virtual void sample(const Tensor& H, const Tensor& W, const LossSpec& spec,
                      const std::vector<double>& u, std::vector<std::int64_t>& t,
                      const GenerationProgress& progress) const = 0;
};

/// The bytes make_head holds beyond the problem itself while it draws calibrated targets on the
/// CPU, at most: HeadLogits and a block of rows of H and their logits as doubles (uniform targets
/// or a target engine hold none of it).
double head_generation_bytes(std::int64_t N, std::int64_t V, std::int64_t D);

/// Linear head: H_id ~ N(0, 1), W_jd ~ N(0, sigma²/D) (so each logit is ≈ N(0, sigma²)), targets by
/// mode (calibrated: from the softmax of the spec-transformed logits of the stored values, the
/// logits from HeadLogits in blocks of rows of at most 1 GiB of logits). Generated in parallel
/// (OpenMP). progress, when given, hears (rows done, N) after every block of calibrated targets.
/// engine, when given, draws the calibrated targets instead of HeadLogits (TargetEngine).
/// Throws InputError for N, V, D < 1 or sigma ≤ 0.
///
/// A GEMM's logits are within γ_D·Σ|h||w| of the exact ones, so another summation order (another
/// BLAS, kernel or block shape) can change a target only when its row's uniform falls within
/// about 4γ_D·max_j Σ|h||w_j| (relative) of a cumulative sum of the softmax: 3e-10 at worst for
/// llama3-8b's head (D = 4096, σ = 4), ~1e-15 as measured (docs/design.md, "Calibrated targets
/// through fp64 GEMM").

Problem make_head(std::int64_t N, std::int64_t V, std::int64_t D, DType dtype, double sigma,
                  std::uint64_t seed, TargetMode mode, const LossSpec& spec,
                  const std::string& name = "head", const GenerationProgress& progress = {},
                  const TargetEngine* engine = nullptr);

/// Confident rows: a Gaussian head whose row i gets H_i ← H_i + c_i·W_{t_i} with c_i ≥ 0 chosen (by
/// bisection, in double) so that p_target = p*_i, 1 − p*_i log-uniform in [1 − p_hi, 1 − p_lo]
/// (default 0.9 … 0.9999); then rounded into dtype (p_target moves by the rounding, slightly). With
/// a softcap p* may be out of reach; the row then gets the largest c tried. The logits and their
/// derivatives W_t·W_j come from HeadLogits; progress, when given, hears (rows done, N) after every
/// block of rows.
Problem make_confident_head(std::int64_t N, std::int64_t V, std::int64_t D, DType dtype,
                            double sigma, std::uint64_t seed, const LossSpec& spec,
                            double p_lo = 0.9, double p_hi = 0.9999,
                            const GenerationProgress& progress = {});

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
