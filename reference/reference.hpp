#pragma once
// The certified CPU reference of the LM-head cross-entropy loss and its gradients (fast tier).
//
// Arithmetic (see shared NUMERICS.md §1–3 and docs/reference.md):
//  - logits: inputs are exact in double and so are their products (≤ 24+24 significant bits);
//    each logit is the Sum2 (Ogita–Rump–Oishi) of those products and the bias. Error per logit
//    ≤ u·|r| + γ²_{D+9}·‖H_i‖₂‖W_j‖₂ with u = 2^-53 (Cauchy–Schwarz bounds Σ|H||W|).
//  - one row (Blanchard, Higham & Higham 2021): a = max z (first index k), s = Σ_{j≠k} e^{z_j−a}
//    compensated, lse = a + log1p(s), p_j = e^{z_j−a}/(1+s), ce = (a − z_t) + log1p(s) with label
//    smoothing folded in, true-class gradient from 1 − p_t = (1 + Σ_{j∉{k,t}} e_j)/(1+s) or
//    s/(1+s): no cancellation.
//  - gradients dH = dz·W, dW = dzᵀ·H, db = Σ dz with Dot2 (TwoProduct + TwoSum) accumulators.
// Every output element carries an a-priori bound on its own error (first order in u; the second
// order terms are below 1e-28 relative and are not carried), together with the condition
// quantities |dz|·|W| and |dz|ᵀ·|H| that the error bounds of the strategies under test need.
//
// Sampling: the reference can be asked for a subset of token rows (per-token outputs, dH rows, and
// dW/db summed over those rows only) and of vocabulary rows (dW/db rows). The gradient scale of
// reduction mean is always 1/n_valid of the whole problem, so sampled per-row results equal the
// full problem's; dW/db over a token subset are the contribution of that subset.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/generators.hpp"
#include "datasets/problem.hpp"
#include "numerics/host_array.hpp"
#include "numerics/loss_spec.hpp"

namespace xentlab {

/// How the reference computes (docs/reference.md, "Tiers"). Every tier returns rigorous
/// first-order bounds; they differ in speed and in how tight the bounds are.
enum class ReferenceTier {
  automatic,    ///< cuda when this build has it and a GPU is present, else blas (linear problems)
  compensated,  ///< Sum2/Dot2 per element: tightest bounds (~u·|value|), O(N·V·D) scalar work
  blas,         ///< fp64 GEMM on the system BLAS, bounds γ_n·Σ|x||y|: the tier for real shapes
  cuda,         ///< the blas tier's arithmetic on the GPU (cuBLAS DGEMM, fp64 kernels)
};
/// "auto", "compensated", "blas", "cuda".
std::string_view to_string(ReferenceTier tier);
/// Parses a tier name ("auto" for automatic); throws InputError naming the accepted values.
ReferenceTier parse_reference_tier(std::string_view name);
/// The fp64 GEMM rate (flop/s) of the tier's own library, measured now on a square product
/// (n = 2048 with the system BLAS for blas, 8192 with cuBLAS for cuda): the ceiling that a
/// tier's achieved rate is compared with. Throws InputError for other tiers.
double measure_dgemm_rate(ReferenceTier tier);

/// Whether this build has the cuda tier and a CUDA device is present (the reason in why_not).
bool cuda_reference_available(std::string* why_not = nullptr);

/// The GPU's TargetEngine for linear heads' calibrated targets (datasets/generators.hpp): cuBLAS
/// DGEMM for the fp64 logits and one fp64 kernel per block of rows for the draw. Throws
/// InputError naming why when this build has no CUDA toolkit or no device is present.
std::shared_ptr<const TargetEngine> make_cuda_target_engine();

/// Where the calibrated targets of linear heads are drawn for a reference tier: the GPU
/// (make_cuda_target_engine) for cuda, and for automatic when a GPU is present; otherwise null
/// (the CPU BLAS). The command and the Python package draw a problem's targets where its
/// reference runs, so both give the same problem on the same machine. Throws InputError for cuda
/// without a device.
std::shared_ptr<const TargetEngine> target_engine_for(ReferenceTier tier);

struct ReferenceOptions {
  std::vector<std::int64_t> token_rows;  ///< rows to compute; empty = all. Sorted, unique, in [0,N)
  std::vector<std::int64_t> vocab_rows;  ///< vocabulary rows for dW/db; empty = all
  bool want_dz = false;                  ///< dL/d(raw logits) for every computed token row (S×V)
  bool want_dH = true;                   ///< linear problems only
  bool want_dW = true;                   ///< linear problems only
  bool want_db = true;                   ///< linear problems only
  /// reduction none: upstream gradient dL/dloss_i per token (size N); empty = all ones.
  std::vector<double> upstream;
  int threads = 0;  ///< OpenMP threads; 0 = OpenMP's default
  /// Called from the calling thread after each block of rows: (rows done, rows total).
  std::function<void(std::int64_t, std::int64_t)> progress;
  /// Memory budget in bytes for the reference's working set (outputs, accumulators, blocks);
  /// 0 = 90 % of the memory available now (MemAvailable, or a cgroup's limit), and the GPU's free
  /// memory for the cuda tier's device part. A problem that needs more is refused before any work
  /// (InputError naming the bytes it needs), never cut short.
  std::int64_t max_bytes = 0;
  /// Which tier computes: logits problems (no GEMM) always use compensated.
  ReferenceTier tier = ReferenceTier::automatic;
  /// Token rows per block of the blas/cuda tiers (0 = the largest that fits the budget) and
  /// vocabulary rows per panel of W (0 = automatic). Results agree within their bounds for any
  /// blocking.
  std::int64_t block_rows = 0, panel_rows = 0;
};

/// Outputs of the reference. Per-token vectors have S = token_rows.size() entries; gradient
/// matrices are row-major. Every value has a *_bound: |computed − exact| ≤ bound (first order).
struct ReferenceResult {
  std::vector<std::int64_t> token_rows;  ///< (S) the rows computed
  std::vector<std::int64_t> vocab_rows;  ///< (J) the vocabulary rows of dW/db
  std::int64_t N = 0, V = 0, D = 0;
  std::int64_t n_valid = 0;  ///< non-ignored rows of the whole problem
  bool partial = false;      ///< true when S < N (reduced loss over the sample only)
  ReferenceTier tier = ReferenceTier::compensated;  ///< the tier that computed this result

  // Per token (S). Ignored rows: loss = ce = z_term = 0; lse and covariates still computed.
  std::vector<double> loss, loss_bound;  ///< ce + z_term (nats)
  std::vector<double> lse, lse_bound;    ///< log Σ_j exp(z_j) (after scale and softcap)
  std::vector<double> ce;                ///< cross-entropy part (with label smoothing)
  std::vector<double> z_term;            ///< λ·lse²
  std::vector<double> max_logit;         ///< max_j z_j
  std::vector<double> p_target;          ///< softmax at the target (NaN for ignored rows)
  std::vector<double> entropy;           ///< −Σ p log p (nats)
  std::vector<double> sum_p_abs_z;       ///< Σ_j p_j·|z_j|
  std::vector<double> grad_scale;        ///< dL/dloss_i: 1/n_valid, 1 or the upstream value

  /// Reduced loss: mean or sum over valid rows; for reduction none Σ_i g_i·loss_i (the scalar
  /// whose gradient is returned). Over the sampled rows only when partial.
  double reduced_loss = 0.0, reduced_loss_bound = 0.0;

  // The large outputs are HostArrays (host_array.hpp: zero-filled in parallel when allocated).
  HostArray<double> dz, dz_bound;           ///< (S, V) when want_dz
  HostArray<double> dH, dH_bound, dH_cond;  ///< (S, D); cond = |dz|·|W|
  HostArray<double> dW, dW_bound, dW_cond;  ///< (J, D); cond = |dz|ᵀ·|H| over the rows
  std::vector<double> db, db_bound;         ///< (J)
};

/// Computes the reference. Throws InputError for an invalid problem or spec (see
/// Problem::validate, LossSpec::validate), bad token/vocab rows, an upstream vector of the wrong
/// length or with non-finite values, gradients asked of a problem that has none (dH of a logits
/// problem), or a working set beyond the memory budget (options.max_bytes; the message gives the
/// bytes needed), or tier cuda where this build or machine has none.
ReferenceResult compute_reference(const Problem& problem, const LossSpec& spec,
                                  const ReferenceOptions& options = {});

/// Refuses, before a problem of V × D (D = 0: a logits problem) is even generated, what
/// compute_reference with these options would refuse for want of memory or of a CUDA device
/// (InputError with the same message), for S token rows and J vocabulary rows of dW/db (the
/// options' token_rows and vocab_rows are not read). Checks nothing else.
void check_reference_fits(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                          const ReferenceOptions& options);

/// The bytes compute_reference holds for S token rows, V × D (D = 0: a logits problem) and J
/// vocabulary rows of dW/db with these options: the compensated tier's whole working set, or the
/// minimum of the BLAS and cuda tiers' host plan (they take larger blocks up to options.max_bytes
/// when it is given: the caller gives it their allotment).
double reference_memory_bytes(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                              const ReferenceOptions& options);
/// The most compute_reference holds for these sizes whatever options.max_bytes allows: the
/// compensated tier's working set, or the BLAS and cuda tiers' host plan at its largest blocks
/// (panels of 64 MiB, blocks of at most max(128, S/8) and 4096 token rows). A budget below it
/// makes those tiers take smaller blocks (down to reference_memory_bytes).
double reference_peak_bytes(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                            const ReferenceOptions& options);

/// Sorted, unique random subset of [0, n) of size min(k, n), from a seeded generator
/// (std::mt19937_64). Used to sample token and vocabulary rows reproducibly.
std::vector<std::int64_t> sample_rows(std::int64_t n, std::int64_t k, std::uint64_t seed);

/// A seeded upstream gradient for reduction none (`xentlab golden --upstream random`, `xentlab
/// audit --upstream random`): N values k/8, k = (x mod 25) − 8 for successive outputs x of
/// std::mt19937_64(seed) — k uniform in {−8, …, 16} —, so g ∈ [−1, 2] with zeros (1 in 25) and
/// negative values, every one exact in bf16, fp16 and fp32 (an implementation that rounds g to its
/// own dtype applies the same g). Reproducible from (N, seed); N < 0 gives an empty vector.
std::vector<double> random_upstream(std::int64_t N, std::uint64_t seed);

}  // namespace xentlab
