// The loss semantics users train with, through every interface: a per-token upstream gradient g
// (reduction none) and a caller-given normaliser (reduction mean over the valid tokens of all
// micro-batches, `num_items_in_batch`) in the reference, the emulated strategies, golden files,
// verify and the audit; the audit's chunk width. Expected values come from the mathematics
// (dL/dz_i = g_i·(p_i − e_t) for reduction none; loss = Σ loss_i / n and gradients 1/n of the
// sum's for a normaliser n) applied to the reference's reduction-sum results, never from the
// code path under test; tolerances are the reference's certified bounds plus the rounding of the
// test's own fp64 arithmetic (γ_n, numerics/eft.hpp).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include "datasets/catalog.hpp"
#include "datasets/io/h5.hpp"
#include "gpu/registry.hpp"
#include "harness/audit/audit.hpp"
#include "harness/verify/golden.hpp"
#include "harness/verify/verify.hpp"
#include "judge/bounds_for.hpp"
#include "numerics/eft.hpp"
#include "numerics/error.hpp"
#include "numerics/recipe.hpp"
#include "reference/reference.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab {
namespace {

constexpr double kU = 0x1p-53;  // unit roundoff of fp64

std::size_t sz(std::int64_t n) {
  return static_cast<std::size_t>(n);
}

class LossSemantics : public testing::TempFolderTest {
 protected:
  LossSemantics() : TempFolderTest("semantics") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    DatasetParams p;
    p.N = 32;
    p.seed = 4;
    ds_ = make_dataset("stories260k", p);
  }

  static Tensor tensor(const std::vector<double>& v, std::vector<std::int64_t> shape) {
    Tensor t(DType::fp64, std::move(shape));
    for (std::size_t k = 0; k < v.size(); ++k) t.set(static_cast<std::int64_t>(k), v[k]);
    return t;
  }

  /// The reference of reduction sum (dL/dloss_i = 1) with dz: the gradients every other
  /// semantics scales.
  ReferenceResult sum_reference() const {
    LossSpec s = ds_.spec;
    s.reduction = Reduction::sum;
    ReferenceOptions o;
    o.want_dz = true;
    return compute_reference(ds_.problem, s, o);
  }

  /// A candidate from per-row weights w_i applied to the sum reference: loss and lse as they
  /// are, reduced = red_scale·Σ w_i·loss_i, dH_i = w_i·dH_i, dW = Σ_i w_i dz_i ⊗ H_i,
  /// db = Σ_i w_i dz_i (the chain rule, in fp64).
  std::vector<std::pair<std::string, Tensor>> weighted_candidate(const ReferenceResult& r,
                                                                 const std::vector<double>& w,
                                                                 double reduced) const {
    const std::int64_t N = ds_.problem.N, V = ds_.problem.V, D = ds_.problem.D;
    std::vector<double> dH(sz(N * D)), dW(sz(V * D), 0.0), db(sz(V), 0.0), h(sz(D));
    for (std::int64_t i = 0; i < N; ++i) {
      ds_.problem.H.read(i * D, D, h.data());
      for (std::int64_t d = 0; d < D; ++d) dH[sz(i * D + d)] = w[sz(i)] * r.dH[sz(i * D + d)];
      for (std::int64_t j = 0; j < V; ++j) {
        const double dz = w[sz(i)] * r.dz[sz(i * V + j)];
        db[sz(j)] += dz;
        for (std::int64_t d = 0; d < D; ++d) dW[sz(j * D + d)] += dz * h[sz(d)];
      }
    }
    return {{"loss", tensor(r.loss, {N})},
            {"lse", tensor(r.lse, {N})},
            {"reduced_loss", tensor({reduced}, {})},
            {"dH", tensor(dH, {N, D})},
            {"dW", tensor(dW, {V, D})},
            {"db", tensor(db, {V})}};
  }

  static const OutputReport& output(const VerifyReport& r, const std::string& name) {
    for (const auto& o : r.outputs)
      if (o.name == name) return o;
    ADD_FAILURE() << "no report for " << name;
    return r.outputs.front();
  }

  DatasetInstance ds_;
};

// ---- upstream gradient
// ---------------------------------------------------------------------------

TEST(RandomUpstream, IsSeededAndHoldsZerosNegativesAndBf16ExactValues) {
  const std::vector<double> g = random_upstream(4000, 11);
  EXPECT_EQ(g, random_upstream(4000, 11));
  EXPECT_NE(g, random_upstream(4000, 12));
  int zeros = 0, negative = 0;
  for (double v : g) {
    const double k = v * 8;
    EXPECT_EQ(k, std::round(k)) << v;  // k/8 with an integer k …
    EXPECT_GE(k, -8);                  // … in [−8, 16]: 5 significant bits at most, bf16-exact
    EXPECT_LE(k, 16);
    zeros += v == 0.0;
    negative += v < 0.0;
  }
  // 1 in 25 zeros and 8 in 25 negatives: 160 and 1280 expected of 4000 (4.9 and 3.3 standard
  // deviations of a binomial at these limits).
  EXPECT_GT(zeros, 100);
  EXPECT_LT(zeros, 220);
  EXPECT_GT(negative, 1180);
  EXPECT_LT(negative, 1380);
}

TEST_F(LossSemantics, UpstreamGradientInGoldenFileExactAnswerPassesAndIgnoredGFails) {
  const std::int64_t N = ds_.problem.N;
  LossSpec none = ds_.spec;
  none.reduction = Reduction::none;
  GoldenOptions o;
  o.upstream = random_upstream(N, 7);
  write_golden(path("g.h5"), ds_, none, o);
  const Golden g = read_golden(path("g.h5"));
  EXPECT_EQ(g.upstream, o.upstream);
  for (std::int64_t i = 0; i < N; ++i) {
    const bool valid = ds_.problem.targets[sz(i)] != none.ignore_index;
    EXPECT_EQ(g.grad_scale[sz(i)], valid ? o.upstream[sz(i)] : 0.0) << i;
  }

  const ReferenceResult r1 = sum_reference();
  double red = 0.0;
  for (std::int64_t i = 0; i < N; ++i) red += o.upstream[sz(i)] * r1.loss[sz(i)];
  write_candidate(path("exact.h5"), false, weighted_candidate(r1, o.upstream, red), "g applied");
  // The classic bug: g ignored, i.e. the gradient of Σ loss_i.
  write_candidate(path("bug.h5"), false,
                  weighted_candidate(r1, std::vector<double>(sz(N), 1.0), r1.reduced_loss),
                  "g ignored");
  for (const char* policy : {"fp32", "bf16"}) {
    const VerifyReport exact = verify_candidate(g, path("exact.h5"), make_verify_policy(policy));
    EXPECT_TRUE(exact.passed) << policy << "\n" << format_report(exact);
    const VerifyReport bug = verify_candidate(g, path("bug.h5"), make_verify_policy(policy));
    EXPECT_FALSE(bug.passed) << policy;
    for (const char* name : {"reduced_loss", "dH", "dW", "db"})
      EXPECT_EQ(output(bug, name).status, "failed") << policy << " " << name;
    for (const char* name : {"loss", "lse"})  // per-token values do not depend on g
      EXPECT_EQ(output(bug, name).status, "passed") << policy << " " << name;
  }
  // The differential baseline runs the emulation with the same g: the exact dH stored in bf16 —
  // within the bound (one rounding into the storage dtype) — is a lowered precision against the
  // fp32 recipe's baseline. (A baseline without g would have an error of order 1 and let it pass.)
  auto coarse = weighted_candidate(r1, o.upstream, red);
  {
    const Tensor& dH = coarse[3].second;
    Tensor b(DType::bf16, {N, ds_.problem.D});
    for (std::int64_t k = 0; k < N * ds_.problem.D; ++k) b.set(k, dH.get(k));
    coarse[3].second = std::move(b);
  }
  write_candidate(path("coarse.h5"), false, coarse, "dH in bf16");
  VerifyOptions both;
  const VerifyReport c = verify_candidate(g, path("coarse.h5"), make_verify_policy("fp32"), both);
  EXPECT_EQ(output(c, "dH").bound_status, "passed") << format_report(c);
  EXPECT_EQ(output(c, "dH").status, "failed") << format_report(c);
}

TEST_F(LossSemantics, UpstreamGradientIsRefusedWhereItHasNoMeaning) {
  GoldenOptions o;
  o.upstream = random_upstream(ds_.problem.N, 7);
  LossSpec mean = ds_.spec;
  mean.reduction = Reduction::mean;
  EXPECT_THROW(write_golden(path("m.h5"), ds_, mean, o), InputError);
  LossSpec none = mean;
  none.reduction = Reduction::none;
  o.upstream.pop_back();  // N − 1 entries
  EXPECT_THROW(write_golden(path("n.h5"), ds_, none, o), InputError);
  o.upstream.push_back(std::numeric_limits<double>::infinity());
  EXPECT_THROW(write_golden(path("n.h5"), ds_, none, o), InputError);
  // All ones is the default: nothing is stored; all ones of the wrong length is still refused.
  o.upstream.assign(sz(ds_.problem.N), 1.0);
  write_golden(path("ones.h5"), ds_, none, o);
  EXPECT_TRUE(read_golden(path("ones.h5")).upstream.empty());
  o.upstream.push_back(1.0);
  EXPECT_THROW(write_golden(path("ones2.h5"), ds_, none, o), InputError);
  // Values kernels cannot take as the same g in fp32 (past its range, subnormal, or more than 24
  // significant bits), whose products the bounds do not cover, are refused naming the entry.
  for (double bad : {1e308, 1e-320, 1e-42, 0.1, 3.5e38}) {
    o.upstream.assign(sz(ds_.problem.N), 0.5);
    o.upstream[3] = bad;
    try {
      write_golden(path("bad.h5"), ds_, none, o);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("upstream[3]"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(path("bad.h5")));
  // 0, negative and normal fp32 values are taken.
  o.upstream.assign(sz(ds_.problem.N), -0.375);
  o.upstream[0] = 0.0;
  o.upstream[1] = 0x1p-126;
  write_golden(path("fine.h5"), ds_, none, o);
  EXPECT_EQ(read_golden(path("fine.h5")).upstream, o.upstream);
}

// ---- normaliser
// ----------------------------------------------------------------------------------

TEST(LossSpecNormalizer, ValidatesAndNamesTheCause) {
  LossSpec s;
  s.normalizer = 100;
  EXPECT_NO_THROW(s.validate());
  EXPECT_EQ(s.mean_count(7), 100);
  s.normalizer = 0;
  EXPECT_EQ(s.mean_count(7), 7);
  const auto message = [](LossSpec x) -> std::string {
    try {
      x.validate();
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  s.normalizer = -1;
  EXPECT_NE(message(s).find("normalizer must be >= 0"), std::string::npos) << message(s);
  s.normalizer = (std::int64_t{1} << 24) + 1;
  EXPECT_NE(message(s).find("2^24"), std::string::npos) << message(s);
  s.normalizer = 5;
  s.reduction = Reduction::sum;
  EXPECT_NE(message(s).find("reduction sum"), std::string::npos) << message(s);
  s.reduction = Reduction::none;
  EXPECT_NE(message(s).find("reduction none"), std::string::npos) << message(s);
  s.reduction = Reduction::mean;
  EXPECT_NE(s.describe().find("normalizer=5"), std::string::npos) << s.describe();
}

TEST_F(LossSemantics, ReferenceWithNormaliserDividesTheSumAndScalesTheGradients) {
  const std::int64_t N = ds_.problem.N, D = ds_.problem.D;
  const std::int64_t nv = ds_.problem.count_valid(ds_.spec.ignore_index);
  const std::int64_t n = 3 * nv + 1;  // the valid tokens of several micro-batches
  LossSpec s = ds_.spec;
  s.reduction = Reduction::mean;
  s.normalizer = n;
  const ReferenceResult rn = compute_reference(ds_.problem, s);
  const ReferenceResult r1 = sum_reference();
  // loss = Σ_i loss_i / n from the per-token losses (which a normaliser does not change).
  double sum = 0.0, sum_abs = 0.0, sum_b = 0.0;
  for (std::int64_t i = 0; i < N; ++i) {
    EXPECT_EQ(rn.loss[sz(i)], r1.loss[sz(i)]);
    sum += rn.loss[sz(i)];
    sum_abs += std::fabs(rn.loss[sz(i)]);
    sum_b += rn.loss_bound[sz(i)];
  }
  const double want = sum / static_cast<double>(n);
  // This test's fp64 sum of N terms and division: γ_N·Σ|loss|/n + u·|want|.
  const double tol = rn.reduced_loss_bound + sum_b / static_cast<double>(n) +
                     eft::gamma_n(static_cast<double>(N)) * sum_abs / static_cast<double>(n) +
                     kU * std::fabs(want);
  EXPECT_LE(std::fabs(rn.reduced_loss - want), tol) << rn.reduced_loss << " vs " << want;
  // The own-count mean differs by the factor n / n_valid: far outside that tolerance.
  EXPECT_GT(std::fabs(sum / static_cast<double>(nv) - want), 100 * tol);
  for (std::int64_t i = 0; i < N; ++i) {
    const bool valid = ds_.problem.targets[sz(i)] != s.ignore_index;
    EXPECT_EQ(rn.grad_scale[sz(i)], valid ? 1.0 / static_cast<double>(n) : 0.0);
  }
  // dH = dH(sum) / n, element by element, within both certified bounds and one rounding.
  for (std::int64_t k = 0; k < N * D; ++k) {
    const double w = r1.dH[sz(k)] / static_cast<double>(n);
    EXPECT_LE(std::fabs(rn.dH[sz(k)] - w),
              rn.dH_bound[sz(k)] + r1.dH_bound[sz(k)] / static_cast<double>(n) + kU * std::fabs(w))
        << k;
  }
  for (std::size_t k = 0; k < rn.dW.size(); ++k) {
    const double w = r1.dW[k] / static_cast<double>(n);
    EXPECT_LE(std::fabs(rn.dW[k] - w),
              rn.dW_bound[k] + r1.dW_bound[k] / static_cast<double>(n) + kU * std::fabs(w))
        << k;
  }
}

TEST_F(LossSemantics, NormaliserMakesTheMeanOfNoValidRowZero) {
  Problem p = ds_.problem;
  for (auto& t : p.targets) t = ds_.spec.ignore_index;
  LossSpec s = ds_.spec;
  s.reduction = Reduction::mean;
  EXPECT_TRUE(std::isnan(compute_reference(p, s).reduced_loss));  // PyTorch: 0/0
  s.normalizer = 64;
  const ReferenceResult r = compute_reference(p, s);
  EXPECT_EQ(r.reduced_loss, 0.0);  // a sum of no terms over 64
  for (double v : r.dH) EXPECT_EQ(v, 0.0);
}

TEST_F(LossSemantics, EmulatedStrategiesApplyTheNormaliser) {
  const std::int64_t nv = ds_.problem.count_valid(ds_.spec.ignore_index);
  LossSpec s = ds_.spec;
  s.reduction = Reduction::mean;
  s.normalizer = 3 * nv + 1;
  LossSpec own = s;
  own.normalizer = 0;
  ReferenceOptions ro;
  ro.vocab_rows = sample_rows(ds_.problem.V, 64, 3);
  const ReferenceResult rn = compute_reference(ds_.problem, s, ro);
  const ReferenceResult rown = compute_reference(ds_.problem, own, ro);
  const Policy policy = policy_by_name("default");
  const auto strategies = make_strategies(Backend::cpu_emulation);
  ASSERT_FALSE(strategies.empty());
  const Problem& pb = ds_.problem;  // fp32 inputs
  for (const char* name : {"fp32/fp32/fp32/fp32", "fp32/bf16/fp32/bf16"}) {
    const Recipe recipe = parse_recipe(name);
    for (const auto& st : strategies) {
      if (!st->can_implement(pb, s, recipe).ok()) continue;
      RunRequest req;
      req.problem = &pb;
      req.spec = s;
      req.recipe = recipe;
      const StrategyOutputs out = st->run(req);
      const RunAssessment a = assess_run(pb, s, recipe, st->arithmetic(recipe), out, rn, policy);
      EXPECT_EQ(a.verdict.disposition, Disposition::passed)
          << st->name() << " " << name << ": " << a.verdict.reason;
      // Judged as the own-count mean, the same outputs are wrong by the factor n / n_valid.
      const RunAssessment b =
          assess_run(pb, own, recipe, st->arithmetic(recipe), out, rown, policy);
      EXPECT_EQ(b.verdict.disposition, Disposition::incorrect) << st->name() << " " << name;
    }
  }
}

TEST_F(LossSemantics, NormaliserInGoldenFileExactAnswerPassesOwnCountFails) {
  const std::int64_t N = ds_.problem.N;
  const std::int64_t nv = ds_.problem.count_valid(ds_.spec.ignore_index);
  const std::int64_t n = 3 * nv + 1;
  LossSpec s = ds_.spec;
  s.reduction = Reduction::mean;
  s.normalizer = n;
  write_golden(path("g.h5"), ds_, s, {});
  const Golden g = read_golden(path("g.h5"));
  EXPECT_EQ(g.spec.normalizer, n);
  const ReferenceResult r1 = sum_reference();
  std::vector<double> w(sz(N));
  for (std::int64_t i = 0; i < N; ++i) w[sz(i)] = 1.0 / static_cast<double>(n);
  write_candidate(path("exact.h5"), false,
                  weighted_candidate(r1, w, r1.reduced_loss / static_cast<double>(n)), "sum / n");
  for (auto& x : w) x = 1.0 / static_cast<double>(nv);
  write_candidate(path("own.h5"), false,
                  weighted_candidate(r1, w, r1.reduced_loss / static_cast<double>(nv)),
                  "sum / own count");
  const VerifyReport exact = verify_candidate(g, path("exact.h5"), make_verify_policy("fp32"));
  EXPECT_TRUE(exact.passed) << format_report(exact);
  const VerifyReport own = verify_candidate(g, path("own.h5"), make_verify_policy("fp32"));
  EXPECT_FALSE(own.passed);
  for (const char* name : {"reduced_loss", "dH", "dW", "db"})
    EXPECT_EQ(output(own, name).status, "failed") << name;
}

// ---- formats
// -------------------------------------------------------------------------------------

TEST_F(LossSemantics, Version1GoldenFilesAreStillRead) {
  write_golden(path("g.h5"), ds_, ds_.spec, {});
  {
    // The version 1 layout: no /spec normalizer attribute (and no upstream dataset, no manifest).
    h5::File f = h5::File::open_rw(path("g.h5"));
    f.set_attr("format_version", std::int64_t{1});
    f.close();
    const hid_t id = H5Fopen(path("g.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(id, 0);
    ASSERT_GE(H5Adelete_by_name(id, "spec", "normalizer", H5P_DEFAULT), 0);
    ASSERT_GE(H5Adelete(id, h5::kManifestAttr), 0);
    H5Fclose(id);
  }
  const Golden g = read_golden(path("g.h5"));
  EXPECT_EQ(g.spec.normalizer, 0);
  EXPECT_TRUE(g.upstream.empty());
  EXPECT_NE(g.provenance.find("format_version=1"), std::string::npos) << g.provenance;
  // The same file claiming version 2 lacks a required attribute.
  {
    h5::File f = h5::File::open_rw(path("g.h5"));
    f.set_attr("format_version", std::int64_t{2});
    f.close();
  }
  try {
    read_golden(path("g.h5"));
    ADD_FAILURE() << "a version 2 file without /spec normalizer was read";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("normalizer"), std::string::npos) << e.what();
  }
}

TEST_F(LossSemantics, CandidateVersion2DeclaresItsSemantics) {
  LossSpec s = ds_.spec;
  s.reduction = Reduction::mean;
  s.normalizer = 70;
  write_golden(path("g.h5"), ds_, s, {});
  const Golden g = read_golden(path("g.h5"));
  const auto write = [&](const std::string& name, std::int64_t version, const char* reduction,
                         std::int64_t normalizer) {
    h5::File f = h5::File::create(path(name));
    f.set_attr("format", kCandidateFormat);
    f.set_attr("format_version", version);
    if (reduction) f.set_attr("reduction", reduction);
    if (normalizer >= 0) f.set_attr("normalizer", normalizer);
    f.write("loss", g.loss);
    f.close();
  };
  const VerifyPolicy pol = make_verify_policy("fp32");
  write("v1.h5", 1, nullptr, -1);
  EXPECT_TRUE(verify_candidate(g, path("v1.h5"), pol, {"loss"}).passed);
  write("ok.h5", 2, "mean", 70);
  EXPECT_TRUE(verify_candidate(g, path("ok.h5"), pol, {"loss"}).passed);
  write("n.h5", 2, "mean", 0);
  try {
    verify_candidate(g, path("n.h5"), pol);
    ADD_FAILURE() << "a candidate of another normaliser was judged";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("declares normalizer 0"), std::string::npos) << e.what();
  }
  write("r.h5", 2, "sum", -1);
  EXPECT_THROW(verify_candidate(g, path("r.h5"), pol), FormatError);
  write("v3.h5", 3, nullptr, -1);
  EXPECT_THROW(verify_candidate(g, path("v3.h5"), pol), FormatError);
}

// ---- audit
// ---------------------------------------------------------------------------------------

TEST_F(LossSemantics, AuditTakesChunkWidthUpstreamAndNormaliserAndRecordsThem) {
  LossSpec none = ds_.spec;
  none.reduction = Reduction::none;
  std::vector<audit::AuditProblem> problems{{"story-none", "test", ds_.problem, none}};
  audit::AuditConfig cfg;
  cfg.strategies = {"naive", "chunked"};
  cfg.recipes = {parse_recipe("fp32/fp32/fp32/fp32"), parse_recipe("fp32/bf16/fp32/bf16")};
  cfg.rows = 0;
  cfg.vocab_rows = 64;
  cfg.chunk_tokens = 5;  // 7 chunks of the 32 rows
  cfg.upstream = "random";
  const audit::AuditResult res = audit::run_audit(problems, cfg);
  ASSERT_EQ(res.runs.size(), 4u);
  EXPECT_EQ(res.passed, 4) << audit::format_summary(res, false);
  audit::write_results(path("r.h5"), res, cfg, false, false);
  {
    const h5::File f = audit::open_results_file(path("r.h5"));
    EXPECT_EQ(f.attr_int("format_version"), 2);
    const h5::Group runs = f.open_group("runs");
    for (const auto& id : runs.children()) {
      EXPECT_EQ(runs.open_group(id).attr_int("chunk_tokens"), 5);
      EXPECT_EQ(runs.open_group(id).attr_string("upstream"), "random");
    }
  }
  // A different chunk width is another arithmetic: regress refuses to compare the runs.
  audit::AuditConfig other = cfg;
  other.chunk_tokens = 0;
  audit::write_results(path("r0.h5"), audit::run_audit(problems, other), other, false, false);
  try {
    audit::regress(path("r0.h5"), path("r.h5"));
    ADD_FAILURE() << "runs of different chunk widths were compared";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk_tokens 0 against 5"), std::string::npos)
        << e.what();
  }
  // Nonsense is refused, naming the cause.
  audit::AuditConfig bad = cfg;
  bad.chunk_tokens = -1;
  EXPECT_THROW(audit::run_audit(problems, bad), InputError);
  bad = cfg;
  bad.upstream = "twos";
  EXPECT_THROW(audit::run_audit(problems, bad), InputError);
  std::vector<audit::AuditProblem> mean{{"story-mean", "test", ds_.problem, ds_.spec}};
  try {
    audit::run_audit(mean, cfg);
    ADD_FAILURE() << "upstream random beside reduction mean was run";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("needs reduction none"), std::string::npos) << e.what();
  }
  // The normaliser: every run of the emulation passes against the reference with it.
  LossSpec norm = ds_.spec;
  norm.reduction = Reduction::mean;
  norm.normalizer = 100;
  std::vector<audit::AuditProblem> np{{"story-norm", "test", ds_.problem, norm}};
  audit::AuditConfig nc = cfg;
  nc.upstream = "ones";
  const audit::AuditResult rn = audit::run_audit(np, nc);
  EXPECT_EQ(rn.passed, 4) << audit::format_summary(rn, false);
  EXPECT_NE(rn.runs.front().spec.find("normalizer=100"), std::string::npos) << rn.runs.front().spec;
}

TEST_F(LossSemantics, Version1ResultsFilesAreStillRead) {
  std::vector<audit::AuditProblem> problems{{"story", "test", ds_.problem, ds_.spec}};
  audit::AuditConfig cfg;
  cfg.strategies = {"naive"};
  cfg.recipes = {parse_recipe("fp32/fp32/fp32/fp32")};
  cfg.rows = 8;
  cfg.vocab_rows = 32;
  const audit::AuditResult res = audit::run_audit(problems, cfg);
  audit::write_results(path("v2.h5"), res, cfg, false, false);
  audit::write_results(path("v1.h5"), res, cfg, false, false);
  {
    // The version 1 layout: no chunk_tokens or upstream attribute on the runs.
    h5::File f = h5::File::open_rw(path("v1.h5"));
    f.set_attr("format_version", std::int64_t{1});
    const std::vector<std::string> ids = f.open_group("runs").children();
    f.close();
    const hid_t id = H5Fopen(path("v1.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(id, 0);
    for (const auto& run : ids) {
      const std::string obj = "runs/" + run;
      ASSERT_GE(H5Adelete_by_name(id, obj.c_str(), "chunk_tokens", H5P_DEFAULT), 0);
      ASSERT_GE(H5Adelete_by_name(id, obj.c_str(), "upstream", H5P_DEFAULT), 0);
    }
    H5Fclose(id);
  }
  const audit::RegressReport r = audit::regress(path("v1.h5"), path("v2.h5"));
  EXPECT_EQ(r.baseline_runs, 1);
  EXPECT_EQ(r.regressions, 0);
}

}  // namespace
}  // namespace xentlab
