#include "gpu/plans/vocab_shards.hpp"

#include <fmt/format.h>

#include <limits>

#include "numerics/error.hpp"

namespace xentlab {

void check_vocab_ranks(std::int64_t P) {
  if (P < 1)
    throw InputError(fmt::format("vocabulary-parallel ranks must be at least 1 (got {})", P));
  if (P > std::numeric_limits<int>::max())
    throw InputError(fmt::format(
        "vocabulary-parallel ranks {} is past the largest int (each rank is a device)", P));
}

std::vector<VocabShard> vocab_shards(std::int64_t V, std::int64_t P) {
  if (P < 1)
    throw InputError(fmt::format("vocabulary-parallel ranks must be at least 1 (got {})", P));
  if (P > V)
    throw InputError(fmt::format(
        "vocabulary-parallel ranks ({}) exceed the vocabulary ({} rows): a rank would own no row",
        P, V));
  const std::int64_t q = V / P, rem = V % P;
  std::vector<VocabShard> out(static_cast<std::size_t>(P));
  std::int64_t begin = 0;
  for (std::int64_t r = 0; r < P; ++r) {
    const std::int64_t size = q + (r < rem ? 1 : 0);
    out[static_cast<std::size_t>(r)] = {begin, begin + size};
    begin += size;
  }
  return out;
}

std::int64_t vocab_chunk_splits(std::int64_t N, std::int64_t V, std::int64_t logit_bytes,
                                std::int64_t budget, std::int64_t splits) {
  if (splits > 0) {
    if (splits > V)
      throw InputError(fmt::format(
          "vocabulary splits ({}) exceed the vocabulary ({} rows): a split would own no row",
          splits, V));
    return splits;
  }
  if (N <= 0 || V <= 0) return 1;
  if (logit_bytes < 1)
    throw InputError(fmt::format("vocabulary splits: logits of {} bytes", logit_bytes));
  const std::int64_t b = budget > 0 ? budget : kDefaultVocabSlabBudget;
  // Bytes of one vocabulary row's slab: N·logit_bytes (N < 2^62, logit_bytes ≤ 8: no overflow).
  const std::int64_t column = N * logit_bytes;
  const std::int64_t columns = b / column;
  if (columns < 1)
    throw InputError(fmt::format(
        "vocabulary splits: the slab of one vocabulary row ({} tokens × {} bytes = {} bytes) is "
        "past the memory budget of {} bytes (a larger budget, or fewer tokens per call)",
        N, logit_bytes, column, b));
  return (V + columns - 1) / columns;  // ⌈V/P⌉ ≤ columns
}

std::int64_t vocab_shard_of(std::int64_t v, std::int64_t V, std::int64_t P) {
  const std::int64_t q = V / P, rem = V % P;
  const std::int64_t big = rem * (q + 1);  // rows held by the larger shards
  return v < big ? v / (q + 1) : rem + (v - big) / q;
}

}  // namespace xentlab
