// The selftest's model with its fp64 GEMMs on a GPU (harness/selftest/model.hpp, ModelDevice::cuda)
// against the same model on the host's BLAS, with and without the knobs the faults turn: the
// same arithmetic but for the order of the GEMMs' fp64 sums, so every output agrees to fp64
// roundoff — normwise within 2^-40 (the GEMMs' sums have ≤ V + D terms, γ ≈ 10³·2^-53 ≈ 2^-43 of
// the sum of magnitudes). Where the knobs round to bf16, two fp64 values about 2^-43 apart round
// apart only when a bf16 rounding boundary lies between them: probability ~2^-35 per element,
// none expected among these 10⁶. GPU only: skips with the reason without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "datasets/catalog.hpp"
#include "gpu/registry.hpp"
#include "harness/selftest/model.hpp"
#include "harness/verify/golden.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab::selftest {
namespace {

double normwise(const std::vector<double>& a, const std::vector<double>& b) {
  double dd = 0, bb = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    dd += (a[i] - b[i]) * (a[i] - b[i]);
    bb += b[i] * b[i];
  }
  return bb > 0 ? std::sqrt(dd / bb) : std::sqrt(dd);
}

void expect_same_model(const ModelOutputs& gpu, const ModelOutputs& cpu, const std::string& what) {
  const double tol = 0x1p-40;
  for (auto [name, a, b] :
       {std::tuple{"loss", &gpu.loss, &cpu.loss}, std::tuple{"lse", &gpu.lse, &cpu.lse},
        std::tuple{"dH", &gpu.dH, &cpu.dH}, std::tuple{"dW", &gpu.dW, &cpu.dW},
        std::tuple{"db", &gpu.db, &cpu.db}}) {
    ASSERT_EQ(a->size(), b->size()) << what << " " << name;
    EXPECT_LE(normwise(*a, *b), tol) << what << " " << name;
  }
  EXPECT_LE(std::fabs(gpu.reduced_loss - cpu.reduced_loss), tol * std::fabs(cpu.reduced_loss))
      << what << " reduced_loss";
}

TEST(SelftestModelGpu, AgreesWithTheHostModelWithEveryKnob) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << why;
  testing::TempFolder dir("selftest-model-gpu");
  DatasetParams p;
  p.N = 600;  // two blocks of the GPU model's 512 rows, chunks of 150 across them
  p.V = 1000;
  p.D = 40;
  const DatasetInstance ds = make_dataset("calibrated", p);
  write_golden(dir.path("g.h5"), ds, ds.spec, GoldenOptions{});
  const Golden g = read_golden(dir.path("g.h5"));
  std::vector<std::pair<std::string, ModelKnobs>> cases(4);
  cases[0].first = "no knob";
  cases[1].first = "bf16 logits on rows [100, 560)";
  cases[1].second.bf16_rows_begin = 100;
  cases[1].second.bf16_rows_end = 560;
  cases[2].first = "dW and the loss summed across chunks of 150 rows in bf16";
  cases[2].second.chunk_tokens = 150;
  cases[2].second.dW_chunk_sum = DType::bf16;
  cases[2].second.loss_chunk_sum = DType::bf16;
  cases[3].first = "the normaliser disregarded";
  cases[3].second.disregard_normalizer = true;
  for (const auto& [what, k] : cases)
    expect_same_model(run_model(g, k, ModelDevice::cuda), run_model(g, k, ModelDevice::cpu), what);
}

TEST(SelftestModelGpu, WithoutADeviceItThrows) {
  // Where there is no device the GPU model says so (the selftest then never asks for it: its
  // strategy candidates, and with them the model, run on the GPU only where one is present).
  std::string why;
  if (cuda_device_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  testing::TempFolder dir("selftest-model-nogpu");
  DatasetParams p;
  p.N = 8;
  p.V = 64;
  p.D = 8;
  const DatasetInstance ds = make_dataset("calibrated", p);
  write_golden(dir.path("g.h5"), ds, ds.spec, GoldenOptions{});
  const Golden g = read_golden(dir.path("g.h5"));
  EXPECT_THROW(run_model(g, ModelKnobs{}, ModelDevice::cuda), std::runtime_error);
}

}  // namespace
}  // namespace xentlab::selftest
