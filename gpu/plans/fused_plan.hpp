#pragma once
// The launch decomposition of the fused strategy (gpu/cuda/fused/), shared with its CPU emulation
// (gpu/emulation/fused.cpp) so that both split the work the same way. Forward: token blocks of 128
// rows; vocabulary tiles of 256 entries; each token block's tiles divided into `ranges` contiguous
// ranges of ⌈tiles/ranges⌉ tiles, one CTA per (block, range), their partial (max, sum-exp) states
// merged pairwise per row. Backward: token groups of fused_group_rows rows, whose dz is staged and
// summed by the gradient GEMMs group by group (docs/fused.md).
#include <algorithm>
#include <cstdint>

#include "numerics/arithmetic.hpp"

namespace xentlab::gpu {

inline constexpr std::int64_t kFusedBlockTokens = 128;  ///< BM: token rows per CTA
inline constexpr std::int64_t kFusedVocabTile = 256;    ///< BN: vocabulary entries per forward tile
/// Vocabulary entries per tile of the on-chip backward's wgmma kernel (FusedBackward::on_chip,
/// docs/fused.md): each tile's dH = dz·W over its 256 entries is an fp32 partial added into the
/// fp32 dH accumulator. (Its mma.sync kernel has tiles of 128 entries.) The token block of its dW
/// and db partials is kFusedBlockTokens.
inline constexpr std::int64_t kFusedBackwardVocabTile = 256;
/// SM count the CPU emulation assumes when the caller gives none (NVIDIA H200: 132 SMs).
inline constexpr int kFusedModelSms = 132;
/// Warps that share a row's columns in a vocabulary tile (fused/forward.cu: one — a warp holds
/// 16 rows × all 256 columns, the wgmma m64n256 fragment, and the mma.sync forward copies that
/// layout). A row's tile is split among kFusedRowWarps warps of kFusedVocabTile / kFusedRowWarps
/// consecutive columns each; in a warp, the quad of lanes 4g … 4g + 3 holds the row, lane q the
/// columns 8j + 2q + {0, 1} of the warp's slice (the tensor-core accumulator layout). An earlier
/// forward of 2 × 4 warps of 64 × 32 over 128-column tiles (kFusedVocabTile 128, kFusedRowWarps
/// 4) was slower (docs/fused.md).
inline constexpr std::int64_t kFusedRowWarps = 1;
/// Columns a thread folds per vocabulary tile, and threads per row per tile (64 · 4 = 256).
inline constexpr std::int64_t kFusedRowThreads = 4 * kFusedRowWarps;
inline constexpr std::int64_t kFusedThreadColumns = kFusedVocabTile / kFusedRowThreads;
/// Merge levels of a row's thread states in a CTA: 2 within a quad, then the warps in order (0).
inline constexpr std::int64_t kFusedLaneMerges = 2 + (kFusedRowWarps - 1);
static_assert(kFusedVocabTile % (8 * kFusedRowWarps) == 0,
              "a warp's slice of a tile is whole 8-column blocks");
/// Least number of vocabulary ranges (unless the tiles or the state budget are fewer).
inline constexpr std::int64_t kFusedMinRanges = 16;
/// Budget of the per-(row, range) partial states: (m, s, Σx) in fp32, 12 bytes each.
inline constexpr std::int64_t kFusedStateBytes = std::int64_t{32} << 20;

/// Vocabulary ranges per token block: enough CTAs for two waves of 2 per SM (4·sms in all), at
/// least 16 (concurrent CTAs share W tiles in L2), at most one tile each, and the partial states
/// (3 floats per row and range) under 32 MiB. N, V ≥ 1; sms ≥ 1.
inline int fused_vocab_ranges(std::int64_t N, std::int64_t V, int sms) {
  const std::int64_t MB = (N + kFusedBlockTokens - 1) / kFusedBlockTokens;
  const std::int64_t VT = (V + kFusedVocabTile - 1) / kFusedVocabTile;
  std::int64_t want = std::max<std::int64_t>(1, (4 * std::int64_t(sms) + MB - 1) / MB);
  want = std::max<std::int64_t>(want, kFusedMinRanges);
  want = std::min<std::int64_t>(want, VT);
  const std::int64_t cap = std::max<std::int64_t>(1, kFusedStateBytes / (12 * N));
  return static_cast<int>(std::max<std::int64_t>(1, std::min(want, cap)));
}

/// Bytes of the backward's dz stage by default: one token group's dz (rows × V in the logits
/// dtype), which the gradient GEMMs read (gpu/cuda/fused/strategy.cu). 192 MiB keeps the fused
/// strategy's extra memory under 256 MiB at V = 128256 and N = 131072 with fp32 gradients (the
/// stage, 24.5 MiB of row states, the 32 MiB cuBLAS workspace).
inline constexpr std::int64_t kFusedStageBytes = std::int64_t{192} << 20;

/// Token rows per group of the fused backward (its dz stage holds one group): `chunk_tokens` when
/// > 0 (at most N); else as many rows as `stage_bytes` holds at V entries of `logits_bytes` each
/// (at least 1), rounded down to a multiple of kFusedBlockTokens where that leaves one, and
/// balanced over the groups (⌈N/groups⌉, rounded up to a multiple of kFusedBlockTokens where that
/// still fits). N, V, logits_bytes ≥ 1. Shared by the kernel's plan and its CPU emulation.
inline std::int64_t fused_group_rows(std::int64_t N, std::int64_t V, std::int64_t logits_bytes,
                                     std::int64_t stage_bytes, std::int64_t chunk_tokens) {
  if (chunk_tokens > 0) return std::min(chunk_tokens, N);
  std::int64_t rows =
      std::max<std::int64_t>(1, stage_bytes / std::max<std::int64_t>(1, V * logits_bytes));
  if (rows >= kFusedBlockTokens) rows = rows / kFusedBlockTokens * kFusedBlockTokens;
  if (rows >= N) return N;
  const std::int64_t groups = (N + rows - 1) / rows;
  const std::int64_t balanced = (N + groups - 1) / groups;
  const std::int64_t rounded =
      (balanced + kFusedBlockTokens - 1) / kFusedBlockTokens * kFusedBlockTokens;
  return rounded <= rows ? rounded : balanced;
}

/// The declared vocabulary reduction of this decomposition (judge/bounds.hpp, online_tree):
/// kernel and CPU emulation declare the same. R ≥ max(1, min(16, tiles, ⌊(32 MiB / 12) / N⌋))
/// holds for every SM count (fused_vocab_ranges takes at least 16 before the caps).
inline DeclaredArithmetic fused_declared_arithmetic() {
  DeclaredArithmetic d;
  d.vocab_order = ReductionOrder::online_tree;
  d.tile = kFusedThreadColumns;
  d.block_threads = kFusedRowThreads;
  d.tree_lane_merges = kFusedLaneMerges;
  d.tree_min_ranges = kFusedMinRanges;
  d.tree_state_rows = kFusedStateBytes / 12;
  d.token_order = ReductionOrder::pairwise;
  d.gemm_k_split = 1;
  return d;
}

}  // namespace xentlab::gpu
