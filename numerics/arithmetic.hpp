#pragma once
// What a strategy declares about its arithmetic: the reduction orders whose constants enter the
// a-priori error bounds (judge/bounds.hpp). Lives in numerics/ so the bounds need nothing else.
#include <cstdint>
#include <string>
#include <string_view>

namespace xentlab {

/// How a strategy reduces over the vocabulary (sum-exp, lse) and over tokens; the a-priori error
/// bounds (judge/bounds.hpp) take their reduction constant c(V) from this.
enum class ReductionOrder : std::uint8_t {
  sequential,    ///< one running sum, c(n) = n − 1
  pairwise,      ///< balanced tree, c(n) = ⌈log2 n⌉
  blocked,       ///< T threads each sequential over n/T, then a tree: c = n/T + log2 T
  online_tiles,  ///< online (max, sum) merged across vocabulary tiles of `tile` entries
  online_tree,   ///< online (max, sum) states per thread, merged in a tree (the fused kernel)
};
/// What a strategy declares about its arithmetic for a recipe.
struct DeclaredArithmetic {
  ReductionOrder vocab_order = ReductionOrder::blocked;
  std::int64_t block_threads = 256;  ///< T for blocked
  std::int64_t tile = 0;             ///< vocabulary tile for online_tiles; columns per thread
                                     ///< and vocabulary tile for online_tree
  /// online_tree (gpu/plans/fused_plan.hpp): a vocabulary tile is tile·block_threads columns, one
  /// state per thread; a row's block_threads states merge in tree_lane_merges levels; the tiles
  /// are split into R ≥ max(1, min(tree_min_ranges, tiles, ⌊tree_state_rows / N⌋)) ranges (N
  /// tokens), whose states merge pairwise.
  std::int64_t tree_lane_merges = 0;
  std::int64_t tree_min_ranges = 1;
  std::int64_t tree_state_rows = 0;                       ///< 0: no bound on R from N
  ReductionOrder token_order = ReductionOrder::pairwise;  ///< reduction of the loss over tokens
  std::int64_t gemm_k_split = 1;  ///< GEMM accumulation: fp32 over D in k-blocks
  /// Vocabulary-parallel ranks P (docs/arithmetic.md §10): each rank reduces its shard of at most
  /// ⌈V/P⌉ vocabulary entries in vocab_order (sum-exp, Σx) or in one fp32 sum (dH), and the P
  /// partials are added in the accum dtype (sum-exp, Σx) or fp32 (dH) in any order: P − 1 further
  /// additions on every term's path; an online order's rank state is first rescaled to the global
  /// maximum (one more rounding and one more rescale). 1 = no sharding (every other strategy).
  std::int64_t vocab_ranks = 1;
  /// With vocab_ranks > 1: each rank's sum-exp is taken with the rank's own maximum m_r and
  /// rescaled once to the global maximum m, rnd_A(s_r·expf(m_r − m)), before the cross-rank sum
  /// (one pass over the logits; the vocabulary-chunked strategy, whose ranks are vocabulary splits
  /// on one device). Always so for an online vocab_order; false for a plain order whose ranks sum
  /// with the global maximum (two passes: vocab_parallel).
  bool rescaled_ranks = false;
  std::string note;  ///< free text (e.g. "cuBLAS GemmEx, fp32 compute")
};

std::string_view to_string(ReductionOrder o);

}  // namespace xentlab
