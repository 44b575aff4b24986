// The xentlab program's refusals and file handling, run as a user runs them (the binary, its exit
// status and its output): verify's number options, --junit on a re-run, --require; golden's and
// audit's dataset paths and loss-spec checks; the loss options reference, golden and audit share;
// audit's, --append's and candidate's refusals; the datasets listing's suggestion; and
// tools/scripts/plot_audit.py (bad input, existing plots, --force; skipped where python3
// lacks h5py or matplotlib).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "datasets/catalog.hpp"
#include "gpu/registry.hpp"
#include "numerics/dtype.hpp"
#include "tests/program.hpp"
#include "tests/temp_folder.hpp"
#include "tools/golden/golden_file.hpp"
#include "tools/golden/verify.hpp"

namespace xentlab {
namespace {
namespace fs = std::filesystem;
using testing::expect_exit_2_naming;
using testing::Ran;
using testing::shell_quote;
using testing::xentlab;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// ---- verify -----------------------------------------------------------------------------------

// A golden file of the embedded real model (32 tokens) and three candidates: every output equal
// to the reference (fp64), the same rounded to bf16, and the loss alone.
class VerifyProgram : public testing::TempFolderTest {
 protected:
  VerifyProgram() : TempFolderTest("cli-verify") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    DatasetParams p;
    p.N = 32;
    p.seed = 4;
    const DatasetInstance ds = make_dataset("stories260k", p);
    write_golden(path("g.h5"), ds, ds.spec, {});
    const Golden g = read_golden(path("g.h5"));
    const auto tensor = [](const std::vector<double>& v, std::vector<std::int64_t> shape,
                           DType dt) {
      Tensor t(dt, std::move(shape));
      for (std::size_t k = 0; k < v.size(); ++k) t.set(static_cast<std::int64_t>(k), v[k]);
      return t;
    };
    for (DType dt : {DType::fp64, DType::bf16})
      write_candidate(path(dt == DType::fp64 ? "exact.h5" : "bf16.h5"), false,
                      {{"loss", tensor(g.loss, {g.S}, dt)},
                       {"lse", tensor(g.lse, {g.S}, dt)},
                       {"reduced_loss", tensor({*g.reduced_loss}, {}, dt)},
                       {"dH", tensor(g.dH, {g.S, g.D}, dt)},
                       {"dW", tensor(g.dW, {g.J, g.D}, dt)},
                       {"db", tensor(g.db, {g.J}, dt)}},
                      "test: the reference itself");
    write_candidate(path("loss.h5"), false, {{"loss", tensor(g.loss, {g.S}, DType::fp64)}},
                    "test: the loss alone");
  }
  // "verify <golden> <candidate> " with the files of this fixture.
  std::string verify(const std::string& candidate) const {
    return "verify " + shell_quote(path("g.h5")) + " " + shell_quote(path(candidate)) + " ";
  }
};

// `xentlab candidate`: the lab's own strategies as candidates. A correct implementation of the
// recipe a policy declares passes it (the bound is certified, independent of the strategy); the
// same strategy with bf16 logits, more than 4× less accurate than fp32 logits on these outputs,
// fails the fp32 policy (the differential check's design, docs/verify.md).
TEST_F(VerifyProgram, TheLabsStrategiesAsCandidates) {
  const std::string g = shell_quote(path("g.h5"));
  for (const StrategyEntry& e : strategy_table()) {
    // The strategies that take every recipe on every backend (the fp32 one below), as their CPU
    // emulation (candidate's default backend).
    if (e.emulated == nullptr || !e.traits.every_recipe) continue;
    const std::string st = e.name;
    const std::string out = shell_quote(path(std::string("c-") + st + ".h5"));
    const Ran made = xentlab("candidate " + g + " " + out + " --strategy " + st +
                             " --recipe fp32/fp32/fp32/fp32");
    ASSERT_EQ(made.status, 0) << made.output;
    EXPECT_NE(made.output.find("cpu-emulation " + std::string(st)), std::string::npos)
        << made.output;
    const Ran v = xentlab("verify " + g + " " + out + " --policy fp32");
    EXPECT_EQ(v.status, 0) << st << "\n" << v.output;
  }
  const std::string low = shell_quote(path("c-bf16.h5"));
  ASSERT_EQ(xentlab("candidate " + g + " " + low + " --strategy naive --recipe fp32/bf16/fp32/fp32")
                .status,
            0);
  const Ran v = xentlab("verify " + g + " " + low + " --policy fp32");
  EXPECT_EQ(v.status, 1) << v.output;
  EXPECT_NE(v.output.find("differential"), std::string::npos) << v.output;
  // Refusals name the cause, and an existing file is kept without --force.
  const std::string again = shell_quote(path("c-naive.h5"));
  testing::expect_exit_2_naming({
      {"candidate " + g + " " + shell_quote(path("x.h5")) +
           " --strategy tiled --recipe "
           "fp32/fp32/fp32/fp32",
       "no such strategy"},
      {"candidate " + g + " " + shell_quote(path("x.h5")) +
           " --strategy naive --recipe "
           "fp32/fp32/fp32/fp32 --backend tpu",
       "--backend must be cpu or cuda"},
      {"candidate " + g + " " + shell_quote(path("x.h5")) +
           " --strategy naive --recipe "
           "bf16/bf16/fp32/bf16",
       "cannot run recipe"},
      {"candidate " + g + " " + again + " --strategy naive --recipe fp32/fp32/fp32/fp32", "exists"},
  });
  EXPECT_FALSE(std::filesystem::exists(path("x.h5")));
}

// --baseline-backend: whose strategies make the differential baseline. The CPU emulation is
// always there; the CUDA kernels only where the build has them and a GPU is present (else the
// option is refused naming why, never silently replaced by the emulation).
TEST_F(VerifyProgram, BaselineBackendNamesItsStrategiesOrIsRefused) {
  const Ran cpu = xentlab(verify("exact.h5") + "--policy fp32 --baseline-backend cpu");
  EXPECT_EQ(cpu.status, 0) << cpu.output;
  EXPECT_TRUE(contains(cpu.output, "(cpu-emulation); per output the largest error")) << cpu.output;
  EXPECT_FALSE(contains(cpu.output, "(cuda)")) << cpu.output;
  const Ran cuda = xentlab(verify("exact.h5") + "--policy fp32 --baseline-backend cuda");
  if (cuda.status == 2) {  // no CUDA backend in this build, or no GPU: the reason is named
    EXPECT_TRUE(contains(cuda.output, "--baseline-backend cuda: ")) << cuda.output;
  } else {
    EXPECT_EQ(cuda.status, 0) << cuda.output;
    EXPECT_TRUE(contains(cuda.output, "(cuda); per output the largest error")) << cuda.output;
  }
  // Without a baseline to run (the bound check alone) the option would be ignored: refused for
  // that reason (not for a missing device), and the bound check alone runs without it.
  const Ran bound =
      xentlab(verify("exact.h5") + "--policy fp32 --check bound --baseline-backend all");
  EXPECT_EQ(bound.status, 2) << bound.output;
  EXPECT_TRUE(contains(bound.output, "--baseline-backend does not apply with --check bound"))
      << bound.output;
  EXPECT_EQ(xentlab(verify("exact.h5") + "--policy fp32 --check bound").status, 0);
  // The default is the emulation alone: the same verdict on every machine.
  const Ran plain = xentlab(verify("exact.h5") + "--policy fp32");
  EXPECT_TRUE(contains(plain.output, "(cpu-emulation); per output the largest error"))
      << plain.output;
  EXPECT_FALSE(contains(plain.output, "(cuda)")) << plain.output;
  expect_exit_2_naming({{verify("exact.h5") + "--baseline-backend tpu",
                         "--baseline-backend must be cpu, cuda, all or auto, got 'tpu'"},
                        {verify("exact.h5") + "--baseline-backend ''",
                         "--baseline-backend must be cpu, cuda, all or auto, got ''"}});
}

TEST_F(VerifyProgram, NumberOptionsOutOfRangeAreRefusedNamingOptionAndValue) {
  const std::string v = verify("exact.h5");
  expect_exit_2_naming({
      {v + "--atol -1", "--atol must be a finite number ≥ 0, got -1"},
      {v + "--atol nan", "--atol must be a finite number ≥ 0, got nan"},
      {v + "--atol inf", "--atol must be a finite number ≥ 0, got inf"},
      {v + "--rtol -5", "--rtol must be a finite number ≥ 0, got -5"},
      {v + "--k 0", "--k must be a finite number > 0, got 0"},
      {v + "--k -3", "--k must be a finite number > 0, got -3"},
      {v + "--k nan", "--k must be a finite number > 0, got nan"},
      {v + "--k inf", "--k must be a finite number > 0, got inf"},
      // An option that the explicit tolerance would ignore is refused, not dropped.
      {v + "--rtol 0 --k 2", "--k does not apply with --atol/--rtol"},
      {v + "--atol 0 --policy bf16", "--policy does not apply with --atol/--rtol"},
      {v + "--atol 0 --strictness strict", "--strictness does not apply with --atol/--rtol"},
      {v + "--atol 0 --baseline-rows 4", "--baseline-rows does not apply with --atol/--rtol"},
      {v + "--rtol 0 --baseline-seed 2", "--baseline-seed does not apply with --atol/--rtol"},
      {v + "--atol 0 --baseline-backend cpu",
       "--baseline-backend does not apply with --atol/--rtol"},
      {v + "--policy ''", "--policy '': give a policy"},
      {v + "--check bound --baseline-rows 4", "--baseline-rows does not apply with --check bound"},
  });
  for (const char* bad : {"--atol -1", "--k 0", "--k nan"})
    EXPECT_FALSE(contains(xentlab(v + bad).output, "PASSED")) << bad;
}

TEST_F(VerifyProgram, GivenValuesShowInThePrintedPolicy) {
  // --k: the multiplier given is the one printed and applied.
  const Ran k = xentlab(verify("exact.h5") + "--policy fp32 --k 2");
  EXPECT_EQ(k.status, 0) << k.output;
  EXPECT_TRUE(contains(k.output, "k=2,")) << k.output;
  // --rtol alone: the bf16-rounded reference is within u_bf16·|ref| (round to nearest), and the
  // printed policy carries the value given and atol 0.
  const double u = unit_roundoff(DType::bf16);
  const Ran r = xentlab(verify("bf16.h5") + fmt::format("--rtol {:.17g}", u));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, fmt::format("explicit: |e| ≤ 0 + {:g}·|ref|", u))) << r.output;
  const Ran zero = xentlab(verify("bf16.h5") + "--atol 0");
  EXPECT_EQ(zero.status, 1) << zero.output;
  EXPECT_TRUE(contains(zero.output, "explicit: |e| ≤ 0 + 0·|ref|")) << zero.output;
}

TEST_F(VerifyProgram, JunitReportIsRewrittenOnARerun) {
  const std::string xml = path("report.xml");
  const std::string v = verify("exact.h5") + "--junit " + shell_quote(xml);
  const Ran first = xentlab(v);
  ASSERT_EQ(first.status, 0) << first.output;
  const std::string report = slurp(xml);
  EXPECT_TRUE(contains(report, "<testsuite name=\"xentlab.verify\"")) << report;
  // A CI job re-runs into the same path: the report is replaced, atomically (no temporary left).
  std::ofstream(xml) << "<?xml version=\"1.0\"?>\n<testsuites>\n  <testsuite "
                        "name=\"xentlab.verify\" tests=\"1\">stale</testsuite></testsuites>\n";
  const Ran again = xentlab(v);
  EXPECT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(slurp(xml), report);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".report.xml.tmp"), std::string::npos) << e.path();
  // A failing run replaces it too (the report is what CI reads).
  const Ran failing = xentlab(verify("loss.h5") + "--require dW --junit " + shell_quote(xml));
  EXPECT_EQ(failing.status, 1) << failing.output;
  EXPECT_TRUE(contains(slurp(xml), "failures=\"1\"")) << slurp(xml);
  // What is not a report of verify is kept unless --force — other XML files too (a build file,
  // another tool's JUnit report); the golden and candidate files always.
  std::ofstream(path("notes.txt")) << "my notes\n";
  const std::string pom = "<?xml version=\"1.0\"?>\n<project><modelVersion/></project>\n";
  const std::string pytest_report =
      "<?xml version=\"1.0\" encoding=\"utf-8\"?><testsuites name=\"pytest tests\"><testsuite "
      "name=\"pytest\" tests=\"1\"></testsuite></testsuites>\n";
  std::ofstream(path("pom.xml")) << pom;
  std::ofstream(path("pytest.xml")) << pytest_report;
  const std::string not_a_report = "is not a JUnit report of xentlab verify";
  expect_exit_2_naming({
      {verify("exact.h5") + "--junit " + shell_quote(path("notes.txt")), not_a_report},
      {verify("exact.h5") + "--junit " + shell_quote(path("pom.xml")), not_a_report},
      {verify("exact.h5") + "--junit " + shell_quote(path("pytest.xml")), not_a_report},
      {verify("exact.h5") + "--junit " + shell_quote(path("g.h5")) + " --force",
       "is the golden file"},
      {verify("exact.h5") + "--junit " + shell_quote(path("exact.h5")) + " --force",
       "is the candidate file"},
      {verify("exact.h5") + "--junit " + shell_quote(dir_.string()), "is a folder"},
  });
  EXPECT_EQ(slurp(path("notes.txt")), "my notes\n");
  EXPECT_EQ(slurp(path("pom.xml")), pom);
  EXPECT_EQ(slurp(path("pytest.xml")), pytest_report);
  const Ran forced =
      xentlab(verify("exact.h5") + "--junit " + shell_quote(path("notes.txt")) + " --force");
  EXPECT_EQ(forced.status, 0) << forced.output;
  EXPECT_EQ(slurp(path("notes.txt")), report);
  // --help says so.
  const Ran help = xentlab("verify --help");
  EXPECT_TRUE(contains(help.output, "an existing report of verify is replaced")) << help.output;
}

TEST_F(VerifyProgram, RequireNamesTheMissingOutputs) {
  const Ran plain = xentlab(verify("loss.h5"));
  EXPECT_EQ(plain.status, 0) << plain.output;
  const Ran loss = xentlab(verify("loss.h5") + "--require loss");
  EXPECT_EQ(loss.status, 0) << loss.output;
  const Ran grads = xentlab(verify("loss.h5") + "--require loss,dH,dW");
  EXPECT_EQ(grads.status, 1) << grads.output;
  for (const char* name : {"dH", "dW"})
    EXPECT_TRUE(contains(grads.output, fmt::format("the candidate holds no {}", name)))
        << grads.output;
  EXPECT_TRUE(contains(grads.output, "FAILED: dH failed")) << grads.output;
  EXPECT_TRUE(contains(grads.output, "required   loss, dH, dW")) << grads.output;
  // The same list as repeated options; every output of a full candidate.
  const Ran repeated = xentlab(verify("loss.h5") + "--require loss --require dW");
  EXPECT_EQ(repeated.status, 1) << repeated.output;
  const Ran all = xentlab(verify("exact.h5") + "--require loss,lse,reduced_loss,dH,dW,db");
  EXPECT_EQ(all.status, 0) << all.output;
  expect_exit_2_naming({
      {verify("loss.h5") + "--require loss,dx", "--require: unknown output 'dx'"},
      {verify("loss.h5") + "--require dH,dH", "--require: 'dH' is named twice"},
      {verify("loss.h5") + "--require ,", "--require: empty value"},
  });
}

// ---- golden, audit and datasets --------------------------------------------------------------

class DatasetProgram : public testing::TempFolderTest {
 protected:
  DatasetProgram() : TempFolderTest("cli-datasets") {}
};

TEST_F(DatasetProgram, APathThatDoesNotExistIsNoSuchFile) {
  const std::string missing = path("nowhere/model.safetensors");
  expect_exit_2_naming({
      {"golden --dataset /nonexistent.safetensors -o " + shell_quote(path("g.h5")),
       "no such file: /nonexistent.safetensors"},
      {"golden --dataset " + shell_quote(missing) + " -o " + shell_quote(path("g.h5")),
       "no such file: " + missing},
      {"golden --dataset problem.h5 -o " + shell_quote(path("g.h5")), "no such file: problem.h5"},
      {"audit --backend cpu --dataset " + shell_quote(missing) + " -o " + shell_quote(path("a.h5")),
       "no such file: " + missing},
      // A name (no folder, no extension) is still looked up in the catalog.
      {"golden --dataset stories -o " + shell_quote(path("g.h5")), "unknown dataset 'stories'"},
  });
  EXPECT_FALSE(fs::exists(path("g.h5")));
}

TEST_F(DatasetProgram, LossSpecIsCheckedBeforeTheDatasetIsMade) {
  // The dataset named here could not be made at all: the spec's refusal comes first.
  for (const char* dataset : {"no-such-dataset", "/nonexistent.safetensors"}) {
    const std::string d = std::string(" --dataset ") + dataset;
    expect_exit_2_naming({
        {"golden" + d + " --label-smoothing -1 -o " + shell_quote(path("g.h5")),
         "label_smoothing must be in [0, 1], got -1"},
        {"golden" + d + " --z-loss -2 -o " + shell_quote(path("g.h5")), "z_loss"},
        {"golden" + d + " --logit-scale 0 -o " + shell_quote(path("g.h5")), "logit_scale"},
        {"golden" + d + " --reduction avg -o " + shell_quote(path("g.h5")), "avg"},
        {"golden" + d + " --empty-mean one -o " + shell_quote(path("g.h5")), "--empty-mean"},
        {"audit --backend cpu -q" + d + " --label-smoothing -1 -o " + shell_quote(path("a.h5")),
         "label_smoothing must be in [0, 1], got -1"},
        {"audit --backend cpu -q" + d + " --softcap -1 -o " + shell_quote(path("a.h5")), "softcap"},
        {"golden" + d + " --normalizer 10 --reduction sum -o " + shell_quote(path("g.h5")),
         "normalizer = 10 is given with reduction sum"},
        {"golden" + d + " --normalizer -3 -o " + shell_quote(path("g.h5")), "--normalizer"},
        {"golden" + d + " --upstream ones -o " + shell_quote(path("g.h5")),
         "an upstream gradient is taken with --reduction none only"},
        {"audit --backend cpu -q" + d + " --upstream random -o " + shell_quote(path("a.h5")),
         "--upstream random: an upstream gradient is taken with reduction none only"},
        {"audit --backend cpu -q" + d + " --reduction none --upstream twos -o " +
             shell_quote(path("a.h5")),
         "--upstream 'twos': expected ones or random"},
        {"audit --backend cpu -q" + d + " --chunk-tokens -1 -o " + shell_quote(path("a.h5")),
         "--chunk-tokens"},
        {"audit --backend cpu -q" + d + " --normalizer 8 --reduction none -o " +
             shell_quote(path("a.h5")),
         "normalizer = 8 is given with reduction none"},
    });
  }
}

TEST_F(DatasetProgram, ReferenceTakesTheNormaliserAndTheUpstreamGradient) {
  expect_exit_2_naming({
      {"reference -N 8 -V 100 --upstream random", "--reduction none only"},
      {"reference -N 8 -V 100 --normalizer 5 --reduction sum", "given with reduction sum"},
      {"reference -N 8 -V 100 --reduction none --upstream 2", "expected ones or random"},
  });
  // The oracle (multiple precision, reference/oracle.hpp) agrees with both.
  for (const char* options : {"--normalizer 50", "--reduction none --upstream random"}) {
    const Ran r = xentlab(std::string("reference -N 16 -V 1000 ") + options);
    EXPECT_EQ(r.status, 0) << options << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "reduced     1 checked, 0 over bound")) << r.output;
  }
}

// A .npy file of float64 values (format 1.0, little-endian, C order): the header dict padded with
// spaces and a newline to a multiple of 64 bytes (numpy's layout).
void write_npy(const std::string& file, const std::vector<double>& v) {
  std::string header =
      fmt::format("{{'descr': '<f8', 'fortran_order': False, 'shape': ({},), }}", v.size());
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(file, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char len_le[2] = {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8)};
  out.write(len_le, 2);
  out << header;
  out.write(reinterpret_cast<const char*>(v.data()),
            static_cast<std::streamsize>(v.size() * sizeof(double)));
}

TEST_F(DatasetProgram, GoldenTakesTheUpstreamGradientFromANpyFile) {
  std::vector<double> g(32);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.25 * static_cast<double>(i % 9) - 1.0;
  write_npy(path("g.npy"), g);
  const Ran r = xentlab("golden -N 32 --reduction none --upstream " + shell_quote(path("g.npy")) +
                        " -o " + shell_quote(path("g.h5")));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_golden(path("g.h5")).upstream, g);
  // The default for reduction none: the seeded random g, stored.
  const Ran d = xentlab("golden -N 32 --reduction none -o " + shell_quote(path("d.h5")));
  ASSERT_EQ(d.status, 0) << d.output;
  EXPECT_NE(d.output.find("upstream random, seed 1"), std::string::npos) << d.output;
  EXPECT_EQ(read_golden(path("d.h5")).upstream, random_upstream(32, 1));
  write_npy(path("short.npy"), std::vector<double>(31, 1.0));
  write_npy(path("inf.npy"), {1.0, std::numeric_limits<double>::infinity()});
  expect_exit_2_naming({
      {"golden -N 32 --reduction none --upstream " + shell_quote(path("short.npy")) + " -o " +
           shell_quote(path("s.h5")),
       "expected a float array of shape (32)"},
      {"golden -N 2 --reduction none --upstream " + shell_quote(path("inf.npy")) + " -o " +
           shell_quote(path("s.h5")),
       "entry [1] = inf is not finite"},
  });
}

TEST_F(DatasetProgram, TheListingsSuggestionIsAcceptedByAuditAndGolden) {
  const Ran list = xentlab("datasets");
  ASSERT_EQ(list.status, 0) << list.output;
  // The entry's text is wrapped: join its lines before looking for "try <options>)".
  std::string text = std::regex_replace(list.output, std::regex("\\s+"), " ");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("with audit or golden try ([^)]*)\\)")))
      << list.output;
  const std::string suggested = m[1];
  // Small otherwise (2 tokens, one strategy and recipe): the suggested V is what is exercised.
  const Ran audit = xentlab("audit --backend cpu -q --dataset odd-vocab " + suggested +
                            " --tokens 2 --strategies naive --recipes bf16/fp32/fp32/bf16 "
                            "--vocab-rows 8 -o " +
                            shell_quote(path("a.h5")));
  EXPECT_TRUE(audit.status == 0 || audit.status == 1) << suggested << "\n" << audit.output;
  EXPECT_TRUE(fs::exists(path("a.h5"))) << audit.output;
  const Ran golden = xentlab("golden --dataset odd-vocab " + suggested +
                             " -N 2 --vocab-rows 8 -o " + shell_quote(path("g.h5")));
  EXPECT_EQ(golden.status, 0) << suggested << "\n" << golden.output;
  // The short spellings golden has are audit's too.
  const Ran help = xentlab("audit --help");
  for (const char* opt : {"-N,--tokens", "-V,--vocab", "-D,--hidden"})
    EXPECT_TRUE(contains(help.output, opt)) << opt << "\n" << help.output;
}

// ---- the loss options, and refusals of audit, candidate and reference ------------------------

// The loss options are declared once (tools/cli/loss_options.hpp) for reference, golden and audit:
// each command takes the same spelling of an option, and the same bad value is refused by each
// naming the same fault, before any problem is generated (the dataset named here cannot be made).
TEST_F(DatasetProgram, TheLossOptionsAreTheSameInEveryCommand) {
  const std::string golden = "golden --dataset no-such-dataset -o " + shell_quote(path("g.h5"));
  const std::string audit =
      "audit --backend cpu -q --dataset no-such-dataset -o " + shell_quote(path("a.h5"));
  const std::string reference = "reference -N 8 -V 100 -D 8 --oracle-rows 0";
  for (const std::string& cmd : {golden, audit, reference}) {
    expect_exit_2_naming({
        {cmd + " --reduction avg", "unknown reduction 'avg' (expected none, mean or sum)"},
        {cmd + " --label-smoothing 1.5", "label_smoothing must be in [0, 1], got 1.5"},
        {cmd + " --z-loss -1", "z_loss must be finite and >= 0, got -1"},
        {cmd + " --softcap 1e-300", "softcap = 1e-300 is not a normal fp32 number"},
        {cmd + " --logit-scale 0", "logit_scale must be finite and > 0, got 0"},
        // 2^24 + 1: the strategies hold the count in fp32.
        {cmd + " --normalizer 16777217", "normalizer = 16777217 is above 2^24"},
        {cmd + " --normalizer 010", "a leading zero would make it octal"},
        // An empty number is not 0 (CLI11 would read it so).
        {cmd + " --label-smoothing ''", "--label-smoothing: '' is not a number"},
        {cmd + " --z-loss ''", "--z-loss: '' is not a number"},
        {cmd + " --softcap ' '", "--softcap: ' ' is not a number"},
        {cmd + " --logit-scale ''", "--logit-scale: '' is not a number"},
        {cmd + " --normalizer 4 --reduction sum", "normalizer = 4 is given with reduction sum"},
        {cmd + " --normalizer -1", "--normalizer: must be ≥ 0, got -1"},
    });
    const Ran help = xentlab(cmd.substr(0, cmd.find(' ')) + " --help");
    for (const char* opt : {"--reduction", "--label-smoothing", "--z-loss", "--softcap",
                            "--logit-scale", "--normalizer", "--upstream"})
      EXPECT_TRUE(contains(help.output, opt)) << opt << "\n" << help.output;
  }
  // ignore_index and the mean of an empty batch: the commands that take them.
  expect_exit_2_naming({
      {golden + " --ignore-index x", "--ignore-index"},
      {reference + " --ignore-index 0x10", "not a plain decimal integer"},
      {golden + " --empty-mean one", "--empty-mean 'one': expected nan or zero"},
  });
  EXPECT_FALSE(fs::exists(path("g.h5")));
  EXPECT_FALSE(fs::exists(path("a.h5")));
}

// A given option overrides the dataset's spec in golden (the spec line and the file's spec say
// so), and a left-out option keeps the dataset's.
TEST_F(DatasetProgram, GivenLossOptionsOverrideTheDatasetsSpec) {
  const Ran r = xentlab(
      "golden -N 8 --label-smoothing 0.25 --z-loss 0.001 --logit-scale 0.5 --ignore-index 3 "
      "--reduction sum --no-grad -o " +
      shell_quote(path("g.h5")));
  ASSERT_EQ(r.status, 0) << r.output;
  const Golden g = read_golden(path("g.h5"));
  EXPECT_EQ(g.spec.label_smoothing, 0.25);
  EXPECT_EQ(g.spec.z_loss, 0.001);
  EXPECT_EQ(g.spec.logit_scale, 0.5);
  EXPECT_EQ(g.spec.ignore_index, 3);
  EXPECT_EQ(g.spec.reduction, Reduction::sum);
  DatasetParams p;
  p.N = 8;
  EXPECT_EQ(g.spec.softcap, make_dataset("stories260k", p).spec.softcap);  // not given: its own
  EXPECT_TRUE(contains(r.output, g.spec.describe())) << r.output;
}

// Refusals of audit's own options come before any problem is generated and leave no file.
TEST_F(DatasetProgram, AuditOptionsAreRefusedBeforeTheWork) {
  const std::string a = "audit --backend cpu -q -o " + shell_quote(path("a.h5")) + " ";
  expect_exit_2_naming({
      {"audit -q -o " + shell_quote(path("a.h5")) + " --backend gpu",
       "--backend must be auto, cpu or cuda, got 'gpu'"},
      {a + "--strategies ''", "--strategies: empty value (leave the option out for the default)"},
      {a + "--recipes ,", "--recipes: empty value"},
      {a + "--problems ''", "--problems: empty value"},
      {a + "--strategies naive,naive", "--strategies: 'naive' is named twice"},
      {a + "--problems stories260k,stories260k", "--problems: 'stories260k' is named twice"},
      {a + "--recipes bf17/fp32/fp32/fp32", "recipe 'bf17/fp32/fp32/fp32': unknown dtype 'bf17'"},
      {a + "--vocab 1000", "--vocab sets V of --dataset generators"},
      {a + "--policy lax", "unknown pass/fail policy 'lax'"},
      {a + "--markdown " + shell_quote(path("a.h5")), "is the results file"},
      {a + "--problems no-such-problem", "unknown problem 'no-such-problem'"},
      {a + "--chunk-tokens 010", "a leading zero would make it octal"},
      {a + "--ranks 2",
       "--ranks 2 applies to the strategies that shard the vocabulary "
       "(vocab_parallel), and --strategies names none"},
      {a + "--strategies chunked --ranks 2", "and --strategies names none"},
  });
  EXPECT_FALSE(fs::exists(path("a.h5")));
  EXPECT_FALSE(fs::exists(path("a.h5.md")));
}

// One seed, one chunk width and one upstream gradient per results file: --append refuses runs of
// another, naming both, before the work, and leaves the file as it was.
TEST_F(DatasetProgram, AuditAppendRefusesAnotherSeedChunkWidthOrUpstream) {
  // chunked: a strategy that takes a chunk width (--chunk-tokens is refused for one that does not).
  const std::string small =
      "audit --backend cpu -q --dataset odd-vocab -N 2 --strategies chunked "
      "--recipes fp32/fp32/fp32/fp32 --vocab-rows 8 -o " +
      shell_quote(path("a.h5"));
  const Ran first = xentlab(small + " --reduction none");
  ASSERT_TRUE(first.status == 0 || first.status == 1) << first.output;
  const std::string before = slurp(path("a.h5"));
  ASSERT_FALSE(before.empty());
  expect_exit_2_naming({
      {small + " --reduction none --append --seed 2", "holds runs of seed 1, this audit's is 2"},
      {small + " --reduction none --append --chunk-tokens 4",
       "holds runs of --chunk-tokens 0 --upstream ones, this audit's are 4 and ones"},
      {small + " --reduction none --append --upstream random",
       "holds runs of --chunk-tokens 0 --upstream ones, this audit's are 0 and random"},
      {small + " --reduction none", "exists"},  // neither --append nor --force
      // Other compared vocabulary rows: dW of the two audits would be compared as one.
      {"audit --backend cpu -q --dataset odd-vocab -N 2 --strategies chunked "
       "--recipes fp32/fp32/fp32/fp32 --vocab-rows 16 -o " +
           shell_quote(path("a.h5")) + " --reduction none --append --markdown " +
           shell_quote(path("v.md")),
       "with 8 compared vocabulary rows, this audit compares 16"},
      // Another N under the same name: its description differs, refused before the work.
      {"audit --backend cpu -q --dataset odd-vocab -N 3 --strategies chunked "
       "--recipes fp32/fp32/fp32/fp32 --vocab-rows 8 -o " +
           shell_quote(path("a.h5")) + " --reduction none --append --markdown " +
           shell_quote(path("v.md")),
       "linear N=2 V=507 D=123 fp32', this audit 'odd-vocab: linear N=3 V=507 D=123 fp32'"},
      // Two problems of one audit under one name (the embedded stories260k and the catalog's).
      {"audit --backend cpu -q --problems stories260k --dataset stories260k --strategies chunked "
       "--recipes fp32/fp32/fp32/fp32 -o " +
           shell_quote(path("d.h5")),
       "two problems of this audit are named 'stories260k'"},
      // A chunk width for strategies that do not chunk would be recorded, not used.
      {"audit --backend cpu -q --dataset odd-vocab -N 2 --strategies naive,fused "
       "--recipes fp32/fp32/fp32/fp32 --vocab-rows 8 -o " +
           shell_quote(path("b.h5")) + " --chunk-tokens 4",
       "none of the strategies named (naive, fused) works through the tokens in chunks"},
      // The first audit's Markdown is not replaced by a summary of the appended runs alone.
      {small + " --reduction none --append", "the Markdown summary"},
  });
  EXPECT_EQ(slurp(path("a.h5")), before);
  EXPECT_FALSE(fs::exists(path("v.md")));  // a refused append writes no Markdown either
  // With a Markdown of its own the append is written, and the first summary kept.
  const std::string md_before = slurp(path("a.h5.md"));
  const Ran appended =
      xentlab(small + " --reduction none --append --markdown " + shell_quote(path("b.md")));
  ASSERT_TRUE(appended.status == 0 || appended.status == 1) << appended.output;
  EXPECT_NE(slurp(path("a.h5")), before);
  EXPECT_EQ(slurp(path("a.h5.md")), md_before);
  EXPECT_NE(slurp(path("b.md")).find("appended to"), std::string::npos);
}

// --ranks of vocab_parallel: at least 1 and at most V (odd-vocab: V = 507), refused before any
// run; --append refuses vocab_parallel runs of another number of ranks and leaves the file.
TEST_F(DatasetProgram, AuditRanksAreCheckedAndOnePerResultsFile) {
  const std::string small =
      "audit --backend cpu -q --dataset odd-vocab -N 2 --strategies vocab_parallel "
      "--recipes fp32/fp32/fp32/fp32 --vocab-rows 8 -o " +
      shell_quote(path("a.h5"));
  expect_exit_2_naming({
      {small + " --ranks 0", "vocabulary-parallel ranks must be at least 1 (got 0)"},
      {small + " --ranks 508",
       "vocab_parallel on problem odd-vocab: vocabulary-parallel ranks (508) exceed the "
       "vocabulary (507 rows)"},
  });
  EXPECT_FALSE(fs::exists(path("a.h5")));
  const Ran first = xentlab(small + " --ranks 2");
  ASSERT_TRUE(first.status == 0 || first.status == 1) << first.output;
  const std::string before = slurp(path("a.h5"));
  ASSERT_FALSE(before.empty());
  // The Markdown names the ranks of the strategy that shards the vocabulary.
  EXPECT_TRUE(contains(slurp(path("a.h5.md")), "; vocab_parallel: 2 vocabulary-parallel ranks"))
      << slurp(path("a.h5.md"));
  expect_exit_2_naming({
      {small + " --ranks 3 --append",
       "holds vocab_parallel runs of --ranks 2, this audit's are of --ranks 3"},
  });
  EXPECT_EQ(slurp(path("a.h5")), before);
}

// `xentlab candidate`: option refusals come before the golden file is read or a strategy runs.
TEST_F(VerifyProgram, CandidateOptionsAreRefusedNamingTheCause) {
  const std::string g = shell_quote(path("g.h5"));
  const std::string out = " " + shell_quote(path("x.h5"));
  const std::string run = " --strategy naive --recipe fp32/fp32/fp32/fp32";
  expect_exit_2_naming({
      {"candidate " + g + out + run + " --chunk-tokens -1",
       "--chunk-tokens must be ≥ 0 (0: the strategy's own), got -1"},
      {"candidate " + g + out + " --strategy naive --recipe fp32/fp32/fp32",
       "recipe 'fp32/fp32/fp32'"},
      {"candidate " + shell_quote(path("nowhere.h5")) + out + run, "nowhere.h5: no such file"},
      {"candidate " + g + out + " --recipe fp32/fp32/fp32/fp32", "--strategy is required"},
      // The golden file is the input: never the output, even with --force.
      {"candidate " + g + " " + g + run + " --force", "is the golden file"},
      // A chunk size for a strategy that does not chunk (the registry's trait) would be ignored.
      {"candidate " + g + out + run + " --chunk-tokens 4",
       "--chunk-tokens 4: naive does not work through the tokens in chunks"},
  });
  EXPECT_FALSE(fs::exists(path("x.h5")));
}

// `xentlab reference`: the upstream gradient and normaliser beside the wrong reduction, and the
// thread count, are refused before the problem is generated.
TEST(ReferenceProgram, LossAndThreadOptionsAreRefused) {
  testing::expect_exit_2_naming({
      {"reference -N 8 -V 100 --normalizer 5 --reduction none",
       "normalizer = 5 is given with reduction none"},
      {"reference -N 8 -V 100 --upstream random",
       "--upstream random: an upstream gradient is taken with --reduction none only"},
      {"reference -N 8 -V 100 --reduction none --upstream file.npy",
       "--upstream 'file.npy': expected ones or random"},
      {"reference -N 8 -V 100 --threads 5000", "--threads"},
  });
}

// --check picks the checks; its value, and the options the differential check needs, are checked
// before any file is read.
TEST_F(VerifyProgram, CheckValueAndDifferentialOptionsAreValidated) {
  expect_exit_2_naming({
      {verify("exact.h5") + "--check sometimes",
       "--check: unknown check 'sometimes' (one of bound, differential, both)"},
      {verify("exact.h5") + "--check Both", "--check: unknown check 'Both'"},
      {verify("exact.h5") + "--check differential --atol 1e-3",
       "--check differential needs a recipe"},
      {verify("exact.h5") + "--explain --rtol 0.01", "--explain compares with emulated recipes"},
      {verify("exact.h5") + "--baseline-rows -1", "--baseline-rows must be ≥ 0"},
  });
  const Ran bound = xentlab(verify("exact.h5") + "--check bound");
  EXPECT_EQ(bound.status, 0) << bound.output;
  EXPECT_FALSE(contains(bound.output, "differential check")) << bound.output;
  const Ran both = xentlab(verify("exact.h5"));
  EXPECT_EQ(both.status, 0) << both.output;
  EXPECT_TRUE(contains(both.output, "check      both")) << both.output;
  EXPECT_TRUE(contains(both.output, "baseline   recipe fp32/fp32/fp32/fp32")) << both.output;
  // With the explicit tolerance there is no recipe: the bound alone.
  const Ran expl = xentlab(verify("exact.h5") + "--atol 0");
  EXPECT_EQ(expl.status, 0) << expl.output;
  EXPECT_FALSE(contains(expl.output, "baseline   recipe")) << expl.output;
}

// Gradients of the reference rounded to bf16 are bf16 gradients: within the differential check of
// a bf16 policy, far beyond that of fp32 (whose emulated errors are ~1e-7); the report and the
// JUnit file name the baseline.
TEST_F(VerifyProgram, DifferentialCheckSeparatesBF16FromFP32Results) {
  const Golden g = read_golden(path("g.h5"));
  Tensor dH(DType::bf16, {g.S, g.D}), dW(DType::bf16, {g.J, g.D});
  for (std::size_t k = 0; k < g.dH.size(); ++k) dH.set(static_cast<std::int64_t>(k), g.dH[k]);
  for (std::size_t k = 0; k < g.dW.size(); ++k) dW.set(static_cast<std::int64_t>(k), g.dW[k]);
  write_candidate(path("grads.h5"), false, {{"dH", dH}, {"dW", dW}}, "test: bf16 gradients");
  const Ran bf16 = xentlab(verify("grads.h5") + "--policy bf16 --check differential");
  EXPECT_EQ(bf16.status, 0) << bf16.output;
  EXPECT_TRUE(contains(bf16.output, "by the differential check alone (--check differential)"))
      << bf16.output;
  const std::string xml = path("v.xml");
  const Ran fp32 = xentlab(verify("grads.h5") + "--policy fp32 --check differential --junit " +
                           shell_quote(xml));
  EXPECT_EQ(fp32.status, 1) << fp32.output;
  EXPECT_TRUE(contains(fp32.output, "differential: normwise relative error")) << fp32.output;
  const std::string report = slurp(xml);
  EXPECT_TRUE(contains(report, "<property name=\"baseline\" value=\"recipe fp32/fp32/fp32/fp32"))
      << report;
  EXPECT_TRUE(contains(report, "<property name=\"baseline_dH\" value=\"normwise ")) << report;
  EXPECT_TRUE(contains(report, "differential: incorrect")) << report;
}

// tools/examples/torch_candidate.py --backend numpy: float32 throughout behaves like the all-fp32
// recipe and like no other of the grid; its stand-in of PyTorch's bf16 path (bf16 logits and
// gradients) behaves like fp32/bf16/fp32/bf16 first, and fails a policy that declares fp32 logits
// (the classic downgrade) on the differential check.
TEST_F(VerifyProgram, ExplainClassifiesTheNumpyExample) {
  const Ran py = testing::run_shell("python3 -c 'import h5py, numpy'");
  if (py.status != 0)
    GTEST_SKIP() << "python3 with h5py and numpy is not importable here (Debian: python3-h5py "
                    "python3-numpy): "
                 << py.output;
  const Ran made = testing::run_shell("python3 " + shell_quote(XL_EXAMPLE_SCRIPT) + " " +
                                      shell_quote(path("g.h5")) + " " +
                                      shell_quote(path("numpy.h5")) + " --backend numpy");
  ASSERT_EQ(made.status, 0) << made.output;
  // --explain runs 19 recipes × 4 emulated strategies: one OpenMP thread, as ctest -j2 on two
  // cores already runs two processes (tests/CMakeLists.txt, test_verify_differential).
  const auto explain = [&](const std::string& args) {
    return testing::run_shell(std::string("OMP_NUM_THREADS=1 ") + XENTLAB_BIN + " " + args);
  };
  const Ran r = explain(verify("numpy.h5") + "--explain");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "behaves like: fp32/fp32/fp32/fp32 (closest first)")) << r.output;
  const Ran made_bf16 = testing::run_shell(
      "python3 " + shell_quote(XL_EXAMPLE_SCRIPT) + " " + shell_quote(path("g.h5")) + " " +
      shell_quote(path("numpy-bf16.h5")) + " --backend numpy --dtype bf16");
  ASSERT_EQ(made_bf16.status, 0) << made_bf16.output;
  const Ran b = explain(verify("numpy-bf16.h5") + "--policy fp32/bf16/fp32/bf16 --explain");
  EXPECT_EQ(b.status, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "behaves like: fp32/bf16/fp32/bf16,")) << b.output;
  const Ran down =
      xentlab(verify("numpy-bf16.h5") + "--policy fp32/fp32/fp32/bf16 --check differential");
  EXPECT_EQ(down.status, 1) << down.output;
  EXPECT_TRUE(contains(down.output, "dH incorrect: differential: normwise relative error"))
      << down.output;
}

// tools/examples/torch_candidate.py applies the golden file's upstream gradient and normaliser
// (and declares the normaliser, candidate format_version 2): its numpy candidates pass verify, and
// one of another normaliser than the golden file's is refused naming both.
TEST_F(DatasetProgram, TheExampleAppliesTheUpstreamGradientAndTheNormaliser) {
  const Ran py = testing::run_shell("python3 -c 'import h5py, numpy'");
  if (py.status != 0)
    GTEST_SKIP() << "python3 with h5py and numpy is not importable here (Debian: python3-h5py "
                    "python3-numpy): "
                 << py.output;
  const auto example = [&](const std::string& golden, const std::string& cand) {
    return testing::run_shell("python3 " + shell_quote(XL_EXAMPLE_SCRIPT) + " " +
                              shell_quote(path(golden)) + " " + shell_quote(path(cand)) +
                              " --backend numpy");
  };
  for (const auto& [golden, options] : std::vector<std::pair<std::string, std::string>>{
           {"none.h5", "--reduction none"}, {"norm.h5", "--normalizer 100"}, {"own.h5", ""}}) {
    const Ran g = xentlab("golden -N 32 " + options + " -o " + shell_quote(path(golden)));
    ASSERT_EQ(g.status, 0) << g.output;
    const Ran c = example(golden, "c-" + golden);
    ASSERT_EQ(c.status, 0) << c.output;
    const Ran v = xentlab("verify " + shell_quote(path(golden)) + " " +
                          shell_quote(path("c-" + golden)) + " --policy fp32 --check bound");
    EXPECT_EQ(v.status, 0) << options << "\n" << v.output;
  }
  const Ran other = xentlab("verify " + shell_quote(path("own.h5")) + " " +
                            shell_quote(path("c-norm.h5")) + " --policy fp32");
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_TRUE(contains(other.output, "the candidate declares normalizer 100")) << other.output;
}

// ---- tools/scripts/plot_audit.py ----------------------------------------------------------------

class PlotScript : public testing::TempFolderTest {
 protected:
  PlotScript() : TempFolderTest("cli-plots") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    const Ran py = testing::run_shell("python3 -c 'import h5py, numpy, matplotlib'");
    if (py.status != 0)
      GTEST_SKIP() << "python3 with h5py, numpy and matplotlib is not importable here "
                      "(tools/setup.sh --python installs them): "
                   << py.output;
  }
  static Ran plot(const std::string& args) {
    return testing::run_shell("python3 " + shell_quote(XL_PLOT_SCRIPT) + " " + args);
  }
  // A small audit results file (CPU emulation).
  void make_results() {
    const Ran a = xentlab(
        "audit --backend cpu -q --dataset odd-vocab -N 4 --strategies naive "
        "--recipes bf16/fp32/fp32/bf16,bf16/bf16/fp32/bf16 -o " +
        shell_quote(path("r.h5")));
    ASSERT_TRUE(a.status == 0 || a.status == 1) << a.output;
  }
  static void expect_one_line(const Ran& r) {
    EXPECT_FALSE(contains(r.output, "Traceback")) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_TRUE(contains(r.output, "plot_audit.py: ")) << r.output;
  }
};

TEST_F(PlotScript, BadInputIsOneLineAndExit2) {
  std::ofstream(path("text.h5")) << "hello\n";
  const std::string out = shell_quote(path("plots"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {shell_quote(path("text.h5")) + " " + out, "not a readable HDF5 file"},
      {shell_quote(path("missing.h5")) + " " + out, "no such file"},
      {shell_quote(path("text.h5")) + " " + shell_quote(path("text.h5")),
       "exists and is not a folder"},
      {shell_quote(path("text.h5")) + " " + shell_quote(path("no/such/folder")),
       "cannot create the folder"},
  };
  for (const auto& [args, message] : cases) {
    const Ran r = plot(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, message)) << args << "\n" << r.output;
    expect_one_line(r);
  }
}

TEST_F(PlotScript, ExistingPlotsNeedForceInTheScriptAndInAudit) {
  make_results();
  const std::string args = shell_quote(path("r.h5")) + " " + shell_quote(path("plots"));
  const Ran first = plot(args);
  ASSERT_EQ(first.status, 0) << first.output;
  const std::string png = path("plots/error_vs_recipe_loss.png");
  ASSERT_TRUE(fs::exists(png)) << first.output;
  const std::string marker = "not overwritten";
  std::ofstream(png) << marker;
  const Ran again = plot(args);
  EXPECT_EQ(again.status, 2) << again.output;
  EXPECT_TRUE(contains(again.output, "pass --force")) << again.output;
  expect_one_line(again);
  EXPECT_EQ(slurp(png), marker);
  const Ran forced = plot("--force " + args);
  EXPECT_EQ(forced.status, 0) << forced.output;
  EXPECT_NE(slurp(png), marker);
  // audit --plots: refused before the run without --force; with it, the script overwrites too.
  std::ofstream(png) << marker;
  const std::string audit =
      "audit --backend cpu -q --dataset odd-vocab -N 4 --strategies naive "
      "--recipes bf16/fp32/fp32/bf16 --plots " +
      shell_quote(path("plots")) + " -o " + shell_quote(path("r2.h5"));
  const Ran refused = xentlab(audit);
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_TRUE(contains(refused.output, "holds plots already")) << refused.output;
  EXPECT_FALSE(fs::exists(path("r2.h5")));
  const Ran audit_forced = xentlab(audit + " --force");
  EXPECT_TRUE(audit_forced.status == 0 || audit_forced.status == 1) << audit_forced.output;
  EXPECT_TRUE(contains(audit_forced.output, "plots: ")) << audit_forced.output;
  EXPECT_NE(slurp(png), marker);
}

TEST_F(PlotScript, EveryPlotTheScriptMayWriteIsRefusedByAudit) {
  // Each name the script writes, alone in the folder, makes audit --plots refuse the folder.
  make_results();
  const Ran made = plot(shell_quote(path("r.h5")) + " " + shell_quote(path("all")));
  ASSERT_EQ(made.status, 0) << made.output;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(path("all")))
    names.push_back(e.path().filename().string());
  ASSERT_FALSE(names.empty());
  for (const std::string& name : names) {
    fs::remove_all(path("one"));
    fs::create_directory(path("one"));
    std::ofstream(path("one/" + name)) << "x";
    const Ran r = xentlab("audit --backend cpu -q --dataset no-such-dataset --plots " +
                          shell_quote(path("one")) + " -o " + shell_quote(path("r3.h5")));
    EXPECT_EQ(r.status, 2) << name << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "holds plots already (" + name + ")")) << name << "\n"
                                                                          << r.output;
  }
}

}  // namespace
}  // namespace xentlab

namespace xentlab {
namespace {

// The reference options of reference, golden and audit: a nonsense tier or budget is refused
// naming the option; a budget too small for the problem is refused before any work, naming the
// bytes it needs, and golden leaves no file behind.
// The BLAS tier's memory plan holds a panel of W per thread: the byte figures below are those of
// two OpenMP threads, which every child program of these tests gets, whatever the machine.
void two_threads() {
  ::setenv("OMP_NUM_THREADS", "2", 1);
}

TEST(ReferenceOptionsProgram, BadTierAndBudgetAreRefused) {
  two_threads();
  const std::string ref = "reference -N 8 -V 100 -D 8 --oracle-rows 0 ";
  testing::expect_exit_2_naming({
      {ref + "--reference fast", "--reference: unknown reference tier 'fast'"},
      {ref + "--memory-budget 12Q", "--memory-budget: memory size '12Q'"},
      {ref + "--memory-budget ''", "--memory-budget: '' is not a memory size"},
      {ref + "--memory-budget -1", "--memory-budget: memory size '-1'"},
      {ref + "--memory-budget 1K", "needs 48208 bytes"},
      {"golden --dataset gaussian -N 8 -V 100 -D 8 --out " + ::testing::TempDir() +
           "xl-never-golden.h5 --reference x",
       "--reference: unknown reference tier 'x'"},
      {"audit --problems stories260k --reference blas --memory-budget nan --out " +
           ::testing::TempDir() + "xl-never-audit.h5",
       "--memory-budget: memory size 'nan'"},
  });
  // The figure a refusal names is enough: the budget it names runs.
  const Ran just = testing::xentlab(ref + "--memory-budget 48208");
  EXPECT_EQ(just.status, 0) << just.output;
  const Ran ok = testing::xentlab(ref + "--reference compensated --memory-budget 12GB");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("tier compensated"), std::string::npos) << ok.output;
}

// A reference refused for want of memory ends the audit with the reference's message (it is not
// a "not supported" run), and the reference command refuses a size before generating it (the
// 10^8-token problem would take minutes to generate).
TEST(ReferenceOptionsProgram, RefusalsComeFirstAndSayWhy) {
  two_threads();
  testing::expect_exit_2_naming({
      // The audit checks each embedded problem's reference before generating it (100000
      // calibrated rows would take many minutes to generate).
      {"audit --problems calibrated --tokens 100000 --hidden 4096 --rows 0 --vocab-rows 0 -q "
       "--memory-budget 1G --out " +
           ::testing::TempDir() + "xl-never-audit4.h5",
       "of memory but the budget is 1073741824 bytes"},
      {"audit --problems stories260k,calibrated --tokens 16 -q --memory-budget 1M --out " +
           ::testing::TempDir() + "xl-never-audit2.h5",
       "of memory but the budget is 1048576 bytes"},
      {"reference -N 100000000 --memory-budget 1G", "needs 163254856720 bytes"},
      // The Llama-3-8B head (V = 128256, D = 4096) is refused before it is generated.
      {"golden --dataset llama3-8b -N 16 --memory-budget 1M --out " + ::testing::TempDir() +
           "xl-never-golden2.h5",
       "needs 12636878352 bytes"},
  });
}

// The embedded set's real-shape problem (the Llama-3-8B head at N = 8192, full dW) belongs to a
// GPU audit: asked for on the CPU emulation it is refused at once, saying why, before anything is
// generated.
TEST(ReferenceOptionsProgram, RealShapeProblemIsForAGpuAudit) {
  testing::expect_exit_2_naming({
      {"audit --backend cpu --problems llama3-8b -q --out " + ::testing::TempDir() +
           "xl-never-audit3.h5",
       "is audited on a GPU backend only"},
  });
}

TEST(ReferenceOptionsProgram, GoldenOverTheBudgetWritesNothing) {
  const std::string dir = ::testing::TempDir() + "xl-golden-budget";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Ran r = testing::xentlab(
      "golden --dataset gaussian -N 8 -V 2000 -D 16 --memory-budget 64K --out " + dir + "/g.h5");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("of memory but the budget is 65536 bytes"), std::string::npos)
      << r.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "files left in " << dir;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace xentlab
