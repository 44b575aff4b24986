#pragma once
// The vocabulary-parallel shard layout (tensor parallelism over the LM head's vocabulary): P
// ranks, rank r owning the contiguous vocabulary rows [begin, end) of W, b and the logits. When P
// does not divide V the first V mod P shards hold one row more (as numpy.array_split and
// torch.tensor_split), so shard sizes differ by at most one row.
#include <cstdint>
#include <vector>

namespace xentlab {

/// One rank's vocabulary rows [begin, end).
struct VocabShard {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
};

/// Throws InputError when P is not a number of ranks: P < 1 ("vocabulary-parallel ranks must be at
/// least 1 (got P)", as vocab_shards) or past the largest int (each rank is a device). The check
/// of --ranks before the problem (and V) is known.
void check_vocab_ranks(std::int64_t P);

/// The P shards of a vocabulary of V rows, in rank order; they tile [0, V) with sizes ⌈V/P⌉ (the
/// first V mod P) and ⌊V/P⌋. Throws InputError when P < 1 or P > V (a rank would own no row).
std::vector<VocabShard> vocab_shards(std::int64_t V, std::int64_t P);

/// Default bytes of the vocabulary-chunked strategy's logits slab (RunRequest::memory_budget = 0):
/// the logits of every token over one vocabulary split.
inline constexpr std::int64_t kDefaultVocabSlabBudget = std::int64_t{1} << 30;

/// The number P of vocabulary splits of the vocabulary-chunked strategy (its splits are the
/// shards vocab_shards(V, P), processed one after another on one device), for N tokens, V
/// vocabulary rows and logits of `logit_bytes` bytes: `splits` when > 0; else the fewest splits
/// whose slab — the logits of all N tokens over the largest split, N·⌈V/P⌉·logit_bytes bytes —
/// fits `budget` bytes (≤ 0: kDefaultVocabSlabBudget). 1 when N or V is 0. Throws InputError
/// when `splits` exceeds V (a split would own no row), or when the budget cannot hold the slab of
/// one vocabulary row (N·logit_bytes bytes), naming both.
std::int64_t vocab_chunk_splits(std::int64_t N, std::int64_t V, std::int64_t logit_bytes,
                                std::int64_t budget, std::int64_t splits);

/// The rank whose shard holds vocabulary row v (0 ≤ v < V), for the layout vocab_shards(V, P).
std::int64_t vocab_shard_of(std::int64_t v, std::int64_t V, std::int64_t P);

}  // namespace xentlab
