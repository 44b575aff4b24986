#pragma once
// The one registry of strategies: one table (gpu/registry.cpp) with a row per strategy — its name,
// its traits, and a factory per backend (CPU emulation, CUDA) — listed explicitly, in the order
// naive, chunked, checkpointed, fused, vocab_parallel, vocab_chunked. No static
// self-registration. Tests, benchmarks, the audit and the CLI read the table: none lists strategy
// names by hand or infers a trait from a name. A CUDA factory is present only when this build
// contains the CUDA backend (gpu/cuda).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/strategy.hpp"
#include "numerics/arithmetic.hpp"

namespace xentlab {

/// What a strategy is, on every backend that has it (checked against the strategies themselves
/// by tests/gpu/registry.cpp).
struct StrategyTraits {
  /// Repeat runs on one device give bit-identical outputs. False when some output is summed by
  /// atomics in an order that depends on scheduling (none: fused sums its staged dz with cuBLAS
  /// GEMMs as chunked does; docs/fused.md, "Determinism").
  bool deterministic = true;
  /// Works through the tokens in chunks (RunRequest::chunk_tokens, or sized by the memory
  /// budget), adding each chunk's dW and db into an accumulator in the accum dtype
  /// (docs/arithmetic.md §8): the bounds count ⌈N/chunk⌉ chunks. Otherwise dW and db accumulate
  /// in fp32 over all tokens (one chunk for the bounds) and chunk_tokens is ignored.
  bool chunks_tokens = false;
  /// Takes every recipe of fp32/fp16/bf16 storage on every backend. False when some are refused
  /// with not_supported (fused: dz must be an exact tensor-core operand, docs/fused.md).
  bool every_recipe = true;
  /// The reduction over the vocabulary that both backends declare
  /// (Strategy::arithmetic(r).vocab_order for every recipe r).
  ReductionOrder vocab_order = ReductionOrder::blocked;
  /// Part of the default strategy set: the strategies the audit (without --strategies), the
  /// benchmarks and the tests that iterate every strategy run (make_strategies with
  /// StrategySet::default_set). False for a strategy that runs only when named (vocab_parallel:
  /// with one rank its outputs are chunked's bit for bit, so it adds nothing to a default audit).
  bool in_default_set = true;
  /// Shards the vocabulary over RunRequest::ranks ranks (vocab_parallel;
  /// gpu/plans/vocab_shards.hpp): its run_arithmetic declares them
  /// (DeclaredArithmetic::vocab_ranks) and the audit records them. The other strategies ignore
  /// RunRequest::ranks.
  bool shards_vocabulary = false;
  /// Splits the vocabulary on one device (vocab_chunked: RunRequest::vocab_splits, or from the
  /// memory budget; gpu/plans/vocab_shards.hpp): its run_arithmetic declares the splits as
  /// vocabulary ranks whose states are rescaled (DeclaredArithmetic::rescaled_ranks). The other
  /// strategies ignore RunRequest::vocab_splits.
  bool splits_vocabulary = false;
  /// Issues its GEMMs as cuBLAS calls apart from its loss kernels, so that the bench can time them
  /// alone (`xentlab bench --gemms-alone`; the CUDA strategy honours DeviceRun::gemms_only on a
  /// linear problem, gpu/cuda/steps.cuh). False for fused (its logits GEMMs, forward and
  /// recompute, are one kernel with the loss; only its gradient GEMMs are cuBLAS calls) and
  /// vocab_parallel.
  bool gemms_apart = false;
};

/// Which rows make_strategies and strategy_names take.
enum class StrategySet : std::uint8_t {
  default_set,  ///< the rows with StrategyTraits::in_default_set
  all,          ///< every row (for looking a named strategy up)
};

/// One row of the registry.
struct StrategyEntry {
  const char* name = "";  ///< as Strategy::name() of every backend's object
  StrategyTraits traits;
  /// The CPU emulation (gpu/emulation/<name>.cpp); nullptr when the strategy has none.
  std::unique_ptr<Strategy> (*emulated)() = nullptr;
  /// The CUDA strategy (gpu/cuda/<name>.cu); nullptr when the strategy has none or this build has
  /// no CUDA backend.
  std::unique_ptr<Strategy> (*cuda)() = nullptr;
};

/// The registry: every strategy, in the order naive, chunked, checkpointed, fused, vocab_parallel,
/// vocab_chunked.
const std::vector<StrategyEntry>& strategy_table();
/// The row named `name`, or nullptr.
const StrategyEntry* find_strategy_entry(std::string_view name);
/// The traits of `name`. Throws InputError naming the registered strategies when unknown.
const StrategyTraits& strategy_traits(std::string_view name);

/// The strategies of the backend in `set` (by default those of the default set), in table order
/// (empty when the backend is not built). Throws std::logic_error when a factory's object is not
/// of its row's name and backend.
std::vector<std::unique_ptr<Strategy>> make_strategies(Backend backend,
                                                       StrategySet set = StrategySet::default_set);
/// Models of other correct implementations of recipe r, for the differential baseline only (they
/// are not strategies of the table: the audit, the bench and `candidate` never run them), for a
/// recipe with fp32 accumulation. On the CPU emulation: the naive strategy with every sum in
/// sequential order (the least accurate order in common use: a candidate summing exp over the
/// vocabulary one term at a time), and — for 16-bit inputs, which GPUs run on tensor cores — with
/// the logits GEMM accumulated as tensor cores do (gpu/emulation/common.hpp kTensorCoreBlock). On
/// CUDA (when this build has it): the sequential-sum model on the GPU (gpu/cuda/naive.cu), the
/// same order as the emulation's; no tensor-core model, as the CUDA strategies' GEMMs run on tensor
/// cores themselves. None for 16-bit accumulation, whose order is part of the declared arithmetic.
std::vector<std::unique_ptr<Strategy>> make_baseline_models(
    const Recipe& r, Backend backend = Backend::cpu_emulation);
/// The strategy `name` of the backend, or nullptr when it has none there.
std::unique_ptr<Strategy> make_strategy(Backend backend, std::string_view name);
/// The names of make_strategies(backend, set), in its order (empty when the backend is not built).
std::vector<std::string> strategy_names(Backend backend,
                                        StrategySet set = StrategySet::default_set);
/// The names of the rows that shard the vocabulary (StrategyTraits::shards_vocabulary), in table
/// order: the strategies --ranks and --local-strategy apply to.
std::vector<std::string> vocabulary_sharding_strategies();
/// The names of the rows that split the vocabulary on one device
/// (StrategyTraits::splits_vocabulary), in table order: the strategies --vocab-splits applies to.
std::vector<std::string> vocabulary_splitting_strategies();
/// The names of the rows whose GEMMs the bench can time alone (StrategyTraits::gemms_apart), in
/// table order: the strategies --gemms-alone applies to.
std::vector<std::string> gemms_apart_strategies();
/// The names in `names` whose row has no CPU emulation in `table` (an unknown name counts as
/// none), in the order given. The audit judges every CUDA run against its emulated twin and
/// refuses a strategy listed here.
std::vector<std::string> without_emulated_twin(const std::vector<std::string>& names,
                                               const std::vector<StrategyEntry>& table);
/// True when this build contains the CUDA backend (a device may still be absent at run time).
bool cuda_backend_built();
/// True when this build contains the CUDA backend and a usable GPU is present; otherwise false,
/// with the reason in *why (when given). Never throws.
bool cuda_device_available(std::string* why = nullptr);

}  // namespace xentlab
