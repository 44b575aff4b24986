#pragma once
// `xentlab bench` options: what the command line gives (BenchArgs), the named presets with their
// quoted tables, and the validated options of one invocation (resolve_options). Host C++, no CUDA;
// the report formats are harness/bench/report.hpp. Method: docs/benchmarks.md.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/recipe.hpp"

namespace xentlab::bench {

/// A row of a quoted table (what practitioners quote, verbatim).
struct QuotedRow {
  std::string strategy, peak_memory, throughput_vs_naive;
};

/// A named configuration: sizes, recipes, chunking and the table it is meant to reproduce.
struct Preset {
  std::string name, description;
  std::int64_t N = 0, V = 0, D = 0;
  std::vector<std::string> recipes;
  std::int64_t chunk_tokens = 0;   ///< 0 = from the budget
  std::int64_t memory_budget = 0;  ///< 0 = each strategy's default
  std::string quoted_source;       ///< where the quoted table comes from and what it describes
  std::vector<QuotedRow> quoted;
};
const std::vector<Preset>& presets();
/// The preset of that name; InputError listing the known names otherwise.
const Preset& find_preset(std::string_view name);

/// The options as typed on the command line (empty: not given).
struct BenchArgs {
  std::optional<std::int64_t> tokens, vocab, hidden;
  std::vector<std::string> recipes, strategies;  ///< comma lists allowed in each entry
  std::string memory_budget;
  std::optional<std::int64_t> chunk_tokens, repeats, warmup, sample_rows, vocab_rows, seed;
  std::optional<std::int64_t> ranks;         ///< --ranks of vocab_parallel
  std::optional<std::int64_t> vocab_splits;  ///< --vocab-splits of vocab_chunked
  bool gemms_alone = false;                  ///< --gemms-alone
  std::string preset;
  std::string csv, h5, markdown, json;
};

/// Validated options of one bench invocation.
struct BenchOptions {
  std::int64_t N = 0, V = 0, D = 0;
  std::vector<Recipe> recipes;
  std::vector<std::string> strategies;  ///< empty = every registered strategy
  std::int64_t memory_budget = 0;       ///< 0 = each strategy's default
  std::int64_t chunk_tokens = 0;        ///< 0 = from the budget
  /// Vocabulary-parallel ranks P of vocab_parallel (--ranks, as xentlab audit's; 1 when not
  /// given). The bench times one device per run: with P > 1 the vocab_parallel rows are
  /// not-supported rows saying so.
  std::int64_t ranks = 1;
  /// Vocabulary splits P of vocab_chunked (--vocab-splits, as xentlab audit's; 0 when not given:
  /// the fewest whose logits slab fits the memory budget).
  std::int64_t vocab_splits = 0;
  /// Also time each strategy's own GEMMs alone (--gemms-alone: DeviceRun::gemms_only, in the
  /// same interleaved rounds), where the strategy can issue them apart from its loss kernels.
  bool gemms_alone = false;
  int repeats = 5, warmup = 1;
  std::int64_t sample_rows = 8;    ///< token rows checked against the reference (0 = no check)
  std::int64_t vocab_rows = 2048;  ///< vocabulary rows of the dW check (0 = all V)
  std::uint64_t seed = 1;
  std::string preset;  ///< "" or a preset name
  std::string csv, h5, markdown, json;
  std::string command_line;  ///< recorded in the outputs

  double flops() const { return 6.0 * double(N) * double(V) * double(D); }
  /// Bytes of one copy of the inputs (H, W, targets) for this input dtype.
  std::int64_t input_bytes(DType input) const;
};

/// Largest number of elements of one matrix (H: N·D, W: V·D, logits: N·V) the bench accepts;
/// 64-bit offsets hold it with room for the byte counts of every dtype.
inline constexpr std::int64_t kMaxMatrixElements = std::int64_t{1} << 48;
/// Default recipes without a preset.
inline constexpr const char* kDefaultRecipes = "bf16/bf16/fp32/bf16";

/// Applies the preset (explicit flags win), the defaults, and checks every value: sizes ≥ 1 with
/// no matrix past kMaxMatrixElements; recipes parse and have an fp32/fp16/bf16 input (the device
/// generator's dtypes); strategies are among `known_strategies` (the registry's names); repeats ≥
/// 1, warm-up ≥ 0, chunk tokens ≥ 0, sample and vocabulary rows ≥ 0 (clamped to N and V); ranks
/// (when given) 1 to V and only with one of `sharding` (the names among known_strategies that
/// shard the vocabulary, StrategyTraits::shards_vocabulary) named, as xentlab audit's --ranks;
/// vocabulary splits (when given) 1 to V and only with one of `splitting` (those that split the
/// vocabulary on one device) named; --gemms-alone only where the strategies run (those named, or
/// the default set when none are) include one of `gemms_apart` (those whose GEMMs can be timed
/// alone, StrategyTraits::gemms_apart); the outputs are not the same file. Throws InputError
/// naming the option and value.
BenchOptions resolve_options(const BenchArgs& args,
                             const std::vector<std::string>& known_strategies,
                             const std::vector<std::string>& sharding = {},
                             const std::vector<std::string>& splitting = {},
                             const std::vector<std::string>& gemms_apart = {});

}  // namespace xentlab::bench
