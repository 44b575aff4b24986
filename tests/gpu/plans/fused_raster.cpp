// The fused backward's tile order (gpu/plans/fused_raster.hpp): every tile exactly once, and the
// tiles that add into the same dH or dW rows before a tile — (mb − 1, vb) and (mb, vb − 1) — at
// smaller indexes (the ordered additions' freedom from deadlock rests on it: a tile waits only for
// tiles taken earlier from the counter). The anti-diagonal raster also keeps those two tiles at
// least min(group, VB) − 1 indexes earlier on full diagonals (the reason for it: docs/fused.md).
#include "gpu/plans/fused_raster.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <vector>

namespace {

using xentlab::gpu::fused_backward_tile;
using xentlab::gpu::FusedRaster;

// idx[mb·VB + vb] = raster index of the tile; fails the test on a tile out of range or repeated.
std::vector<std::int64_t> raster_index(std::int64_t MB, std::int64_t VB, std::int64_t group,
                                       FusedRaster r) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(MB * VB), -1);
  for (std::int64_t b = 0; b < MB * VB; ++b) {
    const auto t = fused_backward_tile(b, MB, VB, group, r);
    EXPECT_TRUE(t.mb >= 0 && t.mb < MB && t.vb >= 0 && t.vb < VB)
        << "b " << b << " → (" << t.mb << ", " << t.vb << ")";
    if (t.mb < 0 || t.mb >= MB || t.vb < 0 || t.vb >= VB) continue;
    auto& slot = idx[static_cast<std::size_t>(t.mb * VB + t.vb)];
    EXPECT_EQ(slot, -1) << "tile (" << t.mb << ", " << t.vb << ") at " << slot << " and " << b;
    slot = b;
  }
  return idx;
}

TEST(FusedRaster, BijectionWithPredecessorsFirst) {
  for (const FusedRaster r : {FusedRaster::token_fastest, FusedRaster::diagonal})
    for (std::int64_t MB = 1; MB <= 40; ++MB)
      for (std::int64_t VB = 1; VB <= 30; ++VB)
        for (const std::int64_t group : {1, 2, 3, 4, 5, 8, 16, 32}) {
          const auto idx = raster_index(MB, VB, group, r);
          for (std::int64_t m = 0; m < MB; ++m)
            for (std::int64_t v = 0; v < VB; ++v) {
              const std::int64_t b = idx[static_cast<std::size_t>(m * VB + v)];
              ASSERT_GE(b, 0);
              if (m > 0) {
                ASSERT_LT(idx[static_cast<std::size_t>((m - 1) * VB + v)], b);
              }
              if (v > 0) {
                ASSERT_LT(idx[static_cast<std::size_t>(m * VB + v - 1)], b);
              }
            }
        }
}

TEST(FusedRaster, DiagonalKeepsPredecessorsAGroupApart) {
  // The Llama-3 head at N = 8192 (64 token blocks, 501 vocabulary blocks of 256) in groups of 8,
  // and a group wider than VB.
  for (const auto& [MB, VB, group] : std::vector<std::array<std::int64_t, 3>>{
           {64, 501, 8}, {64, 501, 16}, {40, 6, 16}, {1024, 1002, 8}}) {
    const auto idx = raster_index(MB, VB, group, FusedRaster::diagonal);
    const std::int64_t full = std::min(group, VB);
    std::int64_t near = 0;
    for (std::int64_t m = 0; m < MB; ++m)
      for (std::int64_t v = 0; v < VB; ++v) {
        const std::int64_t b = idx[static_cast<std::size_t>(m * VB + v)];
        std::int64_t dist = MB * VB;
        if (m > 0) dist = std::min(dist, b - idx[static_cast<std::size_t>((m - 1) * VB + v)]);
        if (v > 0) dist = std::min(dist, b - idx[static_cast<std::size_t>(m * VB + v - 1)]);
        // On a full diagonal of its group (not among the group's first or last diagonals).
        const std::int64_t gn = std::min(group, MB - (m / group) * group);
        const std::int64_t d = m % group + v;
        if (gn == group && d >= full && d <= std::max(group, VB) - 1) {
          EXPECT_GE(dist, full - 1) << "tile (" << m << ", " << v << ")";
        }
        if (dist < full - 1) ++near;
      }
    // Only the tiles of the short diagonals at a group's two ends come closer: fewer than
    // group² per group.
    EXPECT_LT(near, (MB + group - 1) / group * group * group) << MB << " × " << VB;
  }
  // The token-fastest raster has (mb − 1, vb) right before (mb, vb).
  const auto idx = raster_index(64, 501, 8, FusedRaster::token_fastest);
  EXPECT_EQ(idx[1 * 501 + 7] - idx[0 * 501 + 7], 1);
}

}  // namespace
