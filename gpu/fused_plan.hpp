#pragma once
// The launch decomposition of the fused strategy's forward (gpu/cuda/fused.cu), shared with its
// CPU emulation (gpu/emulation/common.cpp) so that both split a row's vocabulary the same way:
// token blocks of 128 rows; vocabulary tiles of 128 entries; each token block's tiles divided into
// `ranges` contiguous ranges of ⌈tiles/ranges⌉ tiles, one CTA per (block, range), their partial
// (max, sum-exp) states merged pairwise per row (docs/fused.md).
#include <algorithm>
#include <cstdint>

namespace xentlab::gpu {

inline constexpr std::int64_t kFusedBlockTokens = 128;  ///< BM: token rows per CTA
inline constexpr std::int64_t kFusedVocabTile = 128;    ///< BN: vocabulary entries per tile
/// SM count the CPU emulation assumes when the caller gives none (NVIDIA H200: 132 SMs).
inline constexpr int kFusedModelSms = 132;

/// Vocabulary ranges per token block: enough CTAs for two waves of 2 per SM (4·sms in all), at
/// least 16 (concurrent CTAs share W tiles in L2), at most one tile each, and the partial states
/// (3 floats per row and range) under 32 MiB. N, V ≥ 1; sms ≥ 1.
inline int fused_vocab_ranges(std::int64_t N, std::int64_t V, int sms) {
  const std::int64_t MB = (N + kFusedBlockTokens - 1) / kFusedBlockTokens;
  const std::int64_t VT = (V + kFusedVocabTile - 1) / kFusedVocabTile;
  std::int64_t want = std::max<std::int64_t>(1, (4 * std::int64_t(sms) + MB - 1) / MB);
  want = std::max<std::int64_t>(want, 16);
  want = std::min<std::int64_t>(want, VT);
  const std::int64_t cap = std::max<std::int64_t>(1, (std::int64_t{32} << 20) / (12 * N));
  return static_cast<int>(std::max<std::int64_t>(1, std::min(want, cap)));
}

}  // namespace xentlab::gpu
