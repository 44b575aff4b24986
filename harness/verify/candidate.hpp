#pragma once
// The lab's own strategies as candidates (`xentlab candidate`, `xentlab selftest`): one strategy
// of the registry run on a golden file's problem, with its loss spec, upstream gradient and
// normaliser, its outputs laid out as a candidate file holds them (docs/formats.md).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "datasets/formats/golden.hpp"
#include "datasets/tensor.hpp"
#include "gpu/strategy.hpp"
#include "numerics/recipe.hpp"

namespace xentlab {

/// What one strategy returned, as the outputs of a candidate file.
struct StrategyCandidate {
  /// loss (N), lse (N), reduced_loss () in the strategy's loss dtype; dH (N, D), dW (V, D), db (V)
  /// or dz (N, V) in its gradient dtype, those the golden file holds a reference of.
  std::vector<std::pair<std::string, Tensor>> outputs;
  /// "xentlab cpu-emulation naive bf16/bf16/fp32/bf16[ chunk_tokens=…][ vocab_splits=…]"
  std::string implementation;
  double seconds = 0;  ///< the strategy's own wall time
};

/// Runs strategy st with recipe on the golden file's problem (all its token rows; chunk_tokens as
/// RunRequest::chunk_tokens, 0 = the strategy's own; ranks and local_strategy as RunRequest's, for
/// a strategy that shards the vocabulary; vocab_splits as RunRequest::vocab_splits, 0 = from the
/// default budget, for a strategy that splits it). Throws InputError when the strategy cannot
/// implement the recipe on the problem (naming both and why), and what Strategy::run throws.
StrategyCandidate run_strategy_candidate(const Golden& g, const Strategy& st, const Recipe& recipe,
                                         std::int64_t chunk_tokens = 0, int ranks = 0,
                                         const std::string& local_strategy = "",
                                         std::int64_t vocab_splits = 0);

}  // namespace xentlab
