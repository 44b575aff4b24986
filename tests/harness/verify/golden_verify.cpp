// Golden files and verify (harness/verify/): golden → candidate equal to the reference → verify
// passes; one element of dW perturbed by 100× its tolerance → verify fails and names that element,
// its index and both values; damaged, foreign and wrong-version files are FormatErrors; shape and
// dtype mismatches and NaN in a candidate are reported failures, never exceptions.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "datasets/catalog.hpp"
#include "datasets/io/h5.hpp"
#include "harness/verify/golden.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab {
namespace {
namespace fs = std::filesystem;

class GoldenVerify : public testing::TempFolderTest {
 protected:
  GoldenVerify() : TempFolderTest("golden") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    DatasetParams p;
    p.N = 32;
    p.seed = 4;
    ds_ = make_dataset("stories260k", p);
  }

  // A tensor of the given shape holding values (rounded once into dtype).
  template <class Values = std::vector<double>>
  static Tensor tensor(const Values& v, std::vector<std::int64_t> shape, DType dt = DType::fp64) {
    Tensor t(dt, std::move(shape));
    for (std::size_t k = 0; k < v.size(); ++k) t.set(static_cast<std::int64_t>(k), v[k]);
    return t;
  }
  // Candidate = the golden's own reference, every output, in dtype dt.
  std::vector<std::pair<std::string, Tensor>> exact_candidate(const Golden& g,
                                                              DType dt = DType::fp64) const {
    return {{"loss", tensor(g.loss, {g.S}, dt)},
            {"lse", tensor(g.lse, {g.S}, dt)},
            {"reduced_loss", tensor({*g.reduced_loss}, {}, dt)},
            {"dH", tensor(g.dH, {g.S, g.D}, dt)},
            {"dW", tensor(g.dW, {g.J, g.D}, dt)},
            {"db", tensor(g.db, {g.J}, dt)}};
  }
  const OutputReport& output(const VerifyReport& r, const std::string& name) {
    for (const auto& o : r.outputs)
      if (o.name == name) return o;
    ADD_FAILURE() << "no report for " << name;
    return r.outputs.front();
  }

  DatasetInstance ds_;
};

TEST_F(GoldenVerify, GoldenHoldsTheProblemBitExactAndTheReference) {
  GoldenOptions o;
  const GoldenSummary s = write_golden(path("g.h5"), ds_, ds_.spec, o);
  EXPECT_FALSE(s.partial);
  const Golden g = read_golden(path("g.h5"));
  EXPECT_EQ(g.problem.targets, ds_.problem.targets);
  ASSERT_EQ(g.problem.H.nbytes(), ds_.problem.H.nbytes());
  EXPECT_EQ(0, std::memcmp(g.problem.H.data(), ds_.problem.H.data(), ds_.problem.H.nbytes()));
  EXPECT_EQ(0, std::memcmp(g.problem.W.data(), ds_.problem.W.data(), ds_.problem.W.nbytes()));
  const ReferenceResult r = compute_reference(ds_.problem, ds_.spec);
  EXPECT_EQ(g.loss, r.loss);
  EXPECT_EQ(g.dW, std::vector<double>(r.dW.begin(), r.dW.end()));
  EXPECT_EQ(g.dH_bound, std::vector<double>(r.dH_bound.begin(), r.dH_bound.end()));
  EXPECT_EQ(g.p_target, r.p_target);
  EXPECT_EQ(*g.reduced_loss, r.reduced_loss);
  EXPECT_EQ(g.spec.describe(), ds_.spec.describe());
  // Provenance and the schema attributes, as h5py would read them.
  const h5::File f = h5::File::open_read(path("g.h5"));
  EXPECT_EQ(f.attr_string("format"), kGoldenFormat);
  EXPECT_EQ(f.attr_int("format_version"), kGoldenVersion);
  EXPECT_EQ(f.attr_string("generator"), "catalog:stories260k");
  EXPECT_EQ(f.attr_int("seed"), 4);
  // Never overwritten without force.
  EXPECT_THROW(write_golden(path("g.h5"), ds_, ds_.spec, o), InputError);
  o.force = true;
  EXPECT_NO_THROW(write_golden(path("g.h5"), ds_, ds_.spec, o));
}

// A row whose logits are all −∞ with a valid target: the reference's loss +∞ and zero gradient
// (docs/reference.md) are values implementations do not give (NaN), so golden refuses naming the
// row and both ways out, before writing anything; with that row ignored the file is written. A
// linear head whose bias masks the whole vocabulary likewise. Under a softcap neither is masked.
TEST_F(GoldenVerify, AFullyMaskedRowWithAValidTargetIsRefused) {
  const double ninf = -std::numeric_limits<double>::infinity();
  DatasetInstance ds = ds_;
  ds.problem = Problem::from_logits(
      tensor(std::vector<double>{1, 2, 0, ninf, ninf, ninf, 0.5, -1, 3}, {3, 3}, DType::fp32),
      {2, 1, 0});
  const std::string file = path("masked-row.h5");
  try {
    write_golden(file, ds, LossSpec{}, GoldenOptions{});
    ADD_FAILURE() << "a fully masked row with a valid target accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("token row 1 has every logit −∞"), std::string::npos) << m;
    EXPECT_NE(m.find("ignore_index (-100)"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(file));
  // Under a softcap a −∞ logit is −c (tanh(−∞) = −1): the row is not masked, its loss the finite
  // log 3, and the file is written.
  LossSpec capped;
  capped.softcap = 5.0;
  write_golden(path("masked-row-softcap.h5"), ds, capped, GoldenOptions{});
  const Golden cg = read_golden(path("masked-row-softcap.h5"));
  // Within the reference's own certified bound of log 3 (plus the one rounding of std::log).
  EXPECT_LE(std::fabs(cg.loss[1] - std::log(3.0)), cg.loss_bound[1] + 0x1p-53 * std::log(3.0));
  ds.problem.targets[1] = -100;
  write_golden(file, ds, LossSpec{}, GoldenOptions{});
  EXPECT_EQ(read_golden(file).S, 3);

  Tensor H = tensor(std::vector<double>{1, 0, 0, 1}, {2, 2}, DType::fp32);
  Tensor W = tensor(std::vector<double>{1, 1, 0, 2, 3, 1}, {3, 2}, DType::fp32);
  Tensor b = tensor(std::vector<double>{ninf, ninf, ninf}, {3}, DType::fp32);
  ds.problem = Problem::linear(H, W, b, {-100, 2});
  EXPECT_THROW(write_golden(path("masked-head.h5"), ds, LossSpec{}, GoldenOptions{}), InputError);
  write_golden(path("masked-head-softcap.h5"), ds, capped, GoldenOptions{});
  ds.problem.bias->set(1, 0.0);
  write_golden(path("masked-head.h5"), ds, LossSpec{}, GoldenOptions{});
}

// Given-logits problems (no H, W): the golden file holds dz, and its per-row covariates come from
// the stored logits (max |z| checked here against the logits themselves); the reference itself
// passes verify. (Writing one used to read the linear head's Σ|h||w| buffer, empty here.)
TEST_F(GoldenVerify, LogitsProblemsMakeGoldenFilesThatVerify) {
  for (const char* name : {"masked", "heavy"}) {
    DatasetParams p;
    p.N = 8;
    p.seed = 3;
    const DatasetInstance ds = make_dataset(name, p);
    GoldenOptions o;
    const std::string file = path(std::string(name) + ".h5");
    write_golden(file, ds, ds.spec, o);
    const Golden g = read_golden(file);
    ASSERT_EQ(g.S, 8) << name;
    ASSERT_FALSE(g.dz.empty()) << name;
    std::vector<double> row(static_cast<std::size_t>(g.V));
    for (std::int64_t q = 0; q < g.S; ++q) {
      ds.problem.logits.read(g.token_rows[static_cast<std::size_t>(q)] * g.V, g.V, row.data());
      double mx = 0;
      for (double z : row)
        if (std::isfinite(z)) mx = std::max(mx, std::fabs(z));  // logit scale 1, no softcap
      EXPECT_EQ(g.max_abs_logit[static_cast<std::size_t>(q)], mx) << name << " row " << q;
    }
    const std::string cand = path(std::string(name) + "-cand.h5");
    write_candidate(cand, false,
                    {{"loss", tensor(g.loss, {g.S})}, {"dz", tensor(g.dz, {g.S, g.V})}},
                    "the reference itself");
    VerifyOptions vo;
    vo.check = VerifyCheck::bound;
    vo.required = {"loss", "dz"};
    const VerifyReport rep = verify_candidate(g, cand, make_verify_policy("fp32"), vo);
    // The reference itself passes, unless the fp32 recipe's own bound is at least |ref| on every
    // element of an output (a loss of 0.0025 from logits of magnitude ~10^3: lse − z_t cancels):
    // then an output of zeros would pass too, and the verdict is inconclusive, never failed.
    EXPECT_NE(rep.verdict, "failed") << name << "\n" << format_report(rep);
    for (const auto& o : rep.outputs)
      if (o.status == "inconclusive") {
        const std::vector<double> tol =
            verify_tolerance(g, make_verify_policy("fp32"), o.name, o.dtype);
        RefOutput ro;
        ref_output(g, o.name, ro);
        for (std::size_t i = 0; i < tol.size(); ++i)
          EXPECT_LE(std::fabs((*ro.ref)[i]), tol[i]) << name << " " << o.name << "[" << i << "]";
      } else {
        EXPECT_EQ(o.status, "passed") << name << " " << o.name;
      }
  }
}

TEST_F(GoldenVerify, RoundTripPassesAndOnePerturbedDwElementFails) {
  write_golden(path("g.h5"), ds_, ds_.spec, {});
  const Golden g = read_golden(path("g.h5"));
  const VerifyPolicy pol = make_verify_policy("fp32");
  for (DType dt : {DType::fp64, DType::fp32}) {
    const std::string c = path(std::string("exact-") + std::string(to_string(dt)) + ".h5");
    write_candidate(c, false, exact_candidate(g, dt), "test: the reference itself");
    const VerifyReport r = verify_candidate(g, c, pol);
    EXPECT_TRUE(r.passed) << format_report(r);
    EXPECT_EQ(r.outputs.size(), 6u);
    for (const auto& o : r.outputs) EXPECT_EQ(o.status, "passed") << o.name << ": " << o.message;
  }
  // One dW element moved by 100× its tolerance.
  const std::vector<double> tol = verify_tolerance(g, pol, "dW", DType::fp64);
  const std::int64_t k = (g.J / 2) * g.D + 5;
  auto cand = exact_candidate(g);
  std::vector<double> dW = g.dW;
  dW[k] += 100 * pol.judge.k * tol[k];
  cand[4].second = tensor(dW, {g.J, g.D});
  write_candidate(path("bad.h5"), false, cand, "test: perturbed");
  const VerifyReport r = verify_candidate(g, path("bad.h5"), pol);
  EXPECT_FALSE(r.passed);
  const OutputReport& o = output(r, "dW");
  EXPECT_EQ(o.status, "failed");
  EXPECT_EQ(o.index, k);
  EXPECT_EQ(o.candidate, dW[k]);
  EXPECT_EQ(o.reference, g.dW[k]);
  const std::string text = format_report(r);
  const std::string where = fmt::format("dW[{}, {}]", g.vocab_rows[k / g.D], k % g.D);
  EXPECT_NE(text.find(where), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("flat index {}", k)), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("{:.9g}", dW[k])), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("{:.9g}", g.dW[k])), std::string::npos) << text;
  for (const char* n : {"loss", "lse", "dH", "db"}) EXPECT_EQ(output(r, n).status, "passed") << n;
  // JUnit: one failure; a report from an earlier run is replaced, any other file kept unless force.
  write_junit(path("j.xml"), false, r);
  std::stringstream xml;
  xml << std::ifstream(path("j.xml")).rdbuf();
  EXPECT_NE(xml.str().find("<testsuite name=\"xentlab.verify\" tests=\"6\" failures=\"1\""),
            std::string::npos)
      << xml.str();
  EXPECT_NE(xml.str().find(where), std::string::npos);
  EXPECT_NO_THROW(write_junit(path("j.xml"), false, r));
  std::ofstream(path("notes.txt")) << "not a report";
  EXPECT_THROW(check_junit_output(path("notes.txt"), false), InputError);
  // An XML file that is no report of verify is kept too: replacing any "<?xml" file would
  // overwrite build files and other tools' reports.
  std::ofstream(path("other.xml")) << "\xEF\xBB\xBF <?xml version=\"1.0\"?>\n<testsuites "
                                      "name=\"other\"><testsuite name=\"other\"/></testsuites>";
  EXPECT_THROW(check_junit_output(path("other.xml"), false), InputError);
  EXPECT_THROW(write_junit(path("other.xml"), false, r), InputError);
  EXPECT_THROW(write_junit(path("notes.txt"), false, r), InputError);
  EXPECT_NO_THROW(write_junit(path("notes.txt"), true, r));
}

TEST_F(GoldenVerify, NanShapeAndDtypeMismatchesAreReportedFailures) {
  write_golden(path("g.h5"), ds_, ds_.spec, {});
  const Golden g = read_golden(path("g.h5"));
  auto cand = exact_candidate(g);
  std::vector<double> loss = g.loss;
  loss[3] = std::numeric_limits<double>::quiet_NaN();
  cand[0].second = tensor(loss, {g.S});
  cand[3].second = Tensor(DType::fp32, {g.S, g.D + 1});  // dH of the wrong shape
  write_candidate(path("c.h5"), false, cand, "test");
  {
    h5::File f = h5::File::create(path("int.h5"));
    f.set_attr("format", kCandidateFormat);
    f.set_attr("format_version", kCandidateVersion);
    f.write("lse", std::vector<std::int64_t>(static_cast<std::size_t>(g.S), 1));  // integers
    f.close();
  }
  const VerifyPolicy pol = make_verify_policy("fp32");
  const VerifyReport r = verify_candidate(g, path("c.h5"), pol);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(output(r, "loss").status, "failed");
  EXPECT_EQ(output(r, "loss").stats->out_nan, 1);
  EXPECT_EQ(output(r, "loss").index, 3);
  EXPECT_EQ(output(r, "dH").status, "failed");
  EXPECT_NE(output(r, "dH").message.find(fmt::format("({}, {})", g.S, g.D + 1)), std::string::npos)
      << output(r, "dH").message;
  EXPECT_EQ(output(r, "dW").status, "passed");
  const VerifyReport ri = verify_candidate(g, path("int.h5"), pol);
  EXPECT_FALSE(ri.passed);
  EXPECT_EQ(output(ri, "lse").status, "failed");
  // A candidate with none of the outputs fails with a reason.
  write_candidate(path("empty.h5"), false, {}, "test");
  const VerifyReport re = verify_candidate(g, path("empty.h5"), pol);
  EXPECT_FALSE(re.passed);
  EXPECT_NE(re.reason.find("no output"), std::string::npos) << re.reason;
}

TEST_F(GoldenVerify, DamagedForeignAndWrongVersionFilesAreFormatErrors) {
  write_golden(path("g.h5"), ds_, ds_.spec, {});
  auto expect_format_error = [&](const std::string& p, const std::string& needle,
                                 bool as_candidate) {
    try {
      if (as_candidate)
        verify_candidate(read_golden(path("g.h5")), p, make_verify_policy("fp32"));
      else
        read_golden(p);
      ADD_FAILURE() << p << ": no exception";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // Truncated.
  fs::copy_file(path("g.h5"), path("cut.h5"));
  fs::resize_file(path("cut.h5"), fs::file_size(path("g.h5")) / 2);
  expect_format_error(path("cut.h5"), "cut.h5", false);
  // Not HDF5 at all.
  std::ofstream(path("text.h5")) << "hello";
  expect_format_error(path("text.h5"), "not an HDF5 file", false);
  // Foreign HDF5, wrong version, missing group.
  {
    h5::File f = h5::File::create(path("foreign.h5"));
    f.write("x", std::vector<double>{1.0});
    f.close();
    h5::File v = h5::File::create(path("v3.h5"));
    v.set_attr("format", kGoldenFormat);
    v.set_attr("format_version", std::int64_t{3});
    v.close();
    h5::File m = h5::File::create(path("missing.h5"));
    m.set_attr("format", kGoldenFormat);
    m.set_attr("format_version", kGoldenVersion);
    m.close();
  }
  expect_format_error(path("foreign.h5"), "no 'format' attribute", false);
  expect_format_error(path("v3.h5"), "format_version 3", false);
  expect_format_error(path("missing.h5"), "missing.h5", false);
  // A golden file given as the candidate, and a foreign candidate.
  expect_format_error(path("g.h5"), "golden file was given as the candidate", true);
  expect_format_error(path("foreign.h5"), "not a xentlab candidate file", true);
  // Outputs under other names than the format's ("dh" for dH, "Loss" for loss) are refused,
  // naming the name and the expected ones, not left out of the verdict: the correct outputs
  // beside them do not make the file pass.
  {
    const Golden g = read_golden(path("g.h5"));
    for (const std::string misnamed : {"dh", "Loss", "grad_W"}) {
      auto cand = exact_candidate(g);
      cand.emplace_back(misnamed, tensor(std::vector<double>{1.0}, {1}));
      write_candidate(path("misnamed.h5"), true, cand, "test");
      expect_format_error(path("misnamed.h5"), "'" + misnamed + "' is not an output verify knows",
                          true);
      expect_format_error(path("misnamed.h5"), "loss, lse, reduced_loss, dH, dW, db, dz", true);
    }
    // The outputs written into a group, as the golden file's /reference holds them: the message
    // says where they go.
    h5::File grouped = h5::File::create(path("grouped.h5"));
    grouped.set_attr("format", kCandidateFormat);
    grouped.set_attr("format_version", kCandidateVersion);
    h5::Group ref = grouped.create_group("reference");
    for (const auto& [name, t] : exact_candidate(g)) ref.write_tensor(name, t);
    grouped.close();
    expect_format_error(path("grouped.h5"), "'reference' is not an output verify knows", true);
    expect_format_error(
        path("grouped.h5"),
        "it is a group holding loss, lse, reduced_loss, dH, dW, db: write the outputs "
        "as datasets at the file's root",
        true);
  }
}

TEST_F(GoldenVerify, SampledGoldenAcceptsFullShapeCandidates) {
  GoldenOptions o;
  o.rows = 8;
  o.sample_seed = 3;
  write_golden(path("s.h5"), ds_, ds_.spec, o);
  const Golden g = read_golden(path("s.h5"));
  EXPECT_TRUE(g.partial);
  EXPECT_EQ(g.S, 8);
  EXPECT_TRUE(g.dW.empty());  // token sampling drops dW/db (they sum over every token)
  const ReferenceResult full = compute_reference(ds_.problem, ds_.spec);
  std::vector<std::pair<std::string, Tensor>> cand = {
      {"loss", tensor(full.loss, {ds_.problem.N})},
      {"lse", tensor(full.lse, {ds_.problem.N})},
      {"dH", tensor(full.dH, {ds_.problem.N, ds_.problem.D})},
      {"dW", tensor(full.dW, {ds_.problem.V, ds_.problem.D})}};
  write_candidate(path("c.h5"), false, cand, "test: full problem");
  const VerifyReport r = verify_candidate(g, path("c.h5"), make_verify_policy("bf16"));
  EXPECT_TRUE(r.passed) << format_report(r);
  EXPECT_EQ(output(r, "loss").status, "passed");
  EXPECT_EQ(output(r, "dH").status, "passed");
  EXPECT_EQ(output(r, "dW").status, "not judged");
  // Held in memory (verify_outputs), the same candidate is judged alike: the full shape's rows
  // selected, the full dW not judged for want of a reference. With lse of no elements and dH of
  // neither the sampled shape nor the full one, both paths fail them with the same message.
  const auto same_as_file = [&](const std::vector<std::pair<std::string, Tensor>>& c) {
    write_candidate(path("c.h5"), true, c, "test: full problem");
    const VerifyReport file = verify_candidate(g, path("c.h5"), make_verify_policy("bf16"));
    const VerifyReport mem =
        verify_outputs(g, c, "test: full problem", make_verify_policy("bf16"), {});
    EXPECT_EQ(mem.verdict, file.verdict);
    EXPECT_EQ(mem.outputs.size(), file.outputs.size());
    for (std::size_t i = 0; i < std::min(mem.outputs.size(), file.outputs.size()); ++i) {
      EXPECT_EQ(mem.outputs[i].name, file.outputs[i].name);
      EXPECT_EQ(mem.outputs[i].status, file.outputs[i].status) << file.outputs[i].name;
      EXPECT_EQ(mem.outputs[i].message, file.outputs[i].message) << file.outputs[i].name;
    }
    return mem;
  };
  EXPECT_TRUE(same_as_file(cand).passed);
  cand[1].second = Tensor(DType::fp32, {0});
  cand[2].second = tensor(std::vector<double>(static_cast<std::size_t>(9 * ds_.problem.D), 0.0),
                          {9, ds_.problem.D});
  const VerifyReport bad = same_as_file(cand);
  EXPECT_EQ(output(bad, "lse").status, "failed");
  EXPECT_EQ(output(bad, "lse").message,
            fmt::format("shape (0,) does not match the golden file's (8,) (or the full ({},))",
                        ds_.problem.N));
  EXPECT_EQ(output(bad, "dH").status, "failed");
}

TEST_F(GoldenVerify, ExplicitTolerancesAndPolicyNames) {
  write_golden(path("g.h5"), ds_, ds_.spec, {});
  const Golden g = read_golden(path("g.h5"));
  // bf16-rounded outputs: within atol = rtol = 0? no. Within rtol = u_bf16? yes (RNE: |e| ≤
  // u|ref|).
  write_candidate(path("b.h5"), false, exact_candidate(g, DType::bf16),
                  "test: bf16-rounded reference");
  EXPECT_FALSE(verify_candidate(g, path("b.h5"), make_explicit_policy(0, 0)).passed);
  const VerifyReport r =
      verify_candidate(g, path("b.h5"), make_explicit_policy(0, unit_roundoff(DType::bf16)));
  EXPECT_TRUE(r.passed) << format_report(r);
  // The bound check allows one rounding into the storage dtype. The bf16 policy's recipe delivers
  // loss, lse and the reduced loss in fp32: stored in bf16 they are judged as one correct
  // rounding of the recipe's value (the correctly rounded reference is one), the gradients by
  // the differential check.
  VerifyOptions bound_only;
  bound_only.check = VerifyCheck::bound;
  EXPECT_TRUE(verify_candidate(g, path("b.h5"), make_verify_policy("bf16"), bound_only).passed);
  const VerifyReport both = verify_candidate(g, path("b.h5"), make_verify_policy("bf16"));
  EXPECT_TRUE(both.passed) << format_report(both);
  for (const auto& o : both.outputs) {
    EXPECT_EQ(o.bound_status, "passed") << o.name;
    EXPECT_EQ(o.differential.status, "passed") << o.name;
    const bool loss_like = o.name == "loss" || o.name == "lse" || o.name == "reduced_loss";
    EXPECT_EQ(o.differential.rounding, loss_like) << o.name;
  }
  EXPECT_THROW(make_verify_policy("float8"), InputError);
  EXPECT_THROW(make_verify_policy("bf16", "sloppy"), InputError);
  EXPECT_NO_THROW(make_verify_policy("bf16/bf16/fp32/bf16"));
  EXPECT_THROW(make_explicit_policy(-1, 0), InputError);
  EXPECT_THROW(make_explicit_policy(0, std::numeric_limits<double>::quiet_NaN()), InputError);
  EXPECT_THROW(make_verify_policy("bf16", "default", 0.0), InputError);
}

TEST_F(GoldenVerify, RequiredOutputsMissingOrUncheckedFail) {
  GoldenOptions o;
  o.rows = 8;  // token sampling: the golden file holds no dW
  write_golden(path("s.h5"), ds_, ds_.spec, o);
  const Golden g = read_golden(path("s.h5"));
  write_candidate(path("c.h5"), false,
                  {{"loss", tensor(g.loss, {g.S})}, {"dW", Tensor(DType::fp32, {g.J, g.D})}},
                  "test: loss and an uncheckable dW");
  const VerifyPolicy pol = make_verify_policy("fp32");
  // Without --require every gradient the golden file can check is expected: dH is missing, so
  // the verdict is not judged (no pass by omission); dW, which the golden file cannot check, does
  // not count, and lse is the candidate's to give or not.
  const VerifyReport open = verify_candidate(g, path("c.h5"), pol);
  EXPECT_FALSE(open.passed);
  EXPECT_EQ(open.verdict, "not judged") << format_report(open);
  EXPECT_NE(output(open, "dH").message.find("holds no dH"), std::string::npos);
  EXPECT_TRUE(output(open, "dW").no_reference);
  EXPECT_TRUE(verify_candidate(g, path("c.h5"), pol, {"loss"}).passed);
  const VerifyReport r = verify_candidate(g, path("c.h5"), pol, {"loss", "dH", "dW"});
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(output(r, "dH").status, "failed");
  EXPECT_NE(output(r, "dH").message.find("holds no dH"), std::string::npos);
  EXPECT_EQ(output(r, "dW").status, "failed");
  EXPECT_NE(output(r, "dW").message.find("not checked"), std::string::npos);
  EXPECT_NE(r.reason.find("dH"), std::string::npos) << r.reason;
  EXPECT_THROW(verify_candidate(g, path("c.h5"), pol, {"dx"}), InputError);
  EXPECT_THROW(parse_required_outputs({"loss", "loss"}), InputError);
}

}  // namespace
}  // namespace xentlab
