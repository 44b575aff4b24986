#pragma once
// Timing-only variants of the fused strategy's backward for lab/probes/fused_breakdown.cu
// (docs/fused.md, "What limits it"). They run a lab copy of the backward kernels
// (backward_variants.cuh), templates on a FusedBackwardVariant declared here, each configuration
// instantiated in a file generated from instantiate.cu.in (lab/CMakeLists.txt) so that they
// compile in parallel. The shipped kernels (gpu/cuda/fused/backward.cuh) keep one configuration:
// FusedStrategyBackward below is that configuration in the lab copy's terms. The lab copy is in a
// namespace of its own (gpu::fused::variants), so its symbols never clash with the product's.
#include <cuda_runtime.h>

#include "gpu/cuda/fused/launch.cuh"
#include "gpu/plans/fused_raster.hpp"

namespace xentlab::gpu::fused::variants {

/// What the backward kernels do once dz is formed. The strategy does all of it in a fixed order
/// (bitwise deterministic); the three others are timing-only experiments: the previous atomic
/// additions (right up to their order), and two whose gradients are wrong by construction
/// (docs/fused.md, "What limits it").
enum class FusedBackwardWork {
  full,  ///< db, both gradient GEMMs and their fp32 additions into dH and dW, in a fixed order
  atomic_reductions,   ///< the same with fp32 atomics, in an order that depends on scheduling
  without_reductions,  ///< db and the gradient GEMMs; their reductions into dH and dW dropped
  dz_only,             ///< the logits recomputed and dz formed, then nothing
};

/// Who waits for and hands on the turns of the wgmma backward's ordered additions into dH and dW
/// (backward_variants.cuh; the mma.sync kernel's CTA always does it itself).
enum class FusedHandOver {
  /// One thread of each consumer warpgroup: it polls the flags, the warpgroup syncs, adds, syncs,
  /// and the thread fences and stores the next turn — all on the consumers' path.
  consumers,
  /// An idle warp of the producer warpgroup per consumer warpgroup: it polls the flags while the
  /// consumers compute and fences and stores the next turn after they have added; the consumers
  /// only sync on one named barrier before their additions and arrive at another after them.
  /// The strategy's.
  helper_warps,
  /// helper_warps, and each consumer warpgroup adds one GEMM's result while its other GEMM runs
  /// (dW of the previous D slice during dH's wgmma, dH during dW's): dH and dW take separate turns.
  helper_warps_overlapped,
  /// Timing only: helper_warps that hand the turns on without waiting for them, so the order of
  /// the additions is the schedule's (with FusedOrderedAdd::reduction the sums stay atomic; with
  /// load_add_store additions are lost): what the waiting costs.
  helper_warps_no_wait,
  /// Timing only: helper_warps_no_wait with every tile starting its D slices where the atomic
  /// kernel does, (mb + vb) mod S, so that tiles in flight add into different lines at a time:
  /// what same-line contention costs the no-wait variant, apart from the hand-over protocol.
  helper_warps_no_wait_rotated,
  /// Timing only: one warp polls the turns for both consumer warpgroups and a second warp per
  /// consumer warpgroup fences and hands them on, so that the consumers may add the next D slice
  /// while the previous slice's fence waits (one slice of slack). Measured no faster than
  /// helper_warps (docs/fused.md).
  helper_warps_split,
};

/// How an ordered addition (FusedBackwardWork::full) adds a partial into dH, dW or db in its turn.
enum class FusedOrderedAdd {
  /// A load through L2, an fp32 add in the SM (round to nearest, subnormals kept) and a store.
  /// The strategy's.
  load_add_store,
  /// An fp32 reduction (red.global.add, performed at L2: round to nearest, but subnormal inputs
  /// and results flushed to zero, PTX ISA "red"), still one turn at a time: half the traffic.
  reduction,
};

/// A compile-time configuration of the lab copy of the backward kernels: token blocks per raster
/// group of the mma.sync kernel (kMmaGroup) and of the wgmma kernel (kWgmmaGroup), the work done,
/// who hands the wgmma kernel's turns on, how an ordered addition adds, and the order of the tiles
/// within a raster group (gpu/plans/fused_raster.hpp), and how many consecutive D slices one turn
/// of the wgmma kernel's helper-warp hand-over covers (kTurnSlices: one wait before the group, one
/// fence and hand-over after it; the additions' order is the same for any value; the mma.sync
/// kernel takes one turn per slice whatever its value). 1, the strategy's, was measured against
/// 4, 8 and 16: each slice more per turn is a slice more that a tile lags its predecessor, and the
/// time grew with it (docs/fused.md).
template <int kMmaGroup, int kWgmmaGroup, FusedBackwardWork kWork,
          FusedHandOver kHandOver = FusedHandOver::helper_warps,
          FusedOrderedAdd kAdd = FusedOrderedAdd::load_add_store,
          FusedRaster kRaster = FusedRaster::token_fastest, int kTurnSlices = 1>
struct FusedBackwardVariant {
  static_assert(kMmaGroup >= 1 && kWgmmaGroup >= 1, "a raster group holds a token block at least");
  static_assert(kTurnSlices >= 1 && (kTurnSlices == 1 || kHandOver == FusedHandOver::helper_warps),
                "slice groups per turn are a variant of the helper-warp hand-over");
  static constexpr int mma_group = kMmaGroup;
  static constexpr int wgmma_group = kWgmmaGroup;
  static constexpr FusedBackwardWork work = kWork;
  static constexpr FusedHandOver hand_over = kHandOver;
  static constexpr FusedOrderedAdd ordered_add = kAdd;
  static constexpr FusedRaster raster = kRaster;
  static constexpr int turn_slices = kTurnSlices;
};
/// The strategy's backward (gpu/cuda/fused/backward.cuh) in these terms: helper warps hand the
/// wgmma kernel's turns on, each ordered addition a load, add and store, tiles token block
/// fastest, raster groups of 16 (mma.sync) and 8 (wgmma) token blocks (docs/fused.md).
using FusedStrategyBackward = FusedBackwardVariant<16, 8, FusedBackwardWork::full>;

/// Both backward kernels rastered in groups of 4, 16 or 32 token blocks: the same results (the
/// additions take turns in the same order whatever the raster).
using FusedBackwardGroup4 = FusedBackwardVariant<4, 4, FusedBackwardWork::full>;
using FusedBackwardGroup16 = FusedBackwardVariant<16, 16, FusedBackwardWork::full>;
using FusedBackwardGroup32 = FusedBackwardVariant<32, 32, FusedBackwardWork::full>;
/// The fp32 additions into dH, dW and db as atomics in an order that depends on scheduling, tiles
/// in blockIdx order, token block fastest (the strategy's backward before its additions took
/// turns): the same results up to the order of the fp32 additions.
using FusedBackwardAtomic =
    FusedBackwardVariant<16, 8, FusedBackwardWork::atomic_reductions, FusedHandOver::helper_warps,
                         FusedOrderedAdd::load_add_store, FusedRaster::token_fastest>;
/// The strategy's ordered additions with the wgmma kernel's turns taken and passed on by the
/// consumer warpgroups themselves (the strategy until the helper warps), by load, add and store:
/// the same order of additions.
using FusedBackwardConsumerHandOver =
    FusedBackwardVariant<16, 8, FusedBackwardWork::full, FusedHandOver::consumers,
                         FusedOrderedAdd::load_add_store>;
/// The strategy's ordered additions with helper warps, each consumer warpgroup adding one GEMM's
/// result while its other GEMM runs (dH and dW take separate turns): the same order of additions
/// (its outputs not compared on a GPU).
using FusedBackwardOverlapped =
    FusedBackwardVariant<16, 8, FusedBackwardWork::full, FusedHandOver::helper_warps_overlapped>;
/// The strategy's turns with each addition an fp32 reduction (red.global.add) in its turn instead
/// of a load, add and store: the same order, half the traffic, but subnormals flushed to zero.
using FusedBackwardReductionInTurn =
    FusedBackwardVariant<16, 8, FusedBackwardWork::full, FusedHandOver::helper_warps,
                         FusedOrderedAdd::reduction>;
/// FusedBackwardReductionInTurn whose helper warps hand the turns on without waiting for them
/// (FusedHandOver::helper_warps_no_wait): the additions' order is the schedule's, the sums still
/// atomic; what the waiting costs.
using FusedBackwardReductionNoWait =
    FusedBackwardVariant<16, 8, FusedBackwardWork::full, FusedHandOver::helper_warps_no_wait,
                         FusedOrderedAdd::reduction>;
/// FusedBackwardReductionNoWait with each tile's D slices from the atomic kernel's rotated start
/// (FusedHandOver::helper_warps_no_wait_rotated): same-line contention apart from the protocol.
using FusedBackwardReductionNoWaitRotated =
    FusedBackwardVariant<16, 8, FusedBackwardWork::full,
                         FusedHandOver::helper_warps_no_wait_rotated, FusedOrderedAdd::reduction>;
/// The strategy's backward with the hand-over split between a polling warp and a fencing warp per
/// consumer warpgroup (FusedHandOver::helper_warps_split; measured no faster, docs/fused.md): the
/// same order of additions.
using FusedBackwardSplitHandOver =
    FusedBackwardVariant<16, 8, FusedBackwardWork::full, FusedHandOver::helper_warps_split>;
/// The strategy's backward with the tiles of a raster group taken by anti-diagonals
/// (gpu/plans/fused_raster.hpp): the same results.
using FusedBackwardDiagonalRaster =
    FusedBackwardVariant<16, 8, FusedBackwardWork::full, FusedHandOver::helper_warps,
                         FusedOrderedAdd::load_add_store, FusedRaster::diagonal>;
/// The strategy's ordered additions with one turn per 4 or per 8 consecutive D slices instead of
/// one per slice (FusedBackwardVariant's kTurnSlices): the same order of additions, a quarter or
/// an eighth of the fences and waits, but each tile 4 or 8 slices behind its predecessor.
using FusedBackwardTurns4 =
    FusedBackwardVariant<16, 8, FusedBackwardWork::full, FusedHandOver::helper_warps,
                         FusedOrderedAdd::load_add_store, FusedRaster::token_fastest, 4>;
using FusedBackwardTurns8 =
    FusedBackwardVariant<16, 8, FusedBackwardWork::full, FusedHandOver::helper_warps,
                         FusedOrderedAdd::load_add_store, FusedRaster::token_fastest, 8>;
/// The gradient GEMMs run, their fp32 reductions into dH and dW dropped (gradients wrong).
using FusedBackwardNoReductions =
    FusedBackwardVariant<16, 8, FusedBackwardWork::without_reductions>;
/// The backward recomputes the logits and forms dz, then stops (gradients wrong).
using FusedBackwardDzOnly = FusedBackwardVariant<16, 8, FusedBackwardWork::dz_only>;

/// Launches the lab copy's backward of `a` in configuration Variant (dH, dW, db zeroed by the
/// caller), its kernel chosen as gpu::fused::launch_fused_backward chooses: a FusedBackwardLaunch
/// for make_cuda_fused_variant. Defined in backward_variants.cuh; instantiated per variant in a
/// file generated from instantiate.cu.in.
template <class Variant>
void launch_fused_backward(DType input, bool vec, bool wgmma, const FusedArgs& a,
                           cudaStream_t stream);

}  // namespace xentlab::gpu::fused::variants
