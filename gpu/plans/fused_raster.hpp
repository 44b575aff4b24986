#pragma once
// The order in which the fused backward's CTAs take their (token block, vocabulary block) tiles
// (gpu/cuda/fused/backward.cuh): host and device code, so that a CPU test checks the properties
// the kernels rely on (tests/gpu/plans/fused_raster.cpp).
#include <cstdint>

#include "numerics/hd.hpp"

namespace xentlab::gpu {

/// A backward tile: token block mb (rows 128·mb…), vocabulary block vb (of the kernel's width).
struct FusedTile {
  std::int64_t mb = 0, vb = 0;
};

/// How the raster orders the tiles inside a group of token blocks.
enum class FusedRaster {
  /// Token block fastest: (mb, vb) then (mb + 1, vb). The tile that adds into the same dW rows
  /// just before this one, (mb − 1, vb), is the previous index.
  token_fastest,
  /// Anti-diagonals: by d = (token block within the group) + vb, then by token block. The tiles
  /// that add into the same rows just before this one, (mb − 1, vb) and (mb, vb − 1), lie on the
  /// previous diagonal (for a group's first token block, (mb − 1, vb) is in the previous group):
  /// on a full diagonal (min(group, VB) tiles), at least min(group, VB) − 1 indexes earlier.
  diagonal,
};

/// The tile of raster index b in [0, MB·VB) for MB token blocks, VB vocabulary blocks and groups
/// of `group` ≥ 1 token blocks (the last group may be smaller; a group's tiles are consecutive
/// indexes, and groups come in increasing token block). A bijection for either raster, in which
/// (mb − 1, vb) and (mb, vb − 1) have smaller indexes than (mb, vb): the ordered additions of the
/// on-chip fused backward (FusedBackward::on_chip, not the registry's) rely on it (a tile waits
/// only for tiles with smaller indexes, taken earlier from a counter). With FusedRaster::diagonal,
/// consecutive indexes are tiles that do not wait for each other (except at a group's first and
/// last diagonals), so that a tile's wait for its predecessors' hand-over (a fence and a flag
/// through L2) overlaps other tiles' work instead of chaining: docs/fused.md, "Determinism".
XL_HD inline FusedTile fused_backward_tile(std::int64_t b, std::int64_t MB, std::int64_t VB,
                                           std::int64_t group, FusedRaster raster) {
  const std::int64_t per_group = group * VB;
  const std::int64_t grp = b / per_group;
  std::int64_t k = b % per_group;
  const std::int64_t left = MB - grp * group;
  const std::int64_t gn = left < group ? left : group;  // token blocks in this group
  FusedTile t;
  if (raster == FusedRaster::token_fastest) {
    t.mb = grp * group + k % gn;
    t.vb = k / gn;
    return t;
  }
  // Diagonals of the gn × VB rectangle: lengths 1, 2, …, P − 1 (ramp), then P (Q − P + 1 of
  // them), then P − 1, …, 1, with P = min(gn, VB), Q = max(gn, VB). The last ramp is the first
  // one mirrored: (ml, vb) ↔ (gn − 1 − ml, VB − 1 − vb) reverses the order.
  const std::int64_t P = gn < VB ? gn : VB, Q = gn < VB ? VB : gn;
  const std::int64_t ramp = P * (P - 1) / 2, flat = (Q - P + 1) * P;
  std::int64_t ml = 0, d = 0;
  if (k < ramp) {
    while (k > d) k -= ++d;  // diagonal d holds d + 1 tiles, ml = 0 … d
    ml = k;
  } else if (k < ramp + flat) {
    k -= ramp;
    d = P - 1 + k / P;
    ml = (d > VB - 1 ? d - (VB - 1) : 0) + k % P;
  } else {
    k = gn * VB - 1 - k;  // the mirrored tile's index, in the first ramp
    std::int64_t dm = 0;
    while (k > dm) k -= ++dm;
    d = gn + VB - 2 - dm;
    ml = gn - 1 - k;
  }
  t.mb = grp * group + ml;
  t.vb = d - ml;
  return t;
}

}  // namespace xentlab::gpu
