// The calibrated targets of a linear head (datasets/generators.hpp): the fp64 GEMM logits
// (HeadLogits) are within γ_D·Σ|h||w| of the exact ones (products of bf16/fp16/fp32 values are
// exact in double, so only the sum rounds), whatever the panels of W and the thread count (bit for
// bit); the targets are a deterministic function of the seed; they follow each row's softmax after
// the spec's scale and softcap (binomial bands, two-sided, from the exact probabilities).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "datasets/catalog.hpp"
#include "datasets/generators.hpp"
#include "numerics/eft.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace {

constexpr double kU = 0x1p-53;  // fp64 unit roundoff
// Two-sided band, in standard deviations, of the seeded statistical checks (normal: 2e-9).
constexpr double kSigmas = 6;

std::vector<double> read_all(const Tensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  t.read(0, t.numel(), v.data());
  return v;
}

// Σ_d h_d·w_d by Sum2 (|value − exact| ≤ u·|exact| + γ²_{D−1}·Σ|h||w|, eft.hpp) and Σ|h||w|.
struct ExactDot {
  double value, abs_sum;
};
ExactDot exact_dot(const double* h, const double* w, std::int64_t D) {
  eft::CompensatedSum s;
  double a = 0;
  for (std::int64_t d = 0; d < D; ++d) {
    s.add(h[d] * w[d]);  // exact: both factors have at most 24 significant bits
    a += std::fabs(h[d] * w[d]);
  }
  return {s.value(), a};
}

// The spec's transformation of a raw logit (scale, then softcap), as the loss defines it.
double transform(double r, const LossSpec& spec) {
  const double z = spec.logit_scale * r;
  return spec.softcap > 0 ? spec.softcap * std::tanh(z / spec.softcap) : z;
}

TEST(HeadLogits, WithinGammaDOfTheExactLogits) {
  const std::int64_t N = 24, V = 700, D = 300;  // V: two full tiles and a partial one
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32}) {
    SCOPED_TRACE(to_string(dt));
    const Problem p = make_head(N, V, D, dt, 4.0, 7, TargetMode::uniform, LossSpec{});
    const std::vector<double> H = read_all(p.H), W = read_all(p.W);
    const HeadLogits whole(p.W), panels(p.W, 256);
    ASSERT_TRUE(whole.whole());
    ASSERT_FALSE(panels.whole());
    std::vector<double> Z, Zp;
    whole.compute(H.data(), N, Z);
    panels.compute(H.data(), N, Zp);
    ASSERT_EQ(Z.size(), static_cast<std::size_t>(N * V));
    EXPECT_EQ(0, std::memcmp(Z.data(), Zp.data(), Z.size() * sizeof(double)))
        << "the panels of W changed a logit's bits";
    // |Z − exact| ≤ γ_D·A (the GEMM, any order) and |Sum2 − exact| ≤ u·A + γ_D²·A, with
    // A = Σ|h||w| ≤ fl(A)·(1 + 2γ_D) (fl(A) is a recursive sum of D non-negative terms).
    const double g = eft::gamma_n(static_cast<double>(D));
    double worst = 0;
    for (std::int64_t i = 0; i < N; ++i)
      for (std::int64_t j = 0; j < V; ++j) {
        const ExactDot e = exact_dot(H.data() + i * D, W.data() + j * D, D);
        const double a_up = e.abs_sum * (1 + 2 * g);
        const double bound = (g + kU + g * g) * a_up;
        const double err = std::fabs(Z[static_cast<std::size_t>(i * V + j)] - e.value);
        ASSERT_LE(err, bound) << "row " << i << " vocab " << j;
        worst = std::max(worst, err / bound);
      }
    RecordProperty(std::string("worst_error_over_bound_") + std::string(to_string(dt)),
                   std::to_string(worst));
  }
}

TEST(HeadLogits, SameBitsForAnyThreadCountAndPanels) {
  // D past two of the BLAS's k-blocks, so that a k split that followed the threads would show.
  const std::int64_t N = 40, V = 600, D = 1000;
  const Problem p = make_head(N, V, D, DType::fp32, 4.0, 3, TargetMode::uniform, LossSpec{});
  const std::vector<double> H = read_all(p.H);
  const int before = omp_get_max_threads();
  std::vector<std::vector<double>> runs;
  for (int threads : {1, 2, 3})
    for (std::int64_t panel : {std::int64_t{0}, std::int64_t{300}}) {
      omp_set_num_threads(threads);
      std::vector<double> Z;
      HeadLogits(p.W, panel).compute(H.data(), N, Z);
      runs.push_back(std::move(Z));
    }
  omp_set_num_threads(before);
  for (std::size_t k = 1; k < runs.size(); ++k)
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[k].data(), runs[0].size() * sizeof(double)))
        << "run " << k;
}

TEST(HeadLogits, RefusesWhatIsNoHead) {
  const Tensor v(DType::fp32, {5});
  EXPECT_THROW(HeadLogits{v}, InputError);
  const Tensor W(DType::fp32, {5, 3});
  EXPECT_THROW(HeadLogits(W, -1), InputError);
}

TEST(CalibratedTargets, AFunctionOfTheSeed) {
  const std::int64_t N = 50, V = 1000, D = 64;
  LossSpec spec;
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Problem a = make_head(N, V, D, DType::bf16, 4.0, 21, TargetMode::calibrated, spec);
  omp_set_num_threads(2);
  const Problem b = make_head(N, V, D, DType::bf16, 4.0, 21, TargetMode::calibrated, spec);
  omp_set_num_threads(3);
  const Problem c = make_head(N, V, D, DType::bf16, 4.0, 22, TargetMode::calibrated, spec);
  omp_set_num_threads(before);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_NE(a.targets, c.targets);
}

TEST(CalibratedTargets, ProgressHearsEveryBlock) {
  const std::int64_t N = 2100;  // more rows than one block
  std::vector<std::pair<std::int64_t, std::int64_t>> calls;
  make_head(N, 4, 4, DType::fp32, 1.0, 1, TargetMode::calibrated, LossSpec{}, "head",
            [&](std::int64_t done, std::int64_t total) { calls.emplace_back(done, total); });
  ASSERT_GE(calls.size(), 2u);
  for (std::size_t k = 0; k < calls.size(); ++k) {
    EXPECT_EQ(calls[k].second, N);
    if (k > 0) {
      EXPECT_GT(calls[k].first, calls[k - 1].first);
    }
  }
  EXPECT_EQ(calls.back().first, N);
  // The confident rows report theirs, and the catalog passes DatasetParams::progress on.
  std::int64_t last = 0;
  make_confident_head(130, 4, 4, DType::fp32, 1.0, 1, LossSpec{}, 0.9, 0.9999,
                      [&](std::int64_t done, std::int64_t) { last = done; });
  EXPECT_EQ(last, 130);
  DatasetParams params;
  params.N = 7;
  params.progress = [&](std::int64_t done, std::int64_t) { last = done; };
  make_dataset("llama3-8b", [&] {
    DatasetParams q = params;
    q.V = 50;
    q.D = 8;
    return q;
  }());
  EXPECT_EQ(last, 7);
}

// Whether |count − Σq| ≤ kSigmas·sqrt(Σq(1 − q)): count is the number of independent rows whose
// event (probability q_i) happened. The message gives the numbers either way.
testing::AssertionResult in_binomial_band(std::int64_t count, const std::vector<double>& q) {
  double mean = 0, var = 0;
  for (double x : q) {
    mean += x;
    var += x * (1 - x);
  }
  const bool in = std::fabs(static_cast<double>(count) - mean) <= kSigmas * std::sqrt(var);
  return (in ? testing::AssertionSuccess() : testing::AssertionFailure())
         << count << " rows, expected " << mean << " ± " << std::sqrt(var)
         << " (one standard deviation; band " << kSigmas << ")";
}

TEST(CalibratedTargets, TwoWordVocabularyFollowsTheTransformedSoftmax) {
  // V = 2: t_i = 0 with probability p0_i = 1/(1 + e^{z1 − z0}) after the scale and softcap, and the
  // number of rows with target 0 is a sum of independent Bernoullis; so is the number of rows
  // whose target is their more likely word (probability max(p0, 1 − p0)). The softcap bounds
  // |z1 − z0| by 4, which the raw softmax would not: on that second count it must miss the band,
  // or the check could not tell the two apart.
  const std::int64_t N = 20000, V = 2, D = 16;
  LossSpec spec;
  spec.logit_scale = 1.5;
  spec.softcap = 2.0;
  spec.validate();
  const Problem p = make_head(N, V, D, DType::bf16, 3.0, 5, TargetMode::calibrated, spec);
  const std::vector<double> H = read_all(p.H), W = read_all(p.W);
  std::vector<double> q0(static_cast<std::size_t>(N)), q_likely(q0.size()), q_likely_raw(q0.size());
  std::int64_t zeros = 0, likely = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double r0 = exact_dot(H.data() + i * D, W.data(), D).value;
    const double r1 = exact_dot(H.data() + i * D, W.data() + D, D).value;
    q0[k] = 1 / (1 + std::exp(transform(r1, spec) - transform(r0, spec)));
    const double p0_raw = 1 / (1 + std::exp(r1 - r0));
    q_likely[k] = std::max(q0[k], 1 - q0[k]);
    q_likely_raw[k] = std::max(p0_raw, 1 - p0_raw);
    zeros += p.targets[k] == 0;
    likely += p.targets[k] == (r0 >= r1 ? 0 : 1);
  }
  EXPECT_TRUE(in_binomial_band(zeros, q0)) << "target 0";
  EXPECT_TRUE(in_binomial_band(likely, q_likely)) << "the more likely word";
  EXPECT_FALSE(in_binomial_band(likely, q_likely_raw))
      << "the untransformed softmax fits as well: the check is blind to the spec";
}

// A TargetEngine written here from the definition: exact (Sum2) logits, the spec's transform, and
// the first j whose running sum of exp(z_j − max z) passes u·Σ. It records the uniforms it got.
class DefinitionEngine : public TargetEngine {
 public:
  mutable std::vector<double> seen_u;
  std::int64_t corrupt = -2;  // ≥ -1: the target every row gets (to test make_head's checks)
  std::string describe() const override { return "the definition, in the test"; }
  void sample(const Tensor& H, const Tensor& W, const LossSpec& spec, const std::vector<double>& u,
              std::vector<std::int64_t>& t, const GenerationProgress& progress) const override {
    seen_u = u;
    const std::int64_t N = H.dim(0), V = W.dim(0), D = W.dim(1);
    const std::vector<double> h = read_all(H), w = read_all(W);
    t.assign(static_cast<std::size_t>(N), corrupt);
    if (corrupt >= -1) return;
    for (std::int64_t i = 0; i < N; ++i) {
      std::vector<double> z(static_cast<std::size_t>(V));
      for (std::int64_t j = 0; j < V; ++j)
        z[static_cast<std::size_t>(j)] =
            transform(exact_dot(h.data() + i * D, w.data() + j * D, D).value, spec);
      const double mx = *std::max_element(z.begin(), z.end());
      double sum = 0;
      for (double x : z) sum += std::exp(x - mx);
      const double U = u[static_cast<std::size_t>(i)] * sum;
      double c = 0;
      for (std::int64_t j = 0; j < V; ++j) {
        c += std::exp(z[static_cast<std::size_t>(j)] - mx);
        t[static_cast<std::size_t>(i)] = j;
        if (U < c) break;
      }
      if (progress) progress(i + 1, N);
    }
  }
};

TEST(CalibratedTargets, AnEngineDrawsWithTheRowsOwnUniforms) {
  // make_head hands an engine each row's uniform, the one its CPU path draws with: an engine
  // that draws by the definition gives the CPU path's targets (they could differ only where a
  // uniform falls within ~1e-15 of a boundary of the softmax's cumulative sums).
  const std::int64_t N = 96, V = 300, D = 48;
  LossSpec spec;
  spec.softcap = 2.5;
  spec.logit_scale = 0.75;
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32}) {
    const Problem cpu = make_head(N, V, D, dt, 3.0, 21, TargetMode::calibrated, spec);
    DefinitionEngine engine;
    std::int64_t heard = 0;
    const Problem other = make_head(
        N, V, D, dt, 3.0, 21, TargetMode::calibrated, spec, "head",
        [&](std::int64_t done, std::int64_t) { heard = done; }, &engine);
    EXPECT_EQ(other.targets, cpu.targets) << to_string(dt);
    EXPECT_EQ(heard, N);
    ASSERT_EQ(engine.seen_u.size(), static_cast<std::size_t>(N));
    std::vector<double> distinct = engine.seen_u;
    std::sort(distinct.begin(), distinct.end());
    EXPECT_EQ(std::unique(distinct.begin(), distinct.end()), distinct.end()) << "one per row";
    for (double u : engine.seen_u) EXPECT_TRUE(u >= 0 && u < 1) << u;
  }
  // A target outside [0, V) from an engine is a fault of the engine, not a problem to return.
  for (std::int64_t bad : {std::int64_t{-1}, V}) {
    DefinitionEngine broken;
    broken.corrupt = bad;
    EXPECT_THROW(
        make_head(N, V, D, DType::bf16, 3.0, 21, TargetMode::calibrated, spec, "head", {}, &broken),
        std::logic_error)
        << bad;
  }
}

TEST(CalibratedTargets, NearlyOneHotRowsTakeTheirArgmax) {
  // σ = 300: the top two logits of a row are typically hundreds apart, so the target is the
  // argmax but for rows with probability q_i = 1 − p_max of another; their count is in the band.
  const std::int64_t N = 200, V = 64, D = 32;
  const LossSpec spec;
  const Problem p = make_head(N, V, D, DType::fp32, 300.0, 9, TargetMode::calibrated, spec);
  const std::vector<double> H = read_all(p.H), W = read_all(p.W);
  std::vector<double> q(static_cast<std::size_t>(N));
  std::int64_t others = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    std::vector<double> z(static_cast<std::size_t>(V));
    for (std::int64_t j = 0; j < V; ++j)
      z[static_cast<std::size_t>(j)] = exact_dot(H.data() + i * D, W.data() + j * D, D).value;
    const auto top = std::max_element(z.begin(), z.end()) - z.begin();
    double sum = 0;
    for (double x : z) sum += std::exp(x - z[static_cast<std::size_t>(top)]);
    q[static_cast<std::size_t>(i)] = 1 - 1 / sum;
    others += p.targets[static_cast<std::size_t>(i)] != top;
  }
  EXPECT_TRUE(in_binomial_band(others, q)) << "targets other than the argmax";
}

}  // namespace
}  // namespace xentlab
