// The scripts beside the program, run as a user runs them: examples/torch_candidate.py (its numpy
// candidates pass verify) and tools/scripts/plot_audit.py (bad input, existing plots, --force).
// Each skips where python3 lacks the packages it imports.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/cli/cli_support.hpp"

namespace xentlab::cli_tests {
namespace {

// ---- examples/torch_candidate.py ---------------------------------------------------------------

// examples/torch_candidate.py applies the golden file's upstream gradient and normaliser
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
}  // namespace xentlab::cli_tests
