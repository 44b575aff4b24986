// `xentlab verify` and `xentlab candidate`, run as a user runs them: the lab's strategies as
// candidates, the baseline backend, verify's number options and printed policy, --junit on a
// re-run, --require, --check and the differential check's options, --explain; candidate's
// refusals.
#include "harness/verify/verify.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "datasets/catalog.hpp"
#include "gpu/registry.hpp"
#include "harness/verify/golden.hpp"
#include "numerics/dtype.hpp"
#include "tests/cli/cli_support.hpp"

namespace xentlab::cli_tests {
namespace {

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
    const Ran made = xentlab("candidate " + g + " --out " + out + " --strategy " + st +
                             " --recipe fp32/fp32/fp32/fp32");
    ASSERT_EQ(made.status, 0) << made.output;
    EXPECT_NE(made.output.find("cpu-emulation " + std::string(st)), std::string::npos)
        << made.output;
    const Ran v = xentlab("verify " + g + " " + out + " --policy fp32");
    EXPECT_EQ(v.status, 0) << st << "\n" << v.output;
  }
  // The output as a second positional argument, the spelling of earlier versions, still works.
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
// option is refused naming why, exit 4 as every command without its CUDA device, never silently
// replaced by the emulation).
TEST_F(VerifyProgram, BaselineBackendNamesItsStrategiesOrIsRefused) {
  const Ran cpu = xentlab(verify("exact.h5") + "--policy fp32 --baseline-backend cpu");
  EXPECT_EQ(cpu.status, 0) << cpu.output;
  EXPECT_TRUE(contains(cpu.output, "(cpu-emulation); per output the largest error")) << cpu.output;
  EXPECT_FALSE(contains(cpu.output, "(cuda)")) << cpu.output;
  const Ran cuda = xentlab(verify("exact.h5") + "--policy fp32 --baseline-backend cuda");
  if (cuda.status == 4) {  // no CUDA backend in this build, or no GPU: the reason is named
    EXPECT_TRUE(contains(cuda.output, "--baseline-backend cuda: no CUDA device: ")) << cuda.output;
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
      {v + "--policy fp32 --strictness audit",
       "unknown strictness 'audit' (expected default, strict or lenient"},
      {v + "--baseline-rows -1", "--baseline-rows must be ≥ 0 (0: every token row), got -1"},
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
  // Without --require every output the golden file can check is expected: not judged (exit 5).
  const Ran plain = xentlab(verify("loss.h5"));
  EXPECT_EQ(plain.status, 5) << plain.output;
  EXPECT_TRUE(contains(plain.output, "NOT JUDGED")) << plain.output;
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
      // The output is named once: --out, or (as earlier versions took it) a second argument.
      {"candidate " + g + run, "no candidate file named: give --out FILE"},
      {"candidate " + g + out + " --out " + shell_quote(path("y.h5")) + run,
       "the candidate file is named twice"},
      // The golden file is the input: never the output, even with --force.
      {"candidate " + g + " " + g + run + " --force", "is the golden file"},
      // A chunk size for a strategy that does not chunk (the registry's trait) would be ignored.
      {"candidate " + g + out + run + " --chunk-tokens 4",
       "--chunk-tokens 4: naive does not work through the tokens in chunks"},
  });
  EXPECT_FALSE(fs::exists(path("x.h5")));
  EXPECT_FALSE(fs::exists(path("y.h5")));
}

// `xentlab candidate --strategy vocab_parallel --ranks P --local-strategy L`: every local part
// over 3 ranks of the embedded model's 512-row vocabulary (shards 171, 171, 170), in fp32, passes
// verify's fp32 policy and names its ranks and local part. --ranks and --local-strategy are checked
// as the audit's: P ≥ 1, P ≤ V (after the golden file is read), a number, a local part the
// backend composes, and only with a strategy that shards the vocabulary; each exits 2 naming the
// cause, writing nothing.
TEST_F(VerifyProgram, CandidateRunsVocabParallelWithItsRanksAndLocalPart) {
  const std::string g = shell_quote(path("g.h5"));
  for (const char* local : {"naive", "chunked", "checkpointed", "fused"}) {
    const std::string out = shell_quote(path(std::string("vp-") + local + ".h5"));
    const Ran made = xentlab("candidate " + g + " " + out +
                             " --strategy vocab_parallel --recipe fp32/fp32/fp32/fp32 --ranks 3 "
                             "--local-strategy " +
                             local);
    ASSERT_EQ(made.status, 0) << made.output;
    EXPECT_TRUE(contains(made.output, std::string("vocab_parallel fp32/fp32/fp32/fp32 ranks=3 "
                                                  "local=") +
                                          local))
        << made.output;
    const Ran v = xentlab("verify " + g + " " + out + " --policy fp32");
    EXPECT_EQ(v.status, 0) << local << "\n" << v.output;
  }
  const std::string out = " " + shell_quote(path("x.h5"));
  const std::string vp = " --strategy vocab_parallel --recipe fp32/fp32/fp32/fp32";
  expect_exit_2_naming({
      {"candidate " + g + out + vp + " --ranks 0",
       "--ranks: vocabulary-parallel ranks must be at least 1 (got 0)"},
      {"candidate " + g + out + vp + " --ranks -2",
       "--ranks: vocabulary-parallel ranks must be at least 1 (got -2)"},
      {"candidate " + g + out + vp + " --ranks 513",
       "--ranks 513: vocabulary-parallel ranks (513) exceed the vocabulary (512 rows)"},
      {"candidate " + g + out + vp + " --ranks three", "--ranks"},
      {"candidate " + g + out + vp + " --ranks 2.5", "--ranks"},
      {"candidate " + g + out + vp + " --local-strategy liger",
       "--local-strategy liger: vocab_parallel (cpu-emulation): 'liger' is not a local part it "
       "composes (a rank runs one of naive, chunked, checkpointed, fused over its shard)"},
      {"candidate " + g + out + vp + " --local-strategy ''", "--local-strategy"},
      {"candidate " + g + out + " --strategy chunked --recipe fp32/fp32/fp32/fp32 --ranks 2",
       "--ranks 2 applies to the strategies that shard the vocabulary (vocab_parallel), and "
       "--strategy is chunked"},
      {"candidate " + g + out +
           " --strategy fused --recipe fp32/fp32/fp32/fp32 "
           "--local-strategy naive",
       "--local-strategy naive applies to the strategies that shard the vocabulary"},
  });
  EXPECT_FALSE(fs::exists(path("x.h5")));
}

// `xentlab candidate --strategy vocab_chunked --vocab-splits P`: 4 splits of the embedded model's
// 512-row vocabulary, in fp32, pass verify's fp32 policy, the implementation naming its splits;
// without the option the golden problem takes one split. --vocab-splits: ≥ 0, ≤ V, and only with a
// strategy that splits the vocabulary; each exits 2 naming the cause, writing nothing.
TEST_F(VerifyProgram, CandidateRunsVocabChunkedWithItsSplits) {
  const std::string g = shell_quote(path("g.h5"));
  const std::string vc = " --strategy vocab_chunked --recipe fp32/fp32/fp32/fp32";
  for (const auto& [option, named] : std::vector<std::pair<std::string, std::string>>{
           {" --vocab-splits 4", "vocab_splits=4"}, {"", "vocab_splits=1"}}) {
    const std::string out = shell_quote(path("vc.h5"));
    const Ran made = xentlab("candidate " + g + " " + out + vc + option + " --force");
    ASSERT_EQ(made.status, 0) << made.output;
    EXPECT_TRUE(contains(made.output, "vocab_chunked fp32/fp32/fp32/fp32 " + named)) << made.output;
    const Ran v = xentlab("verify " + g + " " + out + " --policy fp32");
    EXPECT_EQ(v.status, 0) << option << "\n" << v.output;
  }
  const std::string out = " " + shell_quote(path("x.h5"));
  expect_exit_2_naming({
      {"candidate " + g + out + vc + " --vocab-splits -1",
       "--vocab-splits must be ≥ 0 (0: from the memory budget), got -1"},
      {"candidate " + g + out + vc + " --vocab-splits 513",
       "vocabulary splits (513) exceed the vocabulary (512 rows)"},
      {"candidate " + g + out + " --strategy naive --recipe fp32/fp32/fp32/fp32 --vocab-splits 2",
       "--vocab-splits 2: naive does not split the vocabulary (vocab_chunked do)"},
  });
  EXPECT_FALSE(fs::exists(path("x.h5")));
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
  const Ran bf16 =
      xentlab(verify("grads.h5") + "--policy bf16 --check differential --require dH,dW");
  EXPECT_EQ(bf16.status, 0) << bf16.output;
  EXPECT_TRUE(contains(bf16.output, "by the differential check alone (--check differential)"))
      << bf16.output;
  const std::string xml = path("v.xml");
  const Ran fp32 =
      xentlab(verify("grads.h5") + "--policy fp32 --check differential --require dH,dW --junit " +
              shell_quote(xml));
  EXPECT_EQ(fp32.status, 1) << fp32.output;
  EXPECT_TRUE(contains(fp32.output, "differential: normwise relative error")) << fp32.output;
  const std::string report = slurp(xml);
  EXPECT_TRUE(contains(report, "<property name=\"baseline\" value=\"recipe fp32/fp32/fp32/fp32"))
      << report;
  EXPECT_TRUE(contains(report, "<property name=\"baseline_dH\" value=\"normwise ")) << report;
  EXPECT_TRUE(contains(report, "differential: incorrect")) << report;
}

// examples/torch_candidate.py --backend numpy: float32 throughout behaves like the all-fp32
// recipe and like no other of the grid; its stand-in of PyTorch's bf16 path (bf16 logits and
// gradients) behaves like fp32/bf16/fp32/bf16 first, and fails a policy that declares fp32 logits
// (the classic downgrade) on the differential check.
TEST_F(VerifyProgram, ExplainClassifiesTheNumpyExample) {
  const std::string py = example_python();
  if (py.empty())
    GTEST_SKIP() << "neither " << XL_VENV_PYTHON
                 << " nor python3 imports h5py and numpy (tools/setup.sh --python build/venv)";
  const Ran made = testing::run_shell(shell_quote(py) + " " + shell_quote(XL_EXAMPLE_SCRIPT) + " " +
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
      shell_quote(py) + " " + shell_quote(XL_EXAMPLE_SCRIPT) + " " + shell_quote(path("g.h5")) +
      " " + shell_quote(path("numpy-bf16.h5")) + " --backend numpy --dtype bf16");
  ASSERT_EQ(made_bf16.status, 0) << made_bf16.output;
  const Ran b = explain(verify("numpy-bf16.h5") + "--policy fp32/bf16/fp32/bf16 --explain");
  EXPECT_EQ(b.status, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "behaves like: fp32/bf16/fp32/bf16,")) << b.output;
  const Ran down =
      xentlab(verify("numpy-bf16.h5") + "--policy fp32/fp32/fp32/bf16 --check differential");
  EXPECT_EQ(down.status, 1) << down.output;
  EXPECT_TRUE(contains(down.output, "dH failed: differential: normwise relative error"))
      << down.output;
}

}  // namespace
}  // namespace xentlab::cli_tests
