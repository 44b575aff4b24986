#pragma once
// One interface for every loss strategy (naive, chunked, checkpointed, fused) on every backend
// (the CUDA GPU, and the CPU emulation that reproduces a strategy's arithmetic with each rounding
// of its recipe emulated). Life cycle, as CUTLASS: can_implement → workspace_size → run.
// Tests, benchmarks and the CLI iterate over the registry (gpu/registry.hpp); none names a
// strategy by hand.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/problem.hpp"
#include "numerics/arithmetic.hpp"
#include "numerics/host_array.hpp"
#include "numerics/loss_spec.hpp"
#include "numerics/recipe.hpp"

namespace xentlab {

enum class Backend : std::uint8_t { cpu_emulation, cuda };
std::string_view to_string(Backend b);

struct Status {
  enum class Code : std::uint8_t { ok, not_supported, failed };
  Code code = Code::ok;
  std::string message;  ///< why not supported / what failed
  bool ok() const { return code == Code::ok; }
  static Status Ok() { return {}; }
  static Status NotSupported(std::string m) { return {Code::not_supported, std::move(m)}; }
  static Status Failed(std::string m) { return {Code::failed, std::move(m)}; }
};

/// vocab_parallel's local part when RunRequest::local_strategy names none: chunked's per-rank steps
/// (the CUDA/NCCL strategy's, docs/vocab_parallel.md).
inline constexpr const char* kDefaultLocalStrategy = "chunked";

/// A request: the problem, the loss options, the recipe, and run options.
struct RunRequest {
  const Problem* problem = nullptr;
  LossSpec spec;
  Recipe recipe;
  std::vector<double> upstream;  ///< reduction none: dL/dloss_i (N), empty = ones
  bool want_grads = true;        ///< dz (logits problems) or dH, dW, db (linear)
  /// CPU emulation only: db also for a problem without a bias (the gradient of a zero bias,
  /// Σ_tokens dz, which a golden file holds), as the strategy would add it with one.
  bool want_db = false;
  std::int64_t memory_budget = 0;  ///< bytes of extra device memory allowed; 0 = default
  std::int64_t chunk_tokens = 0;   ///< chunked/checkpointed chunk size; 0 = from the budget
  /// CPU emulation only: compute these token rows (sorted); dW/db then sum over them only, with
  /// the gradient scale of the whole problem (as ReferenceOptions::token_rows). Empty = all.
  std::vector<std::int64_t> token_rows;
  /// CPU emulation only: dW and db for these vocabulary rows only (sorted, unique), returned as
  /// (J, D) and (J) in this order; each row's arithmetic is the one of the full run. Empty = all.
  std::vector<std::int64_t> vocab_rows;
  /// CPU emulation of fused only: the SM count of the GPU whose launch it models (the kernel
  /// splits each row's vocabulary into ranges by it, gpu/plans/fused_plan.hpp); ≤ 0 =
  /// kFusedModelSms (132, an H200). The CUDA strategies use the device's own count.
  int emulated_sms = 0;
  /// vocab_parallel only: the number P of vocabulary shards (ranks; gpu/plans/vocab_shards.hpp). On
  /// the CUDA backend one GPU per rank; the emulation models P virtual ranks. ≤ 0 = 1. The other
  /// strategies ignore it.
  int ranks = 0;
  /// vocab_parallel only: the strategy whose cross-entropy each rank runs over its shard (its
  /// local part: naive, chunked, checkpointed or fused; docs/vocab_parallel.md); empty =
  /// kDefaultLocalStrategy.
  /// Strategy::can_run_local says which a backend composes. The other strategies ignore it.
  std::string local_strategy;
  /// vocab_chunked only: the number P of vocabulary splits (the shards vocab_shards(V, P), one
  /// after another on one device); ≤ 0 = the fewest whose logits slab fits memory_budget
  /// (vocab_chunk_splits, gpu/plans/vocab_shards.hpp). The other strategies ignore it.
  std::int64_t vocab_splits = 0;
};

/// Outputs, as the strategy returned them, each value converted exactly to double from the dtype it
/// was returned in (recorded in *_dtype). Empty vectors for outputs not produced.
struct StrategyOutputs {
  std::vector<std::int64_t> token_rows;  ///< rows of loss/lse/dH/dz (all when empty request)
  std::vector<double> loss;              ///< (S) per-token loss
  std::vector<double> lse;               ///< (S)
  double reduced_loss = 0.0;             ///< mean/sum (or Σ g·loss for none)
  DType loss_dtype = DType::fp32;
  HostArray<double> dz;    ///< (S, V) logits problems
  HostArray<double> dH;    ///< (S, D)
  HostArray<double> dW;    ///< (V, D), or (J, D) for RunRequest::vocab_rows
  std::vector<double> db;  ///< (V) when the problem has a bias, or (J)
  DType grad_dtype = DType::fp32;
  std::int64_t peak_extra_bytes = 0;  ///< measured device (or host working) memory beyond I/O
  double seconds = 0.0;               ///< wall time of run (forward + backward)
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;  ///< a registry row's name (gpu/registry.cpp)
  virtual Backend backend() const = 0;
  /// ok, or not_supported with the reason (e.g. a recipe it cannot honour). Never throws.
  virtual Status can_implement(const Problem& p, const LossSpec& s, const Recipe& r) const = 0;
  /// Extra device (or host) bytes run() will need beyond inputs and outputs.
  virtual std::int64_t workspace_size(const RunRequest& req) const = 0;
  virtual DeclaredArithmetic arithmetic(const Recipe& r) const = 0;
  /// The declaration for one run of `req`: arithmetic(req.recipe), with what the run's parameters
  /// add to it (vocab_parallel: DeclaredArithmetic::vocab_ranks = the request's ranks). The bounds
  /// of a run are formed from this.
  /// ok when this backend can run RunRequest::ranks = `ranks` (vocab_parallel: one device per
  /// rank on CUDA), else not_supported naming why; the other strategies ignore ranks. Checked
  /// before any work. Never throws.
  virtual Status can_run_ranks(std::int64_t ranks) const {
    (void)ranks;
    return Status::Ok();
  }
  /// ok when this backend's strategy can run RunRequest::local_strategy = `local` (empty: the
  /// default) as the per-rank part of vocabulary parallelism, else not_supported naming why and
  /// which it composes; the strategies that do not shard the vocabulary ignore it (ok). Checked
  /// before any work. Never throws.
  virtual Status can_run_local(std::string_view local) const {
    (void)local;
    return Status::Ok();
  }
  virtual DeclaredArithmetic run_arithmetic(const RunRequest& req) const {
    return arithmetic(req.recipe);
  }
  /// Runs forward and (if asked) backward. Throws InputError / DeviceError on failure;
  /// returns outputs otherwise.
  virtual StrategyOutputs run(const RunRequest& req) const = 0;
};

}  // namespace xentlab
