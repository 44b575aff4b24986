// The dataset catalog (datasets/catalog.hpp) and its generators (datasets/generators.hpp): every
// entry makes a valid, seeded problem; the regimes hold what they claim (calibrated targets follow
// the softmax, confident rows reach p_target in [p_lo, p_hi] up to the rounding of their inputs,
// masks, ties, ignored rows); generation is independent of the OpenMP thread count.
#include "datasets/catalog.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <set>

#include "datasets/generators.hpp"
#include "datasets/problem_ops.hpp"
#include "numerics/blas.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"

namespace xentlab {
namespace {

bool same_problem(const Problem& a, const Problem& b) {
  auto same = [](const Tensor& x, const Tensor& y) {
    return x.nbytes() == y.nbytes() && std::memcmp(x.data(), y.data(), x.nbytes()) == 0;
  };
  return a.targets == b.targets && same(a.H, b.H) && same(a.W, b.W) && same(a.logits, b.logits);
}

DatasetParams small(std::uint64_t seed, const DatasetEntry& e) {
  DatasetParams p;
  p.seed = seed;
  p.N = 6;
  if (!e.fixed_shape) {
    p.V = 300;
    if (e.defaults.D > 0) p.D = 16;
  }
  return p;
}

TEST(Catalog, EveryEntryMakesAValidSeededProblem) {
  std::set<std::string> names;
  for (const auto& e : dataset_catalog()) {
    SCOPED_TRACE(e.name);
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate name";
    EXPECT_FALSE(e.regime.empty());
    const DatasetInstance a = make_dataset(e.name, small(1, e)),
                          b = make_dataset(e.name, small(1, e));
    const DatasetInstance c = make_dataset(e.name, small(2, e));
    EXPECT_NO_THROW(a.problem.validate(a.spec.ignore_index));
    EXPECT_EQ(a.problem.N, 6);
    EXPECT_TRUE(same_problem(a.problem, b.problem));
    EXPECT_FALSE(same_problem(a.problem, c.problem));
    EXPECT_EQ(a.generator, "catalog:" + e.name);
  }
}

TEST(Catalog, LlmShapesAreTheRealModels) {
  // Real LM-head shapes: V=128256 D=4096; V=256000 D=2304 with softcap 30; V=151936 D=3584.
  const auto& l = find_dataset("llama3-8b").defaults;
  EXPECT_EQ(l.V, 128256);
  EXPECT_EQ(l.D, 4096);
  const auto& g = find_dataset("gemma2-2b").defaults;
  EXPECT_EQ(g.V, 256000);
  EXPECT_EQ(g.D, 2304);
  EXPECT_EQ(g.spec.softcap, 30.0);
  const auto& q = find_dataset("qwen2-7b").defaults;
  EXPECT_EQ(q.V, 151936);
  EXPECT_EQ(q.D, 3584);
  DatasetParams p;
  p.N = 3;
  p.V = 100;
  p.D = 8;
  EXPECT_EQ(make_dataset("gemma2-2b", p).spec.softcap, 30.0);
  EXPECT_EQ(find_dataset("odd-vocab").defaults.V % 2, 1);
}

TEST(Catalog, ErrorsNameTheProblem) {
  try {
    make_dataset("no-such", {});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("calibrated"), std::string::npos)
        << e.what();  // lists names
  }
  DatasetParams p;
  p.extra["nope"] = 1;
  EXPECT_THROW(make_dataset("masked", p), InputError);
  DatasetParams v;
  v.V = 100;
  EXPECT_THROW(make_dataset("stories260k", v), InputError);  // fixed shape
  DatasetParams d;
  d.D = 8;
  EXPECT_THROW(make_dataset("ties", d), InputError);  // given logits: no D
}

TEST(Generators, StoreRoundedGivesTheBitsOfTensorSet) {
  // Tensor::set (round_to, numerics/dtype.hpp) defines the rounding; the fast path must agree on
  // random values over many binades, exact ties (odd and even kept LSB), the range edges and
  // specials.
  std::vector<double> v;
  NormalStream s(9);
  for (int k = 0; k < 20000; ++k)
    v.push_back(s.next() * std::ldexp(1.0, static_cast<int>(s.uniform_int(300)) - 150));
  for (int m = 128; m < 256; ++m)  // m·2^-7 + 2^-8: halfway between two bf16 values in [1, 2)
    for (double sc : {1.0, -1.0, 0x1p-126, 0x1p120}) v.push_back(sc * (m / 128.0 + 0x1p-8));
  for (double x :
       {0.0, -0.0, 0x1p-126, 0x1p-127, 0x1p-133, 0x1.FEp127, 0x1.FFp127, 0x1.FEFFFFFFFFFFFp127,
        1e39, -1e39, HUGE_VAL, -HUGE_VAL, 65504.0, 65520.0, 6e-8, 3e-8})
    v.push_back(x);
  for (DType dt : {DType::bf16, DType::fp32, DType::fp16}) {
    Tensor a(dt, {static_cast<std::int64_t>(v.size())}),
        b(dt, {static_cast<std::int64_t>(v.size())});
    store_rounded(a, 0, v.data(), static_cast<std::int64_t>(v.size()));
    for (std::size_t k = 0; k < v.size(); ++k) b.set(static_cast<std::int64_t>(k), v[k]);
    for (std::size_t k = 0; k < v.size(); ++k)
      ASSERT_EQ(a.get(static_cast<std::int64_t>(k)), b.get(static_cast<std::int64_t>(k)))
          << to_string(dt) << " value " << v[k];
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.nbytes())) << to_string(dt);
  }
}

TEST(Generators, IndependentOfThreadCount) {
  LossSpec spec;
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Problem a = make_head(9, 257, 12, DType::bf16, 4.0, 5, TargetMode::calibrated, spec);
  const Problem ca = make_confident_head(5, 257, 12, DType::bf16, 4.0, 5, spec);
  omp_set_num_threads(3);
  const Problem b = make_head(9, 257, 12, DType::bf16, 4.0, 5, TargetMode::calibrated, spec);
  const Problem cb = make_confident_head(5, 257, 12, DType::bf16, 4.0, 5, spec);
  omp_set_num_threads(before);
  EXPECT_TRUE(same_problem(a, b));
  EXPECT_TRUE(same_problem(ca, cb));
}

// Provenance: calibrated targets name what drew them (the CPU's BLAS here; the GPU's engine is
// checked by the GPU tests), kept through a row selection and a dtype change; uniform targets,
// drawn from the seed alone, name nothing.
TEST(Generators, CalibratedTargetsNameWhatDrewThem) {
  LossSpec spec;
  const Problem c = make_head(6, 60, 8, DType::bf16, 4.0, 2, TargetMode::calibrated, spec);
  EXPECT_EQ(c.targets_drawn_by, std::string("cpu: ") + blas_description());
  EXPECT_EQ(select_rows(c, {1, 4}, spec.ignore_index).targets_drawn_by, c.targets_drawn_by);
  EXPECT_EQ(with_input_dtype(c, DType::fp32, spec.ignore_index).targets_drawn_by,
            c.targets_drawn_by);
  EXPECT_EQ(make_head(6, 60, 8, DType::bf16, 4.0, 2, TargetMode::uniform, spec).targets_drawn_by,
            "");
}

TEST(Generators, CalibratedTargetsFollowTheSoftmax) {
  // For t ~ p, E[−log p_t] = entropy and Var[−log p_t] = Σ p (log p)² − entropy². The sample mean
  // of −log p_t over N rows must be within 4 standard errors of the mean entropy (a seeded test:
  // deterministic; a uniform-target sampler misses by hundreds of standard errors here).
  const std::int64_t N = 400, V = 1000;
  LossSpec spec;
  for (TargetMode mode : {TargetMode::calibrated, TargetMode::uniform}) {
    const Problem p = make_head(N, V, 16, DType::fp32, 4.0, 11, mode, spec);
    ReferenceOptions o;
    o.want_dz = true;
    o.want_dH = o.want_dW = o.want_db = false;
    LossSpec none = spec;
    none.reduction = Reduction::sum;  // dz = p − onehot, unscaled
    const ReferenceResult r = compute_reference(p, none, o);
    double mean_nlp = 0, mean_h = 0, var = 0;
    for (std::int64_t i = 0; i < N; ++i) {
      mean_nlp += -std::log(r.p_target[i]) / N;
      mean_h += r.entropy[i] / N;
      double m2 = 0;
      for (std::int64_t j = 0; j < V; ++j) {
        const double pj = r.dz[i * V + j] + (j == p.targets[i] ? 1.0 : 0.0);
        if (pj > 0) m2 += pj * std::log(pj) * std::log(pj);
      }
      var += (m2 - r.entropy[i] * r.entropy[i]) / N;
    }
    const double se = std::sqrt(var / N);
    constexpr double kSigmas = 4;  // a 4-standard-error band (two-sided, normal: 6e-5)
    if (mode == TargetMode::calibrated)
      EXPECT_LE(std::fabs(mean_nlp - mean_h), kSigmas * se)
          << "mean −log p_t " << mean_nlp << " vs entropy " << mean_h;
    else
      EXPECT_GT(std::fabs(mean_nlp - mean_h), kSigmas * se)
          << "uniform targets should not look calibrated";
  }
}

TEST(Generators, ConfidentRowsReachTheirTargetProbability) {
  // fp32 inputs: rounding H_i + c·W_t moves each logit by at most u·Σ_d|H_id||W_jd| =: δ, so the
  // achieved p_t is within a factor e^{±2δ} of the bisection's (which is ≥ p*, within its
  // 40-halving resolution) — we allow p_lo·e^{−2δ} ≤ p_t ≤ 1.
  const std::int64_t N = 12, V = 500, D = 16;
  LossSpec spec;
  const double p_lo = 0.9, p_hi = 0.9999;
  const Problem p = make_confident_head(N, V, D, DType::fp32, 4.0, 3, spec, p_lo, p_hi);
  ReferenceOptions o;
  o.want_dH = o.want_dW = o.want_db = false;
  const ReferenceResult r = compute_reference(p, spec, o);
  const double u = unit_roundoff(DType::fp32);
  for (std::int64_t i = 0; i < N; ++i) {
    double delta = 0;
    for (std::int64_t j = 0; j < V; ++j) {
      double s = 0;
      for (std::int64_t d = 0; d < D; ++d) s += std::fabs(p.H.get(i * D + d) * p.W.get(j * D + d));
      delta = std::max(delta, u * s);
    }
    EXPECT_GE(r.p_target[i], p_lo * std::exp(-2 * delta)) << "row " << i;
  }
}

TEST(Generators, MasksTiesAndIgnoredRows) {
  LossSpec spec;
  const Problem m = make_masked_logits(5, 200, DType::bf16, 4.0, 0.5, 1, spec);
  for (std::int64_t j = 0; j < 200; ++j)
    EXPECT_EQ(m.logits.get(j), -HUGE_VAL);  // row 0 fully masked
  EXPECT_EQ(m.targets[0], spec.ignore_index);
  for (std::int64_t j = 0; j < 200; ++j)  // row 1: only its target is finite
    EXPECT_EQ(std::isfinite(m.logits.get(200 + j)), j == m.targets[1]) << j;
  for (std::int64_t i = 1; i < 5; ++i)
    EXPECT_TRUE(std::isfinite(m.logits.get(i * 200 + m.targets[i])));
  const Problem t = make_tied_logits(4, 300, DType::bf16, 4, 1, spec);
  for (std::int64_t k = 0; k < 1200; ++k) {
    const double v = t.logits.get(k);
    EXPECT_TRUE(v == std::floor(v) && v >= 0 && v < 4) << v;
  }
  Problem all = make_head(4, 50, 8, DType::bf16, 1.0, 1, TargetMode::uniform, spec);
  ignore_rows(all, 1.0, 1, spec.ignore_index);
  EXPECT_EQ(all.count_valid(spec.ignore_index), 0);
  const Problem h =
      make_heavy_logits(4, 500, DType::fp16, 8.0, 1.5, 1, TargetMode::calibrated, spec);
  for (std::int64_t k = 0; k < 2000; ++k)
    EXPECT_LE(std::fabs(h.logits.get(k)), max_finite(DType::fp16));
}

}  // namespace
}  // namespace xentlab
