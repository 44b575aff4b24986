// The fused strategy's kernel paths (wgmma on sm_90a, mma.sync on every device): agreement of
// the two, repeat runs bit for bit (fused and chunked, several waves of tiles), and 64-bit
// offsets (N·V and V·D past 2^31) in one fused launch.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "tests/gpu/gpu_fixture.hpp"

namespace xentlab::gpu_tests {
namespace {

/// The fused strategy's two kernel paths — wgmma with TMA (sm_90a) and mma.sync (every device, the
/// only one for unaligned shapes) — for forward and backward.
/// Forward: both fold the same tree (gpu/plans/fused_plan.hpp), so loss and lse must agree bit for
/// bit, provided the two tensor-core instructions give the same fp32 dot products over D in the
/// same k order (which each backward's recompute relies on too: its z must equal the forward's).
/// Backward (staged): both dz kernels recompute z as their forward did and form dz with the same
/// formula (the wgmma kernel's plain dz dropping only identities), and cuBLAS sums the same
/// gradient GEMMs over it, so dH, dW and db must agree bit for bit too; each is also held to the
/// a-priori bound and to 2× its CPU emulation's error (check_run), in one token group; in groups
/// of 100 rows (starting inside token blocks) the gradients are compared too. Shapes where the
/// wgmma kernels apply, with N, V and D off their tile multiples (TMA's zero fill at the edges; D =
/// 72 and 96 end in a partial slice of 64), every loss option, bias and ignored rows, bf16 and
/// fp16, fp32 and bf16 accumulators, per-token upstream gradients. On an sm_90a device the
/// automatic path must have taken wgmma for both. Case 3 (fp32 accumulator, no bias, no option)
/// takes the wgmma forward's plain fold, which the mma.sync kernel never does: its equality checks
/// that the plain fold drops only identities. The automatic path is the registry's fused strategy;
/// the mma.sync one a strategy made with FusedKernelPath::mma_sync (gpu/cuda/fused/fused.hpp).
TEST(GpuStrategies, FusedKernelPathsAgree) {
  XL_REQUIRE_DEVICE();
  const auto fused = find_strategy(Backend::cuda, "fused");
  ASSERT_TRUE(fused);
  const auto fused_mma = gpu::make_cuda_fused(gpu::FusedKernelPath::mma_sync);
  const bool sm90 = fused_wgmma_device();
  std::vector<LossSpec> specs(3);
  specs[1].label_smoothing = 0.1;
  specs[1].z_loss = 1e-4;
  specs[2].softcap = 20.0;
  specs[2].logit_scale = 1.25;
  specs[2].reduction = Reduction::none;
  int k = 0;
  for (const auto& [N, V, D] : std::vector<std::array<std::int64_t, 3>>{
           {300, 2000, 96}, {256, 1024, 256}, {129, 257, 72}}) {
    for (const char* rn : {"bf16/bf16/fp32/bf16", "bf16/bf16/bf16/bf16", "fp16/fp16/fp32/fp32"}) {
      const Recipe r = parse_recipe(rn);
      const LossSpec& sp = specs[static_cast<std::size_t>(k % 3)];
      Case c{
          "fused-fwd-kernels-" + std::to_string(k),
          gaussian(N, V, D, r.input, r.input == DType::fp16 ? 2.0 : 4.0, 71 + k, k % 2 == 0, true),
          sp, sp.reduction == Reduction::none ? random_upstream(N, 5 + k) : std::vector<double>{}};
      ++k;
      const std::string ctx = describe(c, r, "fused", 0);
      const ReferenceResult ref = reference_for(c);
      RunRequest req;
      req.problem = &c.pb;
      req.spec = c.spec;
      req.recipe = r;
      req.upstream = c.upstream;
      // One token group of all N rows, as the runs compared below (the plan's default here).
      check_run(c, ref, *fused, r, N);
      const StrategyOutputs a = fused->run(req);
      const std::string path = gpu::last_fused_kernels(*fused).forward;
      if (sm90) {
        EXPECT_EQ(path, "wgmma") << ctx;
        EXPECT_EQ(std::string(gpu::last_fused_kernels(*fused).backward), "wgmma") << ctx;
      }
      check_run(c, ref, *fused_mma, r, N);
      const StrategyOutputs b = fused_mma->run(req);
      EXPECT_EQ(std::string(gpu::last_fused_kernels(*fused_mma).forward), "mma.sync") << ctx;
      EXPECT_EQ(std::string(gpu::last_fused_kernels(*fused_mma).backward), "mma.sync") << ctx;
      // The gradients of the two paths' runs x and y, bit for bit.
      const auto same_gradients = [&](const StrategyOutputs& x, const StrategyOutputs& y,
                                      const std::string& what) {
        const std::string where = what + ": differs between " + path + " and mma.sync";
        EXPECT_TRUE(same_bits(x.dH, y.dH)) << "dH, " << where;
        EXPECT_TRUE(same_bits(x.dW, y.dW)) << "dW, " << where;
        EXPECT_TRUE(same_bits(x.db, y.db)) << "db, " << where;
      };
      same_gradients(a, b, ctx);
      EXPECT_TRUE(same_bits(a.loss, b.loss))
          << ctx << ": loss differs between " << path << " and mma.sync";
      EXPECT_TRUE(same_bits(a.lse, b.lse))
          << ctx << ": lse differs between " << path << " and mma.sync";
      // In token groups of 100 rows (groups starting and ending inside a token block of 128, the
      // last one partial): each group's dz, written at its own offset into the stage, must still
      // be the same on both paths, and so must the gradients summed over the groups.
      RunRequest grouped = req;
      grouped.chunk_tokens = 100;
      const StrategyOutputs ag = fused->run(grouped), bg = fused_mma->run(grouped);
      same_gradients(ag, bg, ctx + ", groups of 100");
    }
  }
}

/// Repeat runs give the same bits in every output. Fused: loss and lse come from a fixed merge
/// order; its staged backward writes dz without atomics and sums it by cuBLAS GEMMs in increasing
/// token group; its on-chip backward's additions into dH, dW and db take turns in increasing
/// vocabulary tile / token block (gpu/cuda/fused/backward.cuh); chunked: cuBLAS GEMMs (bitwise
/// reproducible on one device and toolkit, per cuBLAS's documentation) and row kernels without
/// atomics, chunks added in order. The problem (4480 × 4096 × 256) has 35 token blocks: for the
/// on-chip backward several raster groups on each fused kernel path (groups of 8 and 16 token
/// blocks) with a partial last group, and about four waves of backward tiles (560 wgmma tiles, 1120
/// mma.sync tiles on 132 SMs); every 7th row is ignored and two whole token blocks (9, and 33 in
/// the last group) are ignored — their tiles add nothing but must pass their turns on, or the next
/// token block's tiles would wait forever. With and without a bias (db's turns). Both runs are also
/// checked against the reference.
TEST(GpuStrategies, RepeatRunsAreBitIdentical) {
  XL_REQUIRE_DEVICE();
  for (const bool bias : {true, false}) {
    Problem g = gaussian(4480, 4096, 256, DType::bf16, 6.0, 3, bias, true);
    std::vector<std::int64_t> t = g.targets;
    for (const std::int64_t block : {9, 33})
      for (std::int64_t i = 128 * block; i < 128 * (block + 1); ++i)
        t[static_cast<std::size_t>(i)] = -100;
    Case c{"repeat-runs",
           Problem::linear(std::move(g.H), std::move(g.W), std::move(g.bias), std::move(t), -100,
                           bias ? "repeat-runs-bias" : "repeat-runs"),
           {},
           {}};
    const ReferenceResult ref = reference_for(c);
    auto check = [&](const std::string& label, const Strategy& s, const Recipe& r, RunRequest req) {
      SCOPED_TRACE(label + ", recipe " + r.name() + (bias ? ", bias" : ", no bias"));
      req.problem = &c.pb;
      req.recipe = r;
      const StrategyOutputs a = s.run(req), b = s.run(req);
      expect_same_outputs(a, b, label + " repeat");
      EXPECT_EQ(a.db.size(), bias ? static_cast<std::size_t>(c.pb.V) : 0u);
      for (const StrategyOutputs* o : {&a, &b}) {
        const RunAssessment as =
            assess_run(c.pb, c.spec, r, s.arithmetic(r), *o, ref, policy_by_name("default"), 1);
        EXPECT_EQ(as.verdict.disposition, Disposition::passed)
            << as.verdict.output << ": " << as.verdict.reason;
      }
    };
    for (const char* recipe : {"bf16/bf16/fp32/fp32", "bf16/bf16/fp32/bf16"}) {
      const Recipe r = parse_recipe(recipe);
      for_each_fused_kernel_path([&](const char* path, const Strategy& fused) {
        check(std::string("fused, path ") + path, fused, r, RunRequest{});
        if (std::string(path) == "mma.sync") {
          EXPECT_EQ(fused_kernels_of_last_run(fused), "mma.sync/mma.sync");
        } else if (fused_wgmma_device()) {
          EXPECT_EQ(fused_kernels_of_last_run(fused), "wgmma/wgmma");
        }
      });
      // The on-chip backward (not the registry's; fused.hpp): its ordered additions.
      for (const auto path : {gpu::FusedKernelPath::automatic, gpu::FusedKernelPath::mma_sync}) {
        const auto on_chip = gpu::make_cuda_fused(path, gpu::FusedBackward::on_chip);
        const bool mma = path == gpu::FusedKernelPath::mma_sync;
        check(std::string("fused on-chip backward, path ") + (mma ? "mma.sync" : "automatic"),
              *on_chip, r, RunRequest{});
        if (mma || fused_wgmma_device()) {
          EXPECT_EQ(fused_kernels_of_last_run(*on_chip), mma ? "mma.sync/mma.sync" : "wgmma/wgmma");
        }
      }
      // Staged in several token groups (dW and db added over 5 of them).
      RunRequest groups;
      groups.chunk_tokens = 1024;
      check("fused, 5 token groups", *find_strategy(Backend::cuda, "fused"), r, groups);
      const auto chunked = find_strategy(Backend::cuda, "chunked");
      ASSERT_TRUE(chunked);
      RunRequest chunks;  // five chunks: dW and db added over them
      chunks.chunk_tokens = 1024;
      check("chunked, 5 chunks", *chunked, r, chunks);
    }
  }
}

/// N·V past 2^31 (17000 × 128256, D = 64) in one fused forward launch, and in one dz launch of the
/// staged backward (one token group: chunk_tokens = N, so the stage's offsets pass 2^31), on each
/// kernel path (on sm_90 the automatic path must be the wgmma kernels, so both are covered): every
/// token row identical,
/// targets the last vocabulary entry; loss and lse of every row must equal row 0's bit for bit
/// (same arithmetic per row, no atomics), and dH rows must be finite and within the summation-order
/// bound of row 0 (|Δ| ≤ 2·γ_V·Σ_j|dz_j||W_jd| ≤ 2·γ_V·2g·max|W|, γ_V = V·u32/(1 − V·u32): the
/// rows' sums in different orders, a bound that does not assume the additions' turns).
TEST(GpuStrategies, FusedIndexingPast2Pow31) {
  XL_REQUIRE_DEVICE();
  if (device().memory_gib < 24) GTEST_SKIP() << "needs about 20 GiB of device memory";
  const Problem p = identical_rows_past_2pow31(64);
  const std::int64_t N = p.N, V = p.V, D = p.D;
  double wmax = 0.0;
  for (std::int64_t k = 0; k < V * D; ++k) wmax = std::max(wmax, std::fabs(p.W.get(k)));
  const double u = unit_roundoff(DType::fp32);
  const double gamma = V * u / (1.0 - V * u);
  const double tol = 2.0 * gamma * 2.0 * (1.0 / N) * wmax;
  for_each_fused_kernel_path([&](const char* path, const Strategy& s) {
    RunRequest req;
    req.problem = &p;
    req.recipe = parse_recipe("bf16/bf16/fp32/fp32");
    req.chunk_tokens = N;  // one token group: a stage of N·V entries
    const StrategyOutputs o = s.run(req);
    const std::string kernels = fused_kernels_of_last_run(s);
    SCOPED_TRACE(std::string("path ") + path + ", kernels " + kernels);
    if (fused_wgmma_device() && std::string(path) == "automatic") {
      EXPECT_EQ(kernels, "wgmma/wgmma");
    }
    ASSERT_EQ(o.loss.size(), static_cast<std::size_t>(N));
    ASSERT_TRUE(std::isfinite(o.loss[0]) && std::isfinite(o.lse[0]));
    std::int64_t first_bad = -1;
    for (std::int64_t i = 0; i < N && first_bad < 0; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (std::memcmp(&o.loss[k], &o.loss[0], 8) != 0 || std::memcmp(&o.lse[k], &o.lse[0], 8) != 0)
        first_bad = i;
      for (std::int64_t d = 0; d < D; ++d) {
        const double v = o.dH[k * D + d], v0 = o.dH[d];
        if (!std::isfinite(v) || std::fabs(v - v0) > tol) first_bad = i;
      }
    }
    EXPECT_EQ(first_bad, -1) << "token row " << first_bad << " differs from row 0";
    for (double v : o.dW) ASSERT_TRUE(std::isfinite(v)) << "non-finite dW";
  });
}

/// V·D past 2^31 (W of 524416 × 4096 bf16, 4.3 GB) in one fused run: every W row identical, so
/// every logit of a row is the same value; the target is the last vocabulary row (its W offset
/// is past 2^31 elements). N identical token rows in one token block: N = 2 (the mma.sync
/// kernels: fewer rows than a wgmma tile) and N = 128 (on sm_90 the wgmma kernels), one token
/// group. Each non-target dW row is then the same GEMM sum of the same products, so every
/// non-target dW row must equal row 0 bit for bit (a 32-bit offset would leave rows as zeros
/// or add into the wrong ones), the target row must be finite and differ, and the loss must be
/// ln V (all logits equal; fp32 accumulator: the sum of V exact ones is exact, lse and loss are
/// two roundings of ≈ |x| + ln V).
TEST(GpuStrategies, FusedWeightsPast2Pow31) {
  XL_REQUIRE_DEVICE();
  if (device().memory_gib < 40) GTEST_SKIP() << "needs about 15 GiB of device memory";
  const std::int64_t D = kWideD, V = kWideV;
  ASSERT_GT(V * D, std::int64_t{1} << 31);
  const auto s = find_strategy(Backend::cuda, "fused");
  for (const std::int64_t N : {std::int64_t{2}, std::int64_t{128}}) {
    const Problem p = identical_weights_past_2pow31(N);
    RunRequest req;
    req.problem = &p;
    req.recipe = parse_recipe("bf16/bf16/fp32/fp32");
    const StrategyOutputs o = s->run(req);
    const std::string kernels = fused_kernels_of_last_run(*s);
    SCOPED_TRACE("N = " + std::to_string(N) + ", kernels " + kernels);
    if (fused_wgmma_device()) {
      EXPECT_EQ(kernels, N >= 128 ? "wgmma/wgmma" : "mma.sync/mma.sync");
    }
    ASSERT_EQ(o.dW.size(), static_cast<std::size_t>(V * D));
    expect_loss_is_log_V(o, N, V);
    std::int64_t first_bad = -1;
    for (std::int64_t j = 1; j < V - 1 && first_bad < 0; ++j)
      if (std::memcmp(&o.dW[static_cast<std::size_t>(j * D)], &o.dW[0], 8 * D) != 0) first_bad = j;
    EXPECT_EQ(first_bad, -1) << "dW row " << first_bad << " (offset " << first_bad * D
                             << ") differs from row 0";
    bool differs = false;
    for (std::int64_t d = 0; d < D; ++d) {
      const double v = o.dW[static_cast<std::size_t>((V - 1) * D + d)];
      ASSERT_TRUE(std::isfinite(v)) << "target dW row, column " << d;
      differs = differs || v != o.dW[static_cast<std::size_t>(d)];
    }
    EXPECT_TRUE(differs) << "the target row's dW equals the others'";
  }
}

}  // namespace
}  // namespace xentlab::gpu_tests
