#pragma once
// `xentlab selftest`'s own implementations of the loss (harness/selftest/selftest.hpp): a plain
// implementation of numerics/loss_spec.hpp's definition on a golden file's linear problem, in
// fp64 (BLAS GEMMs) or in fp32 with every sum sequential, with knobs that build in the faults of
// the selftest's catalogue (bf16 logits on some rows, bf16 sums across token chunks, the loss
// spec's ignore_index, upstream gradient or normaliser disregarded). It is a test instrument, not
// an oracle: the certified reference (reference/) is what verify compares with.
#include <cstdint>
#include <vector>

#include "datasets/formats/golden.hpp"
#include "numerics/dtype.hpp"

namespace xentlab::selftest {

/// How the model computes; the default is the loss as specified, in fp64.
struct ModelKnobs {
  /// fp32 throughout: logits by a sequential fp32 dot product, sum-exp by one sequential fp32 pass
  /// over the vocabulary, dH and dW by sequential fp32 sums (over the vocabulary, over the tokens).
  bool fp32_sequential = false;
  /// The per-token loss as lse − z_t (numpy's logsumexp(z) − z[t]: lse's rounding, u·|lse|, is
  /// left in the difference) instead of (max − z_t) + log Σ exp(z − max) (PyTorch's log_softmax
  /// order: the rounding is u·|loss|). Matters in fp32 only.
  bool loss_as_lse_minus_target = false;
  /// Token rows [bf16_rows_begin, bf16_rows_end) have their logits (H·Wᵀ + b, before scale and
  /// softcap) rounded to bf16 before everything that uses them.
  std::int64_t bf16_rows_begin = 0, bf16_rows_end = 0;
  /// > 0: the tokens are worked through in chunks of this many rows; the chunks' dW, db and loss
  /// sums are added in the dtypes below (each partial rounded into it, then each addition).
  std::int64_t chunk_tokens = 0;
  DType dW_chunk_sum = DType::fp64;    ///< dW and db across chunks
  DType loss_chunk_sum = DType::fp64;  ///< the reduced loss's sum across chunks
  /// Rows whose target is ignore_index are computed as if their target were t mod V (Python's
  /// negative index: −100 is V − 100) and counted as valid rows.
  bool disregard_ignore_index = false;
  bool disregard_upstream = false;  ///< reduction none: every token's upstream gradient taken as 1
  bool disregard_normalizer = false;  ///< reduction mean: divided by the batch's own valid rows
};

/// The model's outputs, all in fp64 (the caller rounds them into the candidate's dtype).
struct ModelOutputs {
  std::vector<double> loss, lse;  ///< (N)
  double reduced_loss = 0;        ///< mean, sum, or Σ g_i·loss_i for reduction none
  std::vector<double> dH;         ///< (N, D)
  std::vector<double> dW;         ///< (V, D)
  std::vector<double> db;         ///< (V) when the problem has a bias, else empty
};

/// Where the fp64 model's three GEMMs (logits, dH, dW) run: the host's BLAS, or cuBLAS on the
/// first CUDA device (seconds instead of about a minute on 16 cores at the Llama-3-8B head; the
/// per-row arithmetic stays on the host). The fp32 sequential model always runs on the host.
enum class ModelDevice { cpu, cuda };

/// Runs the model on g's problem (all N rows) with g's loss spec and upstream gradient. Throws
/// InputError for a logits problem (the model needs H and W), and for fp32_sequential when
/// N·V·D exceeds kSequentialWork; std::runtime_error for ModelDevice::cuda without a usable CUDA
/// device (or in a build without CUDA) or when a CUDA call fails (the device's memory: W and dW
/// in fp64, 16·V·D bytes, and a block of logits).
ModelOutputs run_model(const Golden& g, const ModelKnobs& knobs,
                       ModelDevice device = ModelDevice::cpu);

/// Largest N·V·D of the fp32-sequential model (about a minute on 16 cores).
inline constexpr double kSequentialWork = 0x1p36;

}  // namespace xentlab::selftest
