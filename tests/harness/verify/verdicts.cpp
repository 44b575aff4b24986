// The verdicts of verify (docs/verify.md, "Verdicts" and "The criterion"): a loss stored in the
// candidate's own dtype passes as one correct rounding and fails one ULP off it; a systematic 1%
// scale of a gradient fails every dtype policy; a tolerance that would pass an output of zeros is
// inconclusive, not passed; a fault confined to some token rows fails (the baseline runs on every
// row); a missing output leaves the verdict open; non-finite values never show as an error of 0.
// Expected values come from mathematics (ln V for zero logits) and from the golden reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "datasets/catalog.hpp"
#include "harness/json_report.hpp"
#include "harness/verify/golden.hpp"
#include "harness/verify/verify.hpp"
#include "judge/differential.hpp"
#include "judge/tolerance.hpp"
#include "numerics/arithmetic.hpp"
#include "numerics/dtype.hpp"
#include "numerics/error.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab {
namespace {

class Verdicts : public testing::TempFolderTest {
 protected:
  Verdicts() : TempFolderTest("verdicts") {}

  template <class Values = std::vector<double>>
  static Tensor tensor(const Values& v, std::vector<std::int64_t> shape, DType dt) {
    Tensor t(dt, std::move(shape));
    for (std::size_t k = 0; k < v.size(); ++k) t.set(static_cast<std::int64_t>(k), v[k]);
    return t;
  }
  static const OutputReport& output(const VerifyReport& r, const std::string& name) {
    for (const auto& o : r.outputs)
      if (o.name == name) return o;
    throw InputError("no report for " + name);
  }
  // The golden file of stories260k (32 tokens, a linear head with bf16 weights).
  const Golden& linear_golden() {
    if (!linear_) {
      DatasetParams p;
      p.N = 32;
      p.seed = 4;
      write_golden(path("g.h5"), make_dataset("stories260k", p), LossSpec{}, {});
      linear_ = read_golden(path("g.h5"));
    }
    return *linear_;
  }
  // Every output of the golden reference, rounded once into dt, with dH and dW scaled by the
  // given factors.
  std::vector<std::pair<std::string, Tensor>> reference_candidate(const Golden& g, DType dt,
                                                                  double dH_scale = 1,
                                                                  double dW_scale = 1) const {
    std::vector<double> dH = g.dH, dW = g.dW;
    for (double& x : dH) x *= dH_scale;
    for (double& x : dW) x *= dW_scale;
    return {{"loss", tensor(g.loss, {g.S}, dt)},
            {"lse", tensor(g.lse, {g.S}, dt)},
            {"reduced_loss", tensor(std::vector<double>{*g.reduced_loss}, {}, dt)},
            {"dH", tensor(dH, {g.S, g.D}, dt)},
            {"dW", tensor(dW, {g.J, g.D}, dt)}};
  }
  std::optional<Golden> linear_;
};

// All-zero logits over V = 32000: every token's loss and lse are ln 32000 = 10.373491…, whose
// correct rounding into bf16 is 10.375 (bf16 spacing 1/16 in [8, 16)). PyTorch's bf16
// F.cross_entropy returns exactly that: it passes --policy bf16; 10.5, two spacings off, fails.
// And where only the rounding check can tell: zero logits but the target's at −9.6875 over
// V = 512, loss = ln(511 + e^-9.6875) + 9.6875 = 15.92388…, whose bf16 rounding is 15.9375;
// 15.875, the neighbour one spacing below, is within the bound check's one rounding
// (u·|ref| = 0.062) and fails the rounding check alone.
TEST_F(Verdicts, LossStoredInItsOwnDtype) {
  const auto golden_of = [&](std::int64_t V, std::int64_t N, double target_logit,
                             const std::string& file) {
    Tensor logits(DType::bf16, {N, V});  // zeros
    std::vector<std::int64_t> targets(static_cast<std::size_t>(N));
    for (std::int64_t i = 0; i < N; ++i) {
      targets[static_cast<std::size_t>(i)] = (i * 7919) % V;
      logits.set(i * V + (i * 7919) % V, target_logit);
    }
    DatasetInstance ds;
    ds.problem = Problem::from_logits(std::move(logits), targets);
    ds.source = "constant logits";
    ds.generator = "test:constant";
    write_golden(path(file), ds, LossSpec{}, {});
    return read_golden(path(file));
  };
  // loss, lse and reduced_loss as given (bf16), dz the reference's (fp32).
  const auto candidate = [&](const Golden& g, const std::vector<double>& loss,
                             const std::vector<double>& lse, double reduced) {
    return std::vector<std::pair<std::string, Tensor>>{
        {"loss", tensor(loss, {g.S}, DType::bf16)},
        {"lse", tensor(lse, {g.S}, DType::bf16)},
        {"reduced_loss", tensor(std::vector<double>{reduced}, {}, DType::bf16)},
        {"dz", tensor(g.dz, {g.S, g.V}, DType::fp32)}};
  };
  const auto rounded = [](const std::vector<double>& v) {
    std::vector<double> r(v);
    for (double& x : r) x = round_to(x, DType::bf16);
    return r;
  };
  const Golden z = golden_of(32000, 4, 0.0, "z.h5");
  // Within the reference's own certified bound (and the rounding of std::log, one ULP).
  EXPECT_NEAR(z.loss[0], std::log(32000.0), z.loss_bound[0] + 0x1p-52 * std::log(32000.0));
  ASSERT_EQ(round_to(std::log(32000.0), DType::bf16), 10.375);
  write_candidate(
      path("right.h5"), false,
      candidate(z, std::vector<double>(4, 10.375), std::vector<double>(4, 10.375), 10.375),
      "bf16 loss, correctly rounded");
  const VerifyReport right = verify_candidate(z, path("right.h5"), make_verify_policy("bf16"));
  EXPECT_TRUE(right.passed) << format_report(right);
  for (const char* name : {"loss", "lse", "reduced_loss"})
    EXPECT_TRUE(output(right, name).differential.rounding) << name;
  write_candidate(
      path("wrong.h5"), false,
      candidate(z, std::vector<double>(4, 10.5), std::vector<double>(4, 10.375), 10.375),
      "bf16 loss, two spacings off");
  const VerifyReport wrong = verify_candidate(z, path("wrong.h5"), make_verify_policy("bf16"));
  EXPECT_EQ(wrong.verdict, "failed") << format_report(wrong);
  EXPECT_EQ(output(wrong, "loss").status, "failed");

  const Golden t = golden_of(512, 4, -9.6875, "t.h5");
  const double loss = std::log(511.0 + std::exp(-9.6875)) + 9.6875;
  EXPECT_NEAR(t.loss[0], loss, t.loss_bound[0] + 0x1p-50 * loss);  // a few ULP of std::log, exp
  ASSERT_EQ(round_to(loss, DType::bf16), 15.9375);
  const double red = round_to(*t.reduced_loss, DType::bf16);
  write_candidate(path("t-right.h5"), false, candidate(t, rounded(t.loss), rounded(t.lse), red),
                  "correctly rounded");
  const VerifyReport tr = verify_candidate(t, path("t-right.h5"), make_verify_policy("bf16"));
  EXPECT_TRUE(tr.passed) << format_report(tr);
  std::vector<double> below = rounded(t.loss);
  below[2] = 15.875;
  write_candidate(path("t-below.h5"), false, candidate(t, below, rounded(t.lse), red),
                  "one spacing below");
  const VerifyReport tb = verify_candidate(t, path("t-below.h5"), make_verify_policy("bf16"));
  EXPECT_EQ(output(tb, "loss").status, "failed") << format_report(tb);
  EXPECT_EQ(output(tb, "loss").bound_status, "passed");
  EXPECT_EQ(output(tb, "loss").differential.status, "incorrect");
  EXPECT_NE(output(tb, "loss").differential.message.find("not a correct rounding into bf16"),
            std::string::npos)
      << output(tb, "loss").differential.message;
}

// A normaliser off by one at N ≈ 100, a missing factor: dH or dW 1% too large, every element
// within the tolerance's reach of the reference, fails every dtype policy by the scale test; the
// same reference without the scale passes.
TEST_F(Verdicts, OnePercentScaleOnAGradientFailsEveryPolicy) {
  const Golden& g = linear_golden();
  for (const DType dt : {DType::bf16, DType::fp16, DType::fp32}) {
    const std::string policy(to_string(dt));
    write_candidate(path("ok.h5"), true, reference_candidate(g, dt), "reference");
    const VerifyReport ok = verify_candidate(g, path("ok.h5"), make_verify_policy(policy));
    EXPECT_TRUE(ok.passed) << policy << "\n" << format_report(ok);
    for (const char* grad : {"dH", "dW"}) {
      const bool h = std::string(grad) == "dH";
      write_candidate(path("scaled.h5"), true,
                      reference_candidate(g, dt, h ? 1.01 : 1.0, h ? 1.0 : 1.01), "scaled");
      const VerifyReport r = verify_candidate(g, path("scaled.h5"), make_verify_policy(policy));
      EXPECT_EQ(r.verdict, "failed") << policy << " " << grad << "\n" << format_report(r);
      EXPECT_EQ(output(r, grad).status, "failed") << policy << " " << grad;
      // Under bf16, where one rounding of a gradient is 0.4%, the bound check passes the 1%
      // scale and the differential check's scale test alone fails it; under fp16 and fp32 the
      // differential check fails it too (its normwise limit or the scale test), beside the bound.
      VerifyOptions diff_only;
      diff_only.check = VerifyCheck::differential;
      const VerifyReport d =
          verify_candidate(g, path("scaled.h5"), make_verify_policy(policy), diff_only);
      EXPECT_EQ(output(d, grad).status, "failed") << policy << " " << grad;
      if (dt == DType::bf16) {
        EXPECT_EQ(output(r, grad).bound_status, "passed") << grad;
        EXPECT_NE(output(r, grad).message.find("systematic scale"), std::string::npos)
            << output(r, grad).message;
      }
    }
  }
}

// db of a problem without a bias where neither check can judge it: the golden file holds no
// a-priori bound for it (S·V too large to form dz, whose column sums are db's condition: at the
// Llama-3-8B head, 8192 × 128256) and the baseline holds no db (the CUDA strategies form db only
// for a problem with a bias). A candidate that gives db anyway (the reference, rounded) is not
// judged there, saying both reasons, not failed for "no meaningful bound".
TEST_F(Verdicts, OutputNeitherCheckCanJudgeIsNotJudged) {
  DatasetParams p;
  p.N = 32;
  p.seed = 4;
  GoldenOptions go;
  go.max_dz_elements = 1;  // no dz formed, so no db_cond
  write_golden(path("nodz.h5"), make_dataset("stories260k", p), LossSpec{}, go);
  const Golden g = read_golden(path("nodz.h5"));
  ASSERT_FALSE(g.problem.bias.has_value());
  ASSERT_FALSE(g.db.empty());
  ASSERT_TRUE(g.db_cond.empty());
  auto c = reference_candidate(g, DType::fp32);
  c.emplace_back("db", tensor(g.db, {g.J}, DType::fp32));
  write_candidate(path("db.h5"), true, c, "reference with db");
  const VerifyPolicy pol = make_verify_policy("fp32");
  Baseline b = emulate_baseline(g, *policy_recipe(pol, g.problem.input_dtype()));
  ASSERT_EQ(b.status, "ok");
  ASSERT_NE(b.profile("db"), nullptr);  // the emulation forms db without a bias: judged by it
  VerifyOptions o;
  o.baseline_given = &b;
  EXPECT_EQ(output(verify_candidate(g, path("db.h5"), pol, o), "db").status, "passed");
  const auto no_db = [](const auto& q) { return q.first == "db"; };
  b.profiles.erase(std::remove_if(b.profiles.begin(), b.profiles.end(), no_db), b.profiles.end());
  b.best.erase(std::remove_if(b.best.begin(), b.best.end(), no_db), b.best.end());
  const VerifyReport r = verify_candidate(g, path("db.h5"), pol, o);
  const OutputReport& db = output(r, "db");
  EXPECT_EQ(db.status, "not judged") << format_report(r);
  EXPECT_NE(db.message.find("no a-priori bound for db"), std::string::npos) << db.message;
  EXPECT_NE(db.message.find("baseline"), std::string::npos) << db.message;
  EXPECT_EQ(r.verdict, "not judged") << format_report(r);
  // Without db the same candidate passes.
  c.pop_back();
  write_candidate(path("nodb.h5"), true, c, "reference");
  EXPECT_TRUE(verify_candidate(g, path("nodb.h5"), pol, o).passed);
  // A NaN in that db fails all the same, with the differential check and without it: no bound is
  // needed to tell a non-finite value from a finite reference (docs/verify.md).
  std::vector<double> nan_db = g.db;
  nan_db[1] = NAN;
  c.emplace_back("db", tensor(nan_db, {g.J}, DType::fp32));
  write_candidate(path("nan_db.h5"), true, c, "reference with a NaN in db");
  VerifyOptions bound_only = o;
  bound_only.check = VerifyCheck::bound;
  for (const VerifyOptions& opt : {o, bound_only}) {
    const VerifyReport rn = verify_candidate(g, path("nan_db.h5"), pol, opt);
    EXPECT_EQ(output(rn, "db").status, "failed") << format_report(rn);
    EXPECT_NE(output(rn, "db").message.find("finiteness mismatch"), std::string::npos)
        << output(rn, "db").message;
    EXPECT_EQ(rn.verdict, "failed") << format_report(rn);
  }
}

// A candidate held in memory (verify_outputs: the selftest's path) is judged as the same
// candidate written to a file and read back: the same verdicts, messages and ratios, a correct
// one and a faulty one (dW 1% large) under each dtype policy; an unknown name is refused.
TEST_F(Verdicts, InMemoryCandidateIsJudgedAsItsFile) {
  const Golden& g = linear_golden();
  for (const DType dt : {DType::bf16, DType::fp32})
    for (const double dW_scale : {1.0, 1.01}) {
      const std::string policy(to_string(dt));
      const auto c = reference_candidate(g, dt, 1.0, dW_scale);
      write_candidate(path("c.h5"), true, c, "reference");
      const VerifyReport file = verify_candidate(g, path("c.h5"), make_verify_policy(policy));
      const VerifyReport mem = verify_outputs(g, c, "reference", make_verify_policy(policy), {});
      SCOPED_TRACE(policy + " dW × " + std::to_string(dW_scale));
      EXPECT_EQ(mem.verdict, dW_scale == 1.0 ? "passed" : "failed");
      EXPECT_EQ(mem.verdict, file.verdict);
      EXPECT_EQ(mem.reason, file.reason);
      ASSERT_EQ(mem.outputs.size(), file.outputs.size());
      for (std::size_t i = 0; i < file.outputs.size(); ++i) {
        EXPECT_EQ(mem.outputs[i].name, file.outputs[i].name);
        EXPECT_EQ(mem.outputs[i].status, file.outputs[i].status) << file.outputs[i].name;
        EXPECT_EQ(mem.outputs[i].message, file.outputs[i].message) << file.outputs[i].name;
        EXPECT_EQ(mem.outputs[i].stats->max_ratio, file.outputs[i].stats->max_ratio);
        EXPECT_EQ(mem.outputs[i].differential.status, file.outputs[i].differential.status);
      }
    }
  auto bad = reference_candidate(g, DType::fp32);
  bad.emplace_back("grad_W", tensor(g.dW, {g.J, g.D}, DType::fp32));
  EXPECT_THROW(verify_outputs(g, bad, "misnamed", make_verify_policy("fp32"), {}), InputError);
}

// What a candidate file cannot hold, verify_outputs refuses, as write_candidate does: two outputs
// of one name (a file holds one dataset a name; HDF5 would replace the first by the second, the
// memory path would judge the first: either way one goes unjudged, a faulty dW behind a correct
// one or before it). Its
// report names no file: the text names the implementation once, the JSON report (files and their
// SHA-256) is refused rather than hashing whatever file bears the label's name.
TEST_F(Verdicts, InMemoryCandidateRefusesWhatNoFileHolds) {
  const Golden& g = linear_golden();
  auto twice = reference_candidate(g, DType::fp32);
  twice.emplace_back("dW", tensor(g.dW, {g.J, g.D}, DType::fp32));
  EXPECT_THROW(write_candidate(path("twice.h5"), true, twice, "dW twice"), InputError);
  try {
    verify_outputs(g, twice, "dW twice", make_verify_policy("fp32"), {});
    ADD_FAILURE() << "two outputs named dW were accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("two outputs named 'dW'"), std::string::npos) << e.what();
  }
  const VerifyReport r =
      verify_outputs(g, reference_candidate(g, DType::fp32), "ref", make_verify_policy("fp32"), {});
  EXPECT_EQ(r.verdict, "passed");
  EXPECT_TRUE(r.candidate_in_memory);
  EXPECT_NE(format_report(r).find("candidate  (in memory: ref)\n"), std::string::npos)
      << format_report(r);
  try {
    verify_json(r, json_report::Invocation{});
    ADD_FAILURE() << "a JSON report of a candidate held in memory was written";
  } catch (const InputError& e) {  // not "cannot read (in memory: ref)"
    EXPECT_NE(std::string(e.what()).find("judged in memory"), std::string::npos) << e.what();
  }
}

// Bounds formed once and given to verify (as the selftest does for a run of candidates) decide
// as bounds formed inside it; bounds of another policy are refused, naming both.
TEST_F(Verdicts, BoundsGivenAreThePolicysOwn) {
  const Golden& g = linear_golden();
  write_candidate(path("scaled.h5"), true, reference_candidate(g, DType::fp32, 1.0, 1.01),
                  "scaled");
  const VerifyPolicy fp32 = make_verify_policy("fp32");
  PolicyBounds pb;
  policy_bounds(g, fp32, pb);
  VerifyOptions given;
  given.bounds_given = &pb;
  const VerifyReport own = verify_candidate(g, path("scaled.h5"), fp32);
  const VerifyReport reused = verify_candidate(g, path("scaled.h5"), fp32, given);
  EXPECT_EQ(reused.verdict, "failed");
  EXPECT_EQ(reused.reason, own.reason);
  ASSERT_EQ(reused.outputs.size(), own.outputs.size());
  for (std::size_t i = 0; i < own.outputs.size(); ++i) {  // (the report's times differ)
    EXPECT_EQ(reused.outputs[i].status, own.outputs[i].status) << own.outputs[i].name;
    EXPECT_EQ(reused.outputs[i].message, own.outputs[i].message) << own.outputs[i].name;
    EXPECT_EQ(reused.outputs[i].stats->max_ratio, own.outputs[i].stats->max_ratio);
  }
  try {
    verify_candidate(g, path("scaled.h5"), make_verify_policy("bf16"), given);
    ADD_FAILURE() << "bounds of policy fp32 accepted for policy bf16";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("of policy fp32"), std::string::npos) << e.what();
  }
}

// Bounds whose forming threw are not taken for the policy's: policy_bounds names them by their
// policy only once formed (else the bounds of the policy before, labelled as this one's, would
// judge its candidates). An online order with a tile of 0 columns is refused by the bounds.
TEST_F(Verdicts, BoundsNotFormedAreRefused) {
  const Golden& g = linear_golden();
  write_candidate(path("ref.h5"), true, reference_candidate(g, DType::fp32), "reference");
  PolicyBounds pb;
  policy_bounds(g, make_verify_policy("fp32"), pb);
  VerifyPolicy bad = make_verify_policy("fp32");
  bad.arith.vocab_order = ReductionOrder::online_tiles;
  bad.arith.tile = 0;
  EXPECT_THROW(policy_bounds(g, bad, pb), InputError);
  EXPECT_NE(pb.policy, bad.describe(g.problem.input_dtype()));
  VerifyOptions given;
  given.bounds_given = &pb;
  try {
    verify_candidate(g, path("ref.h5"), bad, given);
    ADD_FAILURE() << "bounds that were not formed accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the a-priori bounds given are of policy"),
              std::string::npos)
        << e.what();
  }
}

// --atol at least every |dH| (as --atol 1e-3 at the Llama-3-8B head, where max|dW| is 9.9e-5):
// an all-zero dH would pass, so the tolerance says nothing about dH: inconclusive (exit 5 on the
// command line), naming why. dW, larger somewhere, is judged.
TEST_F(Verdicts, VacuousExplicitToleranceIsInconclusive) {
  const Golden& g = linear_golden();
  double max_dW = 0, max_dH = 0;
  for (const double x : g.dW) max_dW = std::max(max_dW, std::fabs(x));
  for (const double x : g.dH) max_dH = std::max(max_dH, std::fabs(x));
  ASSERT_GT(max_dW, max_dH);
  auto c = reference_candidate(g, DType::fp32);
  c[3].second = Tensor(DType::fp32, {g.S, g.D});  // dH = 0
  write_candidate(path("zero.h5"), false, c, "dH of zeros");
  const VerifyReport r = verify_candidate(g, path("zero.h5"), make_explicit_policy(max_dH, 0));
  EXPECT_EQ(r.verdict, "inconclusive") << format_report(r);
  EXPECT_EQ(output(r, "dH").status, "inconclusive");
  EXPECT_NE(output(r, "dH").message.find("vacuous"), std::string::npos);
  EXPECT_EQ(output(r, "dW").status, "passed");
}

// One chunk of rows wrong: dH of the last 8 of 32 token rows held in bf16 where the fp32 policy
// declares fp32 gradients. The baseline runs on every row, so the whole output is compared.
TEST_F(Verdicts, FaultConfinedToSomeRowsFails) {
  const Golden& g = linear_golden();
  std::vector<double> dH = g.dH;
  for (std::int64_t i = (g.S - 8) * g.D; i < g.S * g.D; ++i)
    dH[static_cast<std::size_t>(i)] = round_to(dH[static_cast<std::size_t>(i)], DType::bf16);
  auto c = reference_candidate(g, DType::fp32);
  c[3].second = tensor(dH, {g.S, g.D}, DType::fp32);
  write_candidate(path("chunk.h5"), false, c, "one chunk in bf16");
  VerifyOptions diff_only;  // the differential check alone (the bound check catches it too)
  diff_only.check = VerifyCheck::differential;
  const VerifyReport r =
      verify_candidate(g, path("chunk.h5"), make_verify_policy("fp32"), diff_only);
  ASSERT_TRUE(r.baseline);
  EXPECT_FALSE(r.baseline->sampled);
  EXPECT_EQ(output(r, "dH").status, "failed") << format_report(r);
  EXPECT_EQ(output(r, "dH").differential.candidate.n, g.S * g.D);
}

// A candidate that lacks outputs the golden file can check is not passed: not judged, naming
// them; an all-NaN dH shows as nan in the table, never as an error of 0.
TEST_F(Verdicts, MissingOutputsAndNonFiniteValues) {
  const Golden& g = linear_golden();
  auto c = reference_candidate(g, DType::fp32);
  write_candidate(path("loss.h5"), false, {c[0]}, "loss only");
  const VerifyReport r = verify_candidate(g, path("loss.h5"), make_verify_policy("fp32"));
  EXPECT_EQ(r.verdict, "not judged") << format_report(r);
  EXPECT_EQ(output(r, "dH").status, "not judged");
  EXPECT_NE(output(r, "dW").message.find("holds no dW"), std::string::npos);
  EXPECT_TRUE(verify_candidate(g, path("loss.h5"), make_verify_policy("fp32"), {"loss"}).passed);
  std::vector<double> nan(g.dH.size(), std::nan(""));
  c[3].second = tensor(nan, {g.S, g.D}, DType::fp32);
  write_candidate(path("nan.h5"), false, c, "NaN dH");
  const VerifyReport n = verify_candidate(g, path("nan.h5"), make_verify_policy("fp32"));
  EXPECT_EQ(output(n, "dH").status, "failed");
  const std::string text = format_report(n);
  const auto row = text.find("\ndH ");
  ASSERT_NE(row, std::string::npos) << text;
  const std::string line = text.substr(row + 1, text.find('\n', row + 1) - row - 1);
  EXPECT_NE(line.find("nan"), std::string::npos) << line;
  EXPECT_EQ(line.find(" 0 "), std::string::npos) << line;
}

}  // namespace
}  // namespace xentlab
