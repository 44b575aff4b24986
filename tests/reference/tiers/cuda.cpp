// The cuda tier of the reference against the compensated and BLAS tiers (GPU only: skips with
// the reason where this build or machine has no CUDA device). Expected values as in
// tests/reference/tiers/agreement.cpp.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "numerics/error.hpp"
#include "reference/reference.hpp"
#include "tests/support/reference_tiers_support.hpp"

namespace xentlab {
using namespace tier_tests;

// ---- the cuda tier (skips where there is no GPU) -------------------------------------------

TEST(ReferenceTiersGpu, CudaAgreesWithCompensatedOnEveryOption) {
  std::string why;
  if (!cuda_reference_available(&why)) GTEST_SKIP() << why;
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32}) {
    const Problem p = masked_head(dt, 5);
    for (Reduction red : {Reduction::mean, Reduction::none}) {
      LossSpec s = all_options(red);
      ReferenceOptions o;
      o.want_dz = true;
      if (red == Reduction::none)
        for (std::int64_t i = 0; i < p.N; ++i)
          o.upstream.push_back(1.0 - 0.125 * static_cast<double>(i % 9));
      const std::string ctx = std::string(to_string(dt)) + " " + s.describe();
      const ReferenceResult c = run(p, s, o, ReferenceTier::compensated);
      expect_agree(c, run(p, s, o, ReferenceTier::cuda), ctx);
      o.block_rows = 4;
      o.vocab_rows = sample_rows(p.V, 31, 2);
      const ReferenceResult cs = run(p, s, o, ReferenceTier::compensated);
      expect_agree(cs, run(p, s, o, ReferenceTier::cuda), ctx + " blocks of 4, sampled dW");
    }
  }
}

TEST(ReferenceTiersGpu, CudaIndexingPast2Pow31) {
  std::string why;
  if (!cuda_reference_available(&why)) GTEST_SKIP() << why;
  // N·V = 16385 · 131072 > 2³¹ logits, and V·D = 131072 · 16384 > 2³¹ dW elements. Compared with
  // the BLAS tier on sampled rows (each tier's per-row results are the full problem's).
  const Problem p = make_gaussian_linear(16385, 131072, 16, DType::bf16, 3.0, 7);
  ReferenceOptions o;
  o.want_dW = o.want_db = false;
  const ReferenceResult g = run(p, LossSpec{}, o, ReferenceTier::cuda);
  ReferenceOptions s = o;
  s.token_rows = {0, 1, 8191, 16383, 16384};
  const ReferenceResult c = run(p, LossSpec{}, s, ReferenceTier::blas);
  for (std::size_t q = 0; q < s.token_rows.size(); ++q) {
    const auto i = static_cast<std::size_t>(s.token_rows[q]);
    EXPECT_LE(std::fabs(g.loss[i] - c.loss[q]), g.loss_bound[i] + c.loss_bound[q]) << "row " << i;
    for (std::int64_t d = 0; d < p.D; ++d) {
      const auto gi = i * 16 + static_cast<std::size_t>(d),
                 ci = q * 16 + static_cast<std::size_t>(d);
      EXPECT_LE(std::fabs(g.dH[gi] - c.dH[ci]), g.dH_bound[gi] + c.dH_bound[ci]) << "dH row " << i;
    }
  }
  const Problem w = make_gaussian_linear(3, 131100, 16384, DType::bf16, 1.0, 9);
  ReferenceOptions cw;
  cw.vocab_rows = {0, 65536, 131099};
  // The full dW (V·D > 2³¹ output elements), without dH (not compared here): about 68 GiB of the
  // device by the tier's sizing; a GPU with less computes the same vocabulary rows as the BLAS
  // tier, whose W offsets k·D still pass 2³¹ (row 131099 starts at element 2147893216), and says
  // so (property full_dW).
  bool full = true;
  ReferenceResult gw;
  try {
    ReferenceOptions all;
    all.want_dH = false;
    gw = run(w, LossSpec{}, all, ReferenceTier::cuda);
  } catch (const InputError& e) {
    if (std::string(e.what()).find("of GPU memory") == std::string::npos) throw;
    full = false;
    std::cout << "full dW does not fit this GPU (" << e.what()
              << "): its vocabulary rows 0, 65536, 131099 instead\n";
    RecordProperty("full_dW", "does not fit this GPU: sampled vocabulary rows");
    gw = run(w, LossSpec{}, cw, ReferenceTier::cuda);
  }
  const ReferenceResult cc = run(w, LossSpec{}, cw, ReferenceTier::blas);
  for (std::size_t jj = 0; jj < 3; ++jj)
    for (std::int64_t d : {std::int64_t{0}, std::int64_t{16383}}) {
      const auto gi =
          static_cast<std::size_t>((full ? cw.vocab_rows[jj] : std::int64_t(jj)) * 16384 + d);
      const auto ci = jj * 16384 + static_cast<std::size_t>(d);
      EXPECT_LE(std::fabs(gw.dW[gi] - cc.dW[ci]), gw.dW_bound[gi] + cc.dW_bound[ci]);
    }
}

TEST(ReferenceTiersGpu, CalibratedTargetsOnTheGpuAreTheCpusTargets) {
  std::string why;
  if (!cuda_reference_available(&why)) GTEST_SKIP() << why;
  // The GPU's logits and sums run in another order than the CPU BLAS's: a target may differ only
  // where a row's uniform falls within ~1e-11 (relative) of a boundary of its softmax's
  // cumulative sums, so every target of these few thousand rows is the CPU's.
  const auto engine = make_cuda_target_engine();
  struct Shape {
    std::int64_t N, V, D;
    DType dt;
    double sigma, softcap, scale;
  };
  for (const Shape& sh :
       {Shape{256, 128256, 4096, DType::bf16, 4.0, 0, 1},
        Shape{2048, 5003, 256, DType::fp16, 3.0, 30, 1},
        Shape{1500, 7000, 96, DType::fp32, 8.0, 2.5, 0.5},
        // Fewer words than threads, a multiple of 256, and rows whose weights
        // underflow to 0 but for a few (σ = 300).
        Shape{512, 100, 32, DType::bf16, 4.0, 0, 1}, Shape{256, 512, 64, DType::bf16, 4.0, 0, 1},
        Shape{256, 1000, 32, DType::fp32, 300.0, 0, 1}}) {
    LossSpec spec;
    spec.softcap = sh.softcap;
    spec.logit_scale = sh.scale;
    const Problem cpu =
        make_head(sh.N, sh.V, sh.D, sh.dt, sh.sigma, 5, TargetMode::calibrated, spec);
    const Problem gpu = make_head(sh.N, sh.V, sh.D, sh.dt, sh.sigma, 5, TargetMode::calibrated,
                                  spec, "head", {}, engine.get());
    std::int64_t differ = 0;
    for (std::size_t i = 0; i < cpu.targets.size(); ++i) differ += cpu.targets[i] != gpu.targets[i];
    EXPECT_EQ(differ, 0) << sh.N << "×" << sh.V << "×" << sh.D << " " << to_string(sh.dt) << " "
                         << spec.describe();
  }
}

}  // namespace xentlab
