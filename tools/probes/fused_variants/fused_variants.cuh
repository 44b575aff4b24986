#pragma once
// Timing-only variants of the fused strategy's backward for tools/probes/fused_breakdown.cu
// (docs/fused.md, "What limits it"): FusedBackwardVariant configurations (gpu/cuda/fused/
// launch.cuh), each instantiated in a file generated from instantiate.cu.in (tools/CMakeLists.txt)
// so that they compile in parallel.
// The strategy's own backward (FusedStrategyBackward) rasters the mma.sync kernel in groups of 16
// token blocks and the wgmma kernel in groups of 8, and does all the work.
#include "gpu/cuda/fused/launch.cuh"

namespace xentlab::gpu::fused {

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
/// (gpu/fused_raster.hpp): the same results.
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

}  // namespace xentlab::gpu::fused
