// `xentlab verify --json` and `xentlab audit --json`, run as a user runs them: the report parses,
// holds the keys of docs/json.md (validated against docs/schema/xentlab-report.schema.json), and
// says what the text report and the exit status say — the verdict, per output, in the judge's own
// words; a failing candidate is "failed". The file's rules: an earlier report of the command is
// replaced, any other file needs --force; a folder, the input files, a missing or read-only
// folder are refused before the work (exit 2), leaving no file behind.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "datasets/catalog.hpp"
#include "datasets/io/sha256.hpp"
#include "harness/verify/golden.hpp"
#include "harness/verify/verify.hpp"
#include "judge/output_verdict.hpp"
#include "judge/policy.hpp"
#include "numerics/version.hpp"
#include "tests/cli/cli_support.hpp"
#include "tests/support/json_report.hpp"
#include "tests/support/unprivileged.hpp"

namespace xentlab::cli_tests {
namespace {

using nlohmann::json;
using testing::read_report;

// A golden file of the embedded real model (32 tokens) and candidates: every output equal to the
// reference (fp64), the loss alone, and the loss with one NaN (token row 5).
class JsonProgram : public testing::TempFolderTest {
 protected:
  JsonProgram() : TempFolderTest("cli-json") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    DatasetParams p;
    p.N = 32;
    p.seed = 4;
    const DatasetInstance ds = make_dataset("stories260k", p);
    write_golden(path("g.h5"), ds, ds.spec, {});
    g_ = read_golden(path("g.h5"));
    const auto tensor = [](const std::vector<double>& v, std::vector<std::int64_t> shape) {
      Tensor t(DType::fp64, std::move(shape));
      for (std::size_t k = 0; k < v.size(); ++k) t.set(static_cast<std::int64_t>(k), v[k]);
      return t;
    };
    write_candidate(path("exact.h5"), false,
                    {{"loss", tensor(g_.loss, {g_.S})},
                     {"lse", tensor(g_.lse, {g_.S})},
                     {"reduced_loss", tensor({*g_.reduced_loss}, {})},
                     {"dH", tensor(g_.dH, {g_.S, g_.D})},
                     {"dW", tensor(g_.dW, {g_.J, g_.D})},
                     {"db", tensor(g_.db, {g_.J})}},
                    "test: the reference itself");
    write_candidate(path("loss.h5"), false, {{"loss", tensor(g_.loss, {g_.S})}},
                    "test: the loss alone");
    std::vector<double> nan_loss = g_.loss;
    nan_loss[5] = std::numeric_limits<double>::quiet_NaN();
    write_candidate(path("nan.h5"), false, {{"loss", tensor(nan_loss, {g_.S})}},
                    "test: a NaN in the loss");
  }
  // "verify <golden> <candidate> " with the files of this fixture.
  std::string verify(const std::string& candidate) const {
    return "verify " + shell_quote(path("g.h5")) + " " + shell_quote(path(candidate)) + " ";
  }
  // The small audit of the odd-vocab head (2 strategies × 2 recipes, seconds) writing to
  // `results`.
  std::string audit(const std::string& results = "a.h5") const {
    return "audit --backend cpu -q --dataset odd-vocab -N 2 --strategies naive,chunked "
           "--recipes fp32/fp32/fp32/fp32,bf16/bf16/fp32/bf16 --vocab-rows 8 -o " +
           shell_quote(path(results)) + " ";
  }
  Golden g_;
};

// The output of that name in a report's "outputs" (a test failure when there is none).
const json& output_named(const json& doc, const std::string& name) {
  for (const json& o : doc.at("outputs"))
    if (o.at("name") == name) return o;
  ADD_FAILURE() << "no output " << name << " in " << doc.at("outputs").dump();
  static const json none = json::object();
  return none;
}

// The text after "PASSED: " or "FAILED: " in verify's text report.
std::string verdict_line(const std::string& text) {
  std::smatch m;
  return std::regex_search(text, m, std::regex("\n(PASSED|FAILED): ([^\n]*)\n"))
             ? m[1].str() + ": " + m[2].str()
             : std::string();
}

TEST_F(JsonProgram, VerifyReportOfAPassingCandidateAgreesWithTheText) {
  const std::string out = path("r.json");
  const Ran r = xentlab(verify("exact.h5") + "--k 2 --json " + shell_quote(out));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "json       " + out)) << r.output;
  const json doc = read_report(out);
  EXPECT_EQ(doc.at("format"), "xentlab-report");
  EXPECT_EQ(doc.at("schema_version"), 1);
  EXPECT_EQ(doc.at("command"), "verify");
  // The verdict in the judge's words, and the same reason as the text's last line.
  EXPECT_EQ(doc.at("verdict"), std::string(to_string(Disposition::passed)));
  EXPECT_EQ(doc.at("passed"), true);
  EXPECT_EQ("PASSED: " + doc.at("reason").get<std::string>(), verdict_line(r.output)) << r.output;
  // Every output the candidate holds, in the table's order, each passed, with its statistics
  // over the golden file's elements (S tokens; J·D for dW).
  std::vector<std::string> names;
  for (const json& o : doc.at("outputs")) names.push_back(o.at("name"));
  EXPECT_EQ(names, (std::vector<std::string>{"loss", "lse", "reduced_loss", "dH", "dW", "db"}));
  for (const json& o : doc.at("outputs")) {
    EXPECT_EQ(o.at("status"), std::string(to_string(Disposition::passed))) << o.dump();
    EXPECT_EQ(o.at("dtype"), "fp64");
    EXPECT_TRUE(o.at("deciding_element").is_null());
  }
  EXPECT_EQ(output_named(doc, "loss").at("statistics").at("n"), g_.S);
  EXPECT_EQ(output_named(doc, "dW").at("statistics").at("n"), g_.J * g_.D);
  EXPECT_EQ(output_named(doc, "dW").at("shape"), (std::vector<std::int64_t>{g_.J, g_.D}));
  // The exact answer has no error: max|e| is 0 exactly.
  EXPECT_EQ(output_named(doc, "dH").at("statistics").at("max_abs_err"), 0.0);
  // The policy as applied: --k 2 is the multiplier; the recipe of the golden problem's dtype.
  const json& pol = doc.at("policy");
  EXPECT_EQ(pol.at("judge").at("k"), 2.0);
  EXPECT_EQ(pol.at("explicit_tolerance"), false);
  const std::string recipe = fmt::format("{0}/{0}/fp32/{0}", to_string(g_.problem.input_dtype()));
  EXPECT_EQ(pol.at("recipe"), recipe);
  EXPECT_TRUE(contains(r.output, "policy     " + pol.at("description").get<std::string>()));
  EXPECT_EQ(pol.at("differential").at("k"), kDifferentialK);
  EXPECT_EQ(doc.at("check"), "both");
  EXPECT_EQ(doc.at("baseline").at("recipe"), recipe);
  // Provenance: the files and their digests, the command line, this build.
  EXPECT_EQ(doc.at("inputs").at("golden").at("path"), path("g.h5"));
  EXPECT_EQ(doc.at("inputs").at("golden").at("sha256"), sha256_file_hex(path("g.h5")));
  EXPECT_EQ(doc.at("inputs").at("candidate").at("sha256"), sha256_file_hex(path("exact.h5")));
  EXPECT_EQ(doc.at("inputs").at("candidate").at("implementation"), "test: the reference itself");
  const json& prov = doc.at("provenance");
  EXPECT_EQ(prov.at("xentlab_version"), kVersion);
  EXPECT_TRUE(contains(prov.at("command_line"), "--json " + out)) << prov.dump();
  EXPECT_TRUE(
      std::regex_match(prov.at("started_utc").get<std::string>(),
                       std::regex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")));
  // Atomic: no temporary file is left beside it.
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  XL_EXPECT_VALID_REPORTS(out);
}

TEST_F(JsonProgram, VerifyReportOfAFailingCandidateSaysFailed) {
  // A required output the candidate lacks: failed, as the text says.
  const std::string out = path("r.json");
  const Ran r = xentlab(verify("loss.h5") + "--require loss,dW --json " + shell_quote(out));
  ASSERT_EQ(r.status, 1) << r.output;
  json doc = read_report(out);
  EXPECT_EQ(doc.at("verdict"), std::string(to_string(Disposition::failed)));
  EXPECT_EQ(doc.at("passed"), false);
  EXPECT_EQ("FAILED: " + doc.at("reason").get<std::string>(), verdict_line(r.output)) << r.output;
  EXPECT_EQ(doc.at("required"), (std::vector<std::string>{"loss", "dW"}));
  const json& dW = output_named(doc, "dW");
  EXPECT_EQ(dW.at("status"), "failed");
  EXPECT_TRUE(contains(dW.at("message"), "the candidate holds no dW")) << dW.dump();
  EXPECT_TRUE(dW.at("statistics").is_null());
  EXPECT_EQ(output_named(doc, "loss").at("status"), std::string(to_string(Disposition::passed)));
  // A NaN where the reference is finite: the loss is incorrect at token row 5; the NaN is the
  // string "nan" (JSON has no NaN), the reference there a number.
  const Ran n = xentlab(verify("nan.h5") + "--json " + shell_quote(out));
  ASSERT_EQ(n.status, 1) << n.output;
  doc = read_report(out);
  EXPECT_EQ(doc.at("verdict"), std::string(to_string(Disposition::failed)));
  const json& loss = output_named(doc, "loss");
  EXPECT_EQ(loss.at("status"), std::string(to_string(Outcome::failed)));
  EXPECT_TRUE(contains(n.output, "loss         fp64")) << n.output;
  EXPECT_EQ(loss.at("statistics").at("out_nan"), 1);
  EXPECT_EQ(loss.at("statistics").at("nonfinite_where_ref_finite"), 1);
  const json& e = loss.at("deciding_element");
  ASSERT_TRUE(e.is_object()) << loss.dump();
  EXPECT_EQ(e.at("index"), 5);
  EXPECT_EQ(e.at("candidate"), "nan");
  EXPECT_EQ(e.at("reference"), g_.loss[5]);
  XL_EXPECT_VALID_REPORTS(out);
}

TEST_F(JsonProgram, VerifyReportReplacesItsOwnAndRefusesOtherFiles) {
  const std::string out = path("r.json");
  const std::string v = verify("exact.h5") + "--json ";
  ASSERT_EQ(xentlab(v + shell_quote(out)).status, 0);
  // A CI job re-runs into the same path: the earlier report is replaced, a failing run's too.
  const Ran again = xentlab(verify("loss.h5") + "--require dW --json " + shell_quote(out));
  EXPECT_EQ(again.status, 1) << again.output;
  EXPECT_EQ(read_report(out).at("passed"), false);
  // Anything else is kept unless --force: a text file, another JSON file, audit's report.
  std::ofstream(path("notes.txt")) << "my notes\n";
  std::ofstream(path("other.json"))
      << "{\"format\": \"something-else\", \"command\": \"verify\"}\n";
  std::ofstream(path("audit.json"))
      << "{\"format\": \"xentlab-report\", \"schema_version\": 1, \"command\": \"audit\"}\n";
  const std::string not_ours = "is not a JSON report of xentlab verify";
  expect_exit_2_naming({
      {v + shell_quote(path("notes.txt")), not_ours},
      {v + shell_quote(path("other.json")), not_ours},
      {v + shell_quote(path("audit.json")), not_ours},
      {v + shell_quote(dir_.string()), "is a folder"},
      {v + shell_quote(path("g.h5")) + " --force", "is the golden file"},
      {v + shell_quote(path("exact.h5")) + " --force", "is the candidate file"},
      {v + shell_quote(path("x.xml")) + " --junit " + shell_quote(path("x.xml")),
       "is the --junit file"},
      {v + shell_quote(path("nowhere/r.json")), "does not exist"},
  });
  EXPECT_EQ(slurp(path("notes.txt")), "my notes\n");
  EXPECT_FALSE(fs::exists(path("nowhere")));
  EXPECT_FALSE(fs::exists(path("x.xml")));
  const Ran forced = xentlab(v + shell_quote(path("notes.txt")) + " --force");
  EXPECT_EQ(forced.status, 0) << forced.output;
  EXPECT_EQ(read_report(path("notes.txt")).at("command"), "verify");
  // --help says so.
  EXPECT_TRUE(contains(xentlab("verify --help").output,
                       "an existing JSON report of verify is "
                       "replaced"));
}

// A folder the user may not write to: refused before the work (exit 3: the output cannot be
// written), naming the cause; no
// report and no temporary file.
TEST_F(JsonProgram, ReadOnlyFolderIsRefusedBeforeTheWork) {
  fs::create_directory(path("ro"));
  fs::permissions(dir_, fs::perms::all);  // the unprivileged child reads the inputs here
  fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec |
                                  fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  for (const char* f : {"g.h5", "exact.h5"})
    fs::permissions(path(f), fs::perms::others_read, std::filesystem::perm_options::add);
  const std::string report = shell_quote(path("ro/r.json"));
  const std::string v = verify("exact.h5") + "--json " + report;
  const std::string a = audit() + "--json " + report;
  XL_EXPECT_UNPRIVILEGED([&] {
    for (const std::string& cmd : {v, a}) {
      const Ran r = xentlab(cmd);
      if (r.status != 3 || !contains(r.output, "Permission denied") ||
          !contains(r.output, path("ro/r.json"))) {
        std::fprintf(stderr, "%s\n%s\n", cmd.c_str(), r.output.c_str());
        return false;
      }
    }
    return fs::is_empty(path("ro")) && !fs::exists(path("a.h5"));
  });
}

TEST_F(JsonProgram, AuditReportAgreesWithTheSummary) {
  const std::string out = path("a.json");
  const Ran r = xentlab(audit() + "--json " + shell_quote(out));
  ASSERT_TRUE(r.status == 0 || r.status == 1) << r.output;
  EXPECT_TRUE(contains(r.output, "json: " + out)) << r.output;
  const json doc = read_report(out);
  EXPECT_EQ(doc.at("command"), "audit");
  EXPECT_EQ(doc.at("files").at("results"), path("a.h5"));
  EXPECT_EQ(doc.at("policy").at("name"), "audit");
  EXPECT_EQ(doc.at("config").at("backend"), "cpu-emulation");
  EXPECT_EQ(doc.at("baseline").at("applies"), false);  // no device backend
  // The counts of the summary's line "runs: P passed (…), I incorrect, n not supported, F failed".
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m,
                                std::regex("runs: ([0-9]+) passed \\([^\n]*\\), ([0-9]+) "
                                           "incorrect, ([0-9]+) not supported, ([0-9]+) failed")))
      << r.output;
  const json& c = doc.at("counts");
  EXPECT_EQ(c.at("passed"), std::stoll(m[1]));
  EXPECT_EQ(c.at("incorrect"), std::stoll(m[2]));
  EXPECT_EQ(c.at("not_supported"), std::stoll(m[3]));
  EXPECT_EQ(c.at("failed"), std::stoll(m[4]));
  EXPECT_EQ(r.status, c.at("incorrect").get<int>() + c.at("failed").get<int>() > 0 ? 1 : 0);
  // Every run: 2 strategies × 2 recipes on the one problem, each disposition one of the judge's
  // words, and counted as such.
  ASSERT_EQ(doc.at("runs").size(), 4u);
  EXPECT_EQ(c.at("runs"), 4);
  std::int64_t passed = 0;
  for (const json& run : doc.at("runs")) {
    const std::string d = run.at("verdict").at("disposition");
    bool known = false;
    for (const Disposition k : {Disposition::passed, Disposition::measured, Disposition::incorrect,
                                Disposition::not_supported, Disposition::failed})
      known = known || d == to_string(k);
    EXPECT_TRUE(known) << d;
    passed += d == to_string(Disposition::passed);
    if (d == to_string(Disposition::passed)) {
      EXPECT_FALSE(run.at("outputs").empty()) << run.dump();
      for (const json& o : run.at("outputs")) EXPECT_GT(o.at("statistics").at("n"), 0);
    }
  }
  EXPECT_EQ(c.at("passed"), passed);
  EXPECT_FALSE(doc.at("problems").empty());
  // The report is an output like the others: never the results file; a file that is no report
  // of audit is kept (without --force); all refused before the work (b.h5 is not written).
  std::ofstream(path("notes.txt")) << "my notes\n";
  expect_exit_2_naming({
      {audit() + "--force --json " + shell_quote(path("a.h5")), "is the results file"},
      {audit("b.h5") + "--json " + shell_quote(path("notes.txt")),
       "is not a JSON report of xentlab audit"},
      {audit("b.h5") + "--json " + shell_quote(path("nowhere/a.json")),
       "--json " + path("nowhere/a.json") + ": the folder"},
  });
  EXPECT_EQ(slurp(path("notes.txt")), "my notes\n");
  EXPECT_FALSE(fs::exists(path("b.h5")));
  // Its own earlier report is replaced.
  const Ran again = xentlab(audit() + "--force --json " + shell_quote(out));
  EXPECT_EQ(again.status, r.status) << again.output;
  XL_EXPECT_VALID_REPORTS(out);
}

// The schema refuses a report without one of its keys (so that "valid" means something), and
// takes the reports of an explicit tolerance (no baseline) and of --explain (every recipe's
// profiles). The other tests validate their own reports.
TEST_F(JsonProgram, SchemaTakesEveryKindOfReportAndRefusesAMissingKey) {
  ASSERT_EQ(
      xentlab(verify("exact.h5") + "--atol 0 --rtol 1e-3 --json " + shell_quote(path("e.json")))
          .status,
      0);
  const json e = read_report(path("e.json"));
  EXPECT_EQ(e.at("policy").at("explicit_tolerance"), true);
  EXPECT_EQ(e.at("policy").at("rtol"), 1e-3);
  EXPECT_TRUE(e.at("policy").at("recipe").is_null());
  EXPECT_TRUE(e.at("baseline").is_null());
  ASSERT_EQ(
      xentlab(verify("loss.h5") + "--require loss --explain --json " + shell_quote(path("x.json")))
          .status,
      0);
  const json x = read_report(path("x.json"));
  ASSERT_FALSE(x.at("explain").empty());
  EXPECT_TRUE(x.at("explain")[0].at("profiles").contains("loss")) << x.at("explain")[0].dump();
  json broken = x;
  broken.erase("verdict");
  std::ofstream(path("broken.json")) << broken.dump();
  const Ran bad = testing::validate_reports({path("broken.json")});
  if (bad.status != 77) {
    EXPECT_EQ(bad.status, 1) << bad.output;
    EXPECT_TRUE(contains(bad.output, "'verdict' is a required property")) << bad.output;
  }
  XL_EXPECT_VALID_REPORTS(path("e.json"), path("x.json"));
}

}  // namespace
}  // namespace xentlab::cli_tests
