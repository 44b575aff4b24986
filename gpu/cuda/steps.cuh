#pragma once
// The CUDA side of the strategy interface (gpu/strategy.hpp): a base class that owns the host
// wrapper (validate → upload → poison the outputs → forward+backward on device → download →
// token reduction) and the device-level entry point that the benchmark calls on device-resident
// tensors; plus the steps the three cuBLAS strategies share (logits of a chunk, the backward GEMMs
// of a chunk, the workspace plan). Arithmetic: docs/arithmetic.md; kernels: ce_kernels.cuh; GEMMs:
// gemm.cuh; memory: device_buffer.cuh (everything beyond inputs and outputs counts as extra).
//
// Backward operand dtype: dz is stored in the logits dtype. When that equals the input dtype the
// backward GEMMs take dz and W/H as they are; otherwise both sides are widened exactly to fp32
// (an fp32 GEMM, no TF32), because cuBLAS has no mixed-dtype operands.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/cuda/common/ce_kernels.cuh"
#include "gpu/cuda/common/device_buffer.cuh"
#include "gpu/cuda/common/gemm.cuh"
#include "gpu/registry.hpp"
#include "gpu/strategy.hpp"

namespace xentlab::gpu {

/// Default memory budget of the chunked strategies' chunk buffers when RunRequest::memory_budget
/// is 0. What every multi-chunk plan needs whatever its chunk size (the V·D fp32 dW accumulator
/// and temporary, W widened to fp32) comes on top: 4.2 GB of it for the Llama-3-8B head (V =
/// 128256, D = 4096) with fp32 logits, which a budget for everything would refuse.
constexpr std::int64_t kDefaultChunkBudget = std::int64_t{2} << 30;

/// Most logits entries per chunk when the budget sizes the chunks (2^30: 8372 tokens at
/// V = 128256). Larger chunks were measured slower end to end, not faster (H200, V = 128256,
/// D = 4096, N = 131072: 8192-token chunks 648.9 ms, 16384-token chunks 652.7 ms in one run,
/// 660.1 against 665.8 in another; lab/results/). A given chunk_tokens is not
/// capped. Several chunks instead of one change the bits of dW and db (their cross-chunk sums),
/// not their bound.
constexpr std::int64_t kMaxChunkLogits = std::int64_t{1} << 30;

/// A problem resident on the device. Pointers are device pointers, row-major.
struct DeviceProblem {
  std::int64_t N = 0, V = 0, D = 0;  ///< D = 0: logits problem
  DType input = DType::bf16;         ///< dtype of H, W (linear) or of the given logits
  const void* H = nullptr;           // (N, D) input dtype
  const void* W = nullptr;           // (V, D) input dtype
  const float* bias = nullptr;       // (V) fp32 (exact copy of the bias; −inf masks), or null
  const void* logits = nullptr;      // (N, V) input dtype, logits problems
  const std::int64_t* targets = nullptr;  // (N)
  std::int64_t n_valid = 0;               ///< rows whose target is not ignore_index
  bool linear() const { return D > 0; }
};

/// Outputs on the device. loss and lse are fp32 arrays holding accum-dtype values; gradients are in
/// the recipe's grad dtype. Null gradient pointers: not wanted.
struct DeviceOutputs {
  float* loss = nullptr;  // (N)
  float* lse = nullptr;   // (N)
  void* dH = nullptr;     // (N, D)
  void* dW = nullptr;     // (V, D)
  void* db = nullptr;     // (V), only with a bias
  void* dz = nullptr;     // (N, V), logits problems
};

/// One device-level run.
struct DeviceRun {
  DeviceProblem prob;
  LossSpec spec;
  Recipe recipe;
  RowGradScale g;  ///< upstream gradient per row (device) or scalar
  bool want_grads = true;
  std::int64_t memory_budget = 0;  ///< bytes of extra device memory; 0 = strategy default
  std::int64_t chunk_tokens = 0;   ///< 0 = from the budget
  std::int64_t vocab_splits = 0;   ///< vocab_chunked: splits P; 0 = from the budget
  /// A timing control of the bench (CudaStrategy::times_gemms_alone): the strategy issues its
  /// GEMMs alone, with its own shapes, operands and workspace (and the conversions of their
  /// operands and results a recipe needs), and skips its loss kernels (loss, lse, dz, the row
  /// states); the outputs then hold no meaningful values.
  bool gemms_only = false;
  DeviceOutputs out;
};

/// Shapes and options that decide the workspace.
struct WorkspaceQuery {
  std::int64_t N = 0, V = 0, D = 0;
  DType input = DType::bf16;
  bool has_bias = false;
  Recipe recipe;
  bool want_grads = true;
};
/// The workspace query of a run: its problem's sizes, dtypes and bias, its recipe and gradients.
inline WorkspaceQuery workspace_query(const DeviceRun& r) {
  const DeviceProblem& P = r.prob;
  return WorkspaceQuery{P.N, P.V, P.D, P.input, P.bias != nullptr, r.recipe, r.want_grads};
}

/// The extra buffers of one run processing `rows` tokens at a time (bytes, 0 = not needed).
struct WorkspacePlan {
  std::int64_t rows = 0, n_chunks = 0;
  std::int64_t logits = 0;      ///< chunk logits/dz in the logits dtype (rows, V)
  std::int64_t logits_f32 = 0;  ///< fp32 GEMM result before bias/rounding (rows, V)
  std::int64_t dz_f32 = 0;      ///< dz widened to fp32 for an fp32 backward GEMM (rows, V)
  std::int64_t H_f32 = 0;       ///< H chunk widened to fp32 (rows, D)
  std::int64_t W_f32 = 0;       ///< W widened to fp32 (V, D)
  std::int64_t dH_f32 = 0;      ///< dH chunk before rounding to grad (rows, D)
  std::int64_t dW_acc = 0;      ///< fp32 dW accumulator (V, D) holding accum-dtype values
  std::int64_t dW_tmp = 0;      ///< fp32 per-chunk dW for a 16-bit accumulator (V, D)
  std::int64_t db_acc = 0;      ///< db accumulator (V)
  /// fused: per-row online (max, sum) partials and x_t, fp32; vocab_parallel: per-row max, target
  /// logit (fp32) and the shard's sum-exp and Σx (accum dtype, 4 bytes reserved each).
  std::int64_t row_states = 0;
  std::int64_t cublas = kCublasWorkspaceBytes;
  std::int64_t total() const {
    return logits + logits_f32 + dz_f32 + H_f32 + W_f32 + dH_f32 + dW_acc + dW_tmp + db_acc +
           row_states + cublas;
  }
};

/// Workspace for `rows` tokens per chunk (n_chunks = ⌈N/rows⌉). With `vocab_sharded` (one rank
/// of vocab_parallel, q.V its shard's rows): also the fp32 dH chunk that is all-reduced before its
/// one rounding to grad (always, linear problems with gradients), and the per-row statistics of
/// the collectives (16 bytes per token row).
WorkspacePlan plan_workspace(const WorkspaceQuery& q, std::int64_t rows,
                             bool vocab_sharded = false);
/// Largest chunk whose plan fits the memory budget and holds at most kMaxChunkLogits logits (at
/// least one token: a row of V > 2^30 entries is one chunk by itself), balanced over the chunks
/// and rounded to a multiple of 128 tokens where that still fits; or the whole batch as one chunk
/// when it fits and the cap would otherwise make the plan fail or its chunks smaller than the
/// budget alone would (several chunks can need more memory than one: the cross-chunk dW
/// accumulator); or chunk_tokens when given (> 0). `budget` is
/// the caller's memory_budget: 0 means kDefaultChunkBudget for the chunk buffers plus what every
/// multi-chunk plan needs whatever its chunk size, and a given chunk_tokens overrides it;
/// a budget > 0 bounds a given chunk_tokens too (InputError naming both byte counts and the chunk
/// size). Throws InputError naming the bytes needed for one token when even that does not fit.
/// `vocab_sharded`: the plans of plan_workspace(q, rows, true).
WorkspacePlan plan_chunks(const WorkspaceQuery& q, std::int64_t budget, std::int64_t chunk_tokens,
                          const std::string& strategy, bool vocab_sharded = false);

/// Kernel parameters of a LossSpec for rows of length V with accumulator `accum`.
RowLossParams make_row_params(const LossSpec& s, std::int64_t V, DType accum);

/// The buffers of a plan, allocated from the tracker (all extra).
struct Workspace {
  Workspace(DeviceMemoryTracker& mem, const WorkspacePlan& plan);
  WorkspacePlan plan;
  DeviceBuffer logits, logits_f32, dz_f32, H_f32, W_f32, dH_f32, dW_acc, dW_tmp, db_acc, row_states;
};

/// Everything a device-level run uses besides its inputs and outputs.
struct DeviceContext {
  DeviceMemoryTracker& mem;
  const Blas& blas;
  cudaStream_t stream;
};

/// A non-blocking stream owned for its scope.
struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream();
  ~OwnedStream();
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
};
/// A CUDA event (with timing) owned for its scope.
struct OwnedEvent {
  cudaEvent_t e = nullptr;
  OwnedEvent();
  ~OwnedEvent();
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;
};

/// The set-up of a device run that the host wrappers share (CudaStrategy::run and each rank of
/// vocab_parallel): checks of the request, the run's description, its uploads and its outputs.
namespace run_setup {
/// The request's problem, validated with the spec, that `s` can implement; InputError naming
/// `who` ("<strategy> (cuda)") otherwise.
const Problem& checked_problem(const Strategy& s, const RunRequest& req, const std::string& who);
/// InputError naming `who` unless the upstream gradient (reduction none, when given) has N
/// entries, all finite.
void check_upstream(const RunRequest& req, std::int64_t N, const std::string& who);
/// The bias as fp32 values (exact: its dtype is checked by can_implement); empty without one.
std::vector<float> bias_floats(const Problem& P);
/// The rows' gradient scale: with reduction none and an upstream gradient, its values as fp32
/// into g_rows (the scale's device pointer is set when they are uploaded); else the scalar
/// (1/n of reduction mean, n = mean_count(n_valid), 0 for n = 0; 1 otherwise).
RowGradScale grad_scale(const RunRequest& req, std::int64_t n_valid, std::vector<float>& g_rows);
/// The run of a request without its device pointers: V vocabulary rows (a shard's, for a rank),
/// D (0: logits problem), the chunk tokens it runs with.
DeviceRun make_device_run(const RunRequest& req, std::int64_t V, std::int64_t D,
                          std::int64_t chunk_tokens, std::int64_t n_valid);
/// An input buffer (MemKind::io) holding `bytes` bytes of src, copied on `stream`.
DeviceBuffer upload(DeviceMemoryTracker& mem, cudaStream_t stream, const void* src,
                    std::int64_t bytes, const char* what);
/// The targets, and the upstream gradient rows when g_rows is not empty, on the device; sets
/// r.prob.targets and r.g (g, with its device rows).
struct RowBuffers {
  DeviceBuffer targets, g;
};
RowBuffers upload_rows(DeviceMemoryTracker& mem, cudaStream_t stream, const Problem& P,
                       const std::vector<float>& g_rows, RowGradScale g, DeviceRun& r);
/// The outputs of r (r.prob's sizes, r.recipe.grad): loss and lse, and with gradients dH, dW and
/// db (has_bias) or dz, poisoned with NaN (all-ones bytes are NaN in fp32, fp16 and bf16); r.out
/// set. `shard`: a rank's, whose dW, db and dz buffers are named "… shard".
struct OutputBuffers {
  DeviceBuffer loss, lse, dH, dW, db, dz;
};
OutputBuffers make_outputs(DeviceMemoryTracker& mem, cudaStream_t stream, DeviceRun& r,
                           bool has_bias, bool shard);
}  // namespace run_setup

/// Shared steps of the cuBLAS strategies.
namespace steps {
/// Prepares run-wide state before the first chunk: W widened to fp32 if the plan says so, the dW
/// and db accumulators zeroed.
void begin(const DeviceRun& r, const DeviceContext& c, Workspace& ws);
/// Writes the logits of rows [r0, r0+rows) in the logits dtype and returns a pointer to them
/// (rows, V): the GEMM (+ bias, one rounding) for linear problems; for logits problems the given
/// logits themselves (same dtype) or a rounded copy.
void* chunk_logits(const DeviceRun& r, const DeviceContext& c, Workspace& ws, std::int64_t r0,
                   std::int64_t rows);
/// Backward GEMMs of rows [r0, r0+rows) from their dz (rows, V) in the logits dtype: dH rows
/// (rounded to grad), dW into the accumulator (or the output directly with one chunk), db. The
/// same operations as backward_operands, chunk_dH, chunk_dW_db in this order.
void chunk_backward(const DeviceRun& r, const DeviceContext& c, Workspace& ws, const void* dz,
                    std::int64_t r0, std::int64_t rows, std::int64_t chunk_index);
/// The operands of a chunk's backward GEMMs, all of dtype `op`: dz (rows, V), the H chunk
/// (rows, D) and W (V, D), widened exactly to fp32 into the workspace where op is fp32 and they
/// are not.
struct BackwardOperands {
  DType op = DType::fp32;
  const void* dz = nullptr;
  const void* H = nullptr;
  const void* W = nullptr;
};
BackwardOperands backward_operands(const DeviceRun& r, const DeviceContext& c, Workspace& ws,
                                   const void* dz, std::int64_t r0, std::int64_t rows);
/// dH rows [r0, r0+rows) = dz·W, complete over V, rounded once to grad into r.out.dH.
void chunk_dH(const DeviceRun& r, const DeviceContext& c, Workspace& ws, const BackwardOperands& o,
              std::int64_t r0, std::int64_t rows);
/// dW += dzᵀ·H_chunk (into the accumulator, or the output directly with one chunk) and db from dz
/// (rows, V) in the logits dtype.
void chunk_dW_db(const DeviceRun& r, const DeviceContext& c, Workspace& ws,
                 const BackwardOperands& o, const void* dz, std::int64_t rows,
                 std::int64_t chunk_index);
/// After the last chunk: rounds the dW and db accumulators into the outputs.
void finish(const DeviceRun& r, const DeviceContext& c, Workspace& ws);
}  // namespace steps

/// Base of the CUDA strategies: the host wrapper of the interface.
class CudaStrategy : public Strategy {
 public:
  Backend backend() const override { return Backend::cuda; }
  /// Common checks (device present, dtypes, recipe input = problem input, 64-bit sizes), then
  /// check_specific(). Never throws.
  Status can_implement(const Problem& p, const LossSpec& s, const Recipe& r) const override;
  std::int64_t workspace_size(const RunRequest& req) const override;
  DeclaredArithmetic arithmetic(const Recipe& r) const override;
  /// Validates (InputError), uploads, poisons every output with NaN, runs forward_backward,
  /// downloads, reduces the per-token loss (pairwise over tokens in the accum dtype), and reports
  /// the peak extra device memory and the device time.
  StrategyOutputs run(const RunRequest& req) const override;

  /// The workspace plan of a run (its total() is the extra device bytes; rows the chunk size).
  /// Throws InputError when the budget cannot hold one token per chunk.
  virtual WorkspacePlan plan(const WorkspaceQuery& q, std::int64_t memory_budget,
                             std::int64_t chunk_tokens) const = 0;
  /// Forward and (when r.want_grads) backward on device-resident tensors, on c.stream.
  /// Throws InputError (does not fit, bad sizes) or DeviceError.
  virtual void forward_backward(const DeviceRun& r, const DeviceContext& c) const = 0;
  /// How run()'s GEMMs sum (gemm.cuh GemmOrder): cuBLAS for every strategy; the sequential-sum
  /// model overrides it.
  virtual GemmOrder gemm_order() const { return GemmOrder::cublas; }
  /// Whether forward_backward honours DeviceRun::gemms_only on a linear problem (its GEMMs are
  /// cuBLAS calls apart from its other kernels): the bench times the strategy's own GEMMs with
  /// it. The registry's trait of its row (StrategyTraits::gemms_apart), which `xentlab bench`
  /// also checks --gemms-alone against without a device; false for a model outside the table.
  bool times_gemms_alone() const {
    const StrategyEntry* e = find_strategy_entry(name());
    return e != nullptr && e->traits.gemms_apart;
  }

 protected:
  virtual Status check_specific(const Problem& p, const LossSpec& s, const Recipe& r) const;
};

/// A strategy that works through token chunks (chunked, checkpointed): its plan is plan_chunks's.
class ChunkStrategy : public CudaStrategy {
 public:
  WorkspacePlan plan(const WorkspaceQuery& q, std::int64_t budget,
                     std::int64_t chunk_tokens) const override {
    return plan_chunks(q, budget, chunk_tokens, name());
  }
};

/// n device values of dtype t (fp32, fp16 or bf16 bytes, as downloaded) → exact doubles, in
/// parallel.
void device_values_to_doubles(const unsigned char* raw, std::int64_t n, DType t, double* out);
/// The same into `out` (std::vector<double> or HostArray<double>), resized to the values' count.
template <class Bytes, class Out>
void device_values_to_doubles(const Bytes& raw, DType t, Out& out) {
  const auto n = static_cast<std::int64_t>(raw.size() / static_cast<std::size_t>(size_of(t)));
  out.resize(static_cast<std::size_t>(n));
  device_values_to_doubles(raw.data(), n, t, out.data());
}

/// Reduced loss from the per-token losses (fp32 values in the accum dtype), docs/arithmetic.md §6:
/// terms g_i·loss_i (reduction none, product in fp32, rounded to accum) or loss_i; a pairwise tree
/// over token index — level by level a[i] = rnd_A(a[2i] + a[2i+1]), an odd last element carried up
/// unchanged; mean: rnd_A(sum / fp32(n)), n = s.mean_count(n_valid) (the normaliser when given; NaN
/// or 0 for n = 0, per empty_mean).
double reduce_tokens(const std::vector<float>& loss, const std::vector<float>& g_rows,
                     const LossSpec& s, DType accum, std::int64_t n_valid);

}  // namespace xentlab::gpu
