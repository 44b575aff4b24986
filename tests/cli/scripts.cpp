// The scripts beside the program, run as a user runs them: examples/torch_candidate.py (its numpy
// candidates pass verify), tools/scripts/plot_audit.py (bad input, existing plots, --force; the
// audit's plots by default, and its note without the libraries) and tools/xentlab.sh (dry mode).
// Each skips where no Python it runs with (build/venv's, else python3) has the packages it imports.
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
  const std::string py = example_python();
  if (py.empty())
    GTEST_SKIP() << "neither " << XL_VENV_PYTHON
                 << " nor python3 imports h5py and numpy (tools/setup.sh --python build/venv)";
  const auto example = [&](const std::string& golden, const std::string& cand) {
    return testing::run_shell(shell_quote(py) + " " + shell_quote(XL_EXAMPLE_SCRIPT) + " " +
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

// Without h5py (python -S: no site-packages) the example says what is missing and which Python has
// it, in one line, not a traceback.
TEST_F(DatasetProgram, TheExampleWithoutH5pyNamesTheModuleAndThePythonThatHasIt) {
  const std::string py = example_python();
  if (py.empty()) GTEST_SKIP() << "no Python with h5py and numpy to run the example with";
  if (testing::run_shell(shell_quote(py) + " -S -c 'import h5py'").status == 0)
    GTEST_SKIP() << py << " -S still imports h5py (installed outside site-packages)";
  const Ran r = testing::run_shell(shell_quote(py) + " -S " + shell_quote(XL_EXAMPLE_SCRIPT) + " " +
                                   shell_quote(path("g.h5")) + " " + shell_quote(path("c.h5")));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_FALSE(contains(r.output, "Traceback")) << r.output;
  EXPECT_TRUE(contains(r.output, "h5py is not installed")) << r.output;
  EXPECT_TRUE(contains(r.output, "build/venv/bin/python")) << r.output;
}

// ---- tools/scripts/plot_audit.py ----------------------------------------------------------------

class PlotScript : public testing::TempFolderTest {
 protected:
  PlotScript() : TempFolderTest("cli-plots") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    // The interpreter the program draws with (CMake's XENTLAB_PLOT_PYTHON: tools/xentlab.sh gives
    // build/venv's).
    const Ran py = testing::run_shell(shell_quote(XL_PLOT_PYTHON) + " " +
                                      shell_quote(XL_PLOT_SCRIPT) + " --check-libraries");
    if (py.status != 0)
      GTEST_SKIP() << XL_PLOT_PYTHON << " with h5py, numpy and matplotlib is not importable here "
                   << "(tools/setup.sh --python installs them into build/venv): " << py.output;
  }
  static Ran plot(const std::string& args) {
    return testing::run_shell(shell_quote(XL_PLOT_PYTHON) + " " + shell_quote(XL_PLOT_SCRIPT) +
                              " " + args);
  }
  // A small audit results file (CPU emulation).
  void make_results() {
    const Ran a = xentlab(
        "audit --backend cpu -q --dataset odd-vocab -N 4 --strategies naive "
        "--recipes bf16/fp32/fp32/bf16,bf16/bf16/fp32/bf16 --no-plots -o " +
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

// Without --plots the audit draws its plots beside the results file (r.h5 → r-plots/), says where
// in one line, and redraws them with --force; --no-plots draws none, and excludes --plots.
TEST_F(PlotScript, AuditDrawsThePlotsByDefaultBesideTheResults) {
  const std::string audit =
      "audit --backend cpu -q --dataset odd-vocab -N 4 --strategies naive "
      "--recipes bf16/fp32/fp32/bf16,bf16/bf16/fp32/bf16 -o ";
  const Ran a = xentlab(audit + shell_quote(path("r.h5")));
  ASSERT_TRUE(a.status == 0 || a.status == 1) << a.output;
  EXPECT_TRUE(fs::exists(path("r-plots/verdict_heatmap.png"))) << a.output;
  EXPECT_TRUE(fs::exists(path("r-plots/error_vs_recipe_loss.png"))) << a.output;
  EXPECT_TRUE(contains(a.output, "\nplots: " + path("r-plots") + "/\n")) << a.output;
  EXPECT_FALSE(contains(a.output, ".png")) << a.output;  // the folder, not a list of files
  // An existing results file and its plots: --force rewrites both.
  const std::string png = path("r-plots/verdict_heatmap.png");
  std::ofstream(png) << "not overwritten";
  const Ran forced = xentlab(audit + shell_quote(path("r.h5")) + " --force");
  ASSERT_TRUE(forced.status == 0 || forced.status == 1) << forced.output;
  EXPECT_NE(slurp(png), "not overwritten");
  const Ran none = xentlab(audit + shell_quote(path("n.h5")) + " --no-plots");
  ASSERT_TRUE(none.status == 0 || none.status == 1) << none.output;
  EXPECT_FALSE(fs::exists(path("n-plots"))) << none.output;
  EXPECT_FALSE(contains(none.output, "plots:")) << none.output;
  testing::expect_exit_2_naming(
      {{audit + shell_quote(path("x.h5")) + " --no-plots --plots " + shell_quote(path("p")),
        "and --no-plots: give one of them"}});
  EXPECT_FALSE(fs::exists(path("x.h5")));
}

// Where the interpreter cannot import the plot libraries, the audit runs, writes its results and
// says in one line why it drew no plots (the interpreter's own reason); --plots asked for
// explicitly ends the command before the work (exit 3: an output that cannot be made).
TEST_F(DatasetProgram, AuditWithoutThePlotLibrariesSaysSoInOneLine) {
  // An interpreter that answers as plot_audit.py --check-libraries does where matplotlib is
  // missing.
  const std::string fake = path("python-without-matplotlib");
  std::ofstream(fake) << "#!/bin/sh\necho \"plot_audit.py: needs h5py, numpy and matplotlib (No "
                         "module named 'matplotlib')\" >&2\nexit 3\n";
  fs::permissions(fake, fs::perms::owner_all);
  const std::string audit = "XENTLAB_PLOT_PYTHON=" + shell_quote(fake) + " " + XENTLAB_BIN +
                            " audit --backend cpu -q --dataset odd-vocab -N 2 --strategies naive "
                            "--recipes bf16/fp32/fp32/bf16 -o ";
  const Ran a = testing::run_shell(audit + shell_quote(path("r.h5")));
  ASSERT_TRUE(a.status == 0 || a.status == 1) << a.output;
  EXPECT_TRUE(fs::exists(path("r.h5")));
  EXPECT_FALSE(fs::exists(path("r-plots")));
  const std::string note = "plots: not drawn: " + fake +
                           ": plot_audit.py: needs h5py, numpy and matplotlib (No module named "
                           "'matplotlib') (--no-plots leaves this note out)\n";
  EXPECT_TRUE(contains(a.output, "\n" + note)) << a.output;
  const Ran quiet = testing::run_shell(audit + shell_quote(path("q.h5")) + " --no-plots");
  EXPECT_FALSE(contains(quiet.output, "plots")) << quiet.output;
  const Ran asked =
      testing::run_shell(audit + shell_quote(path("e.h5")) + " --plots " + shell_quote(path("p")));
  EXPECT_EQ(asked.status, 3) << asked.output;
  EXPECT_TRUE(contains(asked.output, "--plots " + path("p") + ": the plots cannot be drawn: " +
                                         fake + ": plot_audit.py: needs h5py"))
      << asked.output;
  EXPECT_FALSE(fs::exists(path("e.h5")));
  // An interpreter that cannot be started is named as such.
  const Ran missing = testing::run_shell("XENTLAB_PLOT_PYTHON=" + shell_quote(path("no-python")) +
                                         " " + XENTLAB_BIN +
                                         " audit --backend cpu -q --dataset odd-vocab -N 2 "
                                         "--strategies naive --recipes bf16/fp32/fp32/bf16 -o " +
                                         shell_quote(path("m.h5")));
  EXPECT_TRUE(contains(missing.output, "plots: not drawn: cannot run " + path("no-python")))
      << missing.output;
}

// ---- tools/xentlab.sh ---------------------------------------------------------------------------

// The README's commands in their dry mode (XENTLAB_DRY_RUN=1: the commands printed, none run), with
// nvidia-smi replaced by one that lists a GPU or fails. `audit` builds the program alone and
// compiles the CUDA backend only where a GPU is listed; `test` builds everything with the backend
// wherever a toolkit is found (CI: no GPU, the CUDA code compiled); XENTLAB_CUDA forces it. Both
// fill build/venv (tools/setup.sh --python) and draw the plots with its Python.
TEST_F(DatasetProgram, TheReadmeCommandsBuildWhatTheyNeed) {
  const std::string build = path("b");
  fs::create_directories(path("gpu"));
  fs::create_directories(path("nogpu"));
  std::ofstream(path("gpu/nvidia-smi")) << "#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-0)'\n";
  std::ofstream(path("nogpu/nvidia-smi"))
      << "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the "
         "NVIDIA driver.'\nexit 9\n";
  for (const char* f : {"gpu/nvidia-smi", "nogpu/nvidia-smi"})
    fs::permissions(path(f), fs::perms::owner_all);
  const auto dry = [&](const std::string& env, const std::string& args) {
    return testing::run_shell("cd " + shell_quote(XL_SOURCE_DIR) + " && " + env +
                              " XENTLAB_DRY_RUN=1 JOBS=2 BUILD_DIR=" + shell_quote(build) +
                              " bash tools/xentlab.sh " + args);
  };
  const std::string setup = "+ bash tools/setup.sh --python " + build + "/venv\n";
  const std::string configure = "+ cmake -S . -B " + build + " -DCMAKE_BUILD_TYPE=Release";
  const std::string plots = " -DXENTLAB_PLOT_PYTHON=" + build + "/venv/bin/python";
  const std::string no_gpu = "PATH=" + shell_quote(path("nogpu")) + ":\"$PATH\"";
  const std::string gpu = "PATH=" + shell_quote(path("gpu")) + ":\"$PATH\"";

  const Ran audit = dry(no_gpu, "audit --force");
  EXPECT_EQ(audit.status, 0) << audit.output;
  EXPECT_EQ(audit.output, setup + configure + " -DXENTLAB_CUDA=OFF" + plots + "\n+ cmake --build " +
                              build + " -j 2 --target xentlab\n+ " + build +
                              "/cli/xentlab audit --force\n");
  const Ran on_gpu = dry(gpu, "audit");
  EXPECT_TRUE(contains(on_gpu.output, " -DXENTLAB_CUDA=AUTO ")) << on_gpu.output;
  const Ran forced = dry(no_gpu + " XENTLAB_CUDA=ON", "audit");
  EXPECT_TRUE(contains(forced.output, " -DXENTLAB_CUDA=ON ")) << forced.output;

  const Ran test = dry(no_gpu, "test");
  EXPECT_EQ(test.status, 0) << test.output;
  EXPECT_EQ(test.output, setup + configure + " -DXENTLAB_CUDA=AUTO" + plots +
                             " -DPython_EXECUTABLE=" + build +
                             "/venv/bin/python\n+ cmake --build " + build + " -j 2\n");
  const Ran bad = dry("XENTLAB_CUDA=maybe", "audit");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, "XENTLAB_CUDA must be ON, OFF or AUTO, got 'maybe'"))
      << bad.output;
  EXPECT_FALSE(fs::exists(build));
}

}  // namespace
}  // namespace xentlab::cli_tests
