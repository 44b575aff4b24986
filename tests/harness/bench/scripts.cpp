// The bench's Python scripts, run as a user runs them, without a GPU:
// harness/bench/torch_baseline.py (its options and output files checked before PyTorch is looked
// for, exit 2 naming the problem; exit 4 without PyTorch; its CSV rows). Each skips where python3
// is missing. Part of test_bench.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/program.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab::bench::bench_tests {
namespace {
namespace fs = std::filesystem;
using testing::Ran;
using testing::shell_quote;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class TorchBaseline : public testing::TempFolderTest {
 protected:
  TorchBaseline() : TempFolderTest("bench-torch-baseline") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    if (testing::run_shell("python3 -c pass").status != 0) GTEST_SKIP() << "no python3 here";
  }
  static std::string script() {
    return std::string(XL_SOURCE_DIR) + "/harness/bench/torch_baseline.py";
  }
  static Ran baseline(const std::string& args) {
    return testing::run_shell("python3 " + shell_quote(script()) + " " + args);
  }
  static bool torch_present() {
    return testing::run_shell("python3 -c 'import torch'").status == 0;
  }
};

TEST_F(TorchBaseline, HelpWorksWithoutPyTorch) {
  const Ran h = baseline("--help");
  EXPECT_EQ(h.status, 0) << h.output;
  EXPECT_TRUE(contains(h.output, "--variants")) << h.output;
}

// Options and output files that would waste the measurement (nothing to run, a CSV that cannot
// take the rows once measured) are refused before PyTorch is looked for: exit 2 naming them.
TEST_F(TorchBaseline, BadVariantsAndOutputsExit2BeforeMeasuring) {
  fs::create_directories(path("folder"));
  std::ofstream(path("foreign.csv")) << "name,score\nalice,3\n";
  std::ofstream(path("cut.csv")) << "date_utc,gpu,comm";  // a header cut short
  const std::string small = "--tokens 8 --vocab 16 --hidden 4 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {small + "--variants ''", "--variants names no variant"},
      {small + "--variants ,", "--variants names no variant"},
      {small + "--variants upcast,flash", "unknown variant 'flash'"},
      {small + "--csv " + shell_quote(path("folder")), "--csv: " + path("folder") + " is a folder"},
      {small + "--csv " + shell_quote(path("nowhere/b.csv")), "does not exist"},
      {small + "--csv " + shell_quote(path("foreign.csv")),
       "has a header without the columns date_utc, gpu, command"},
      {small + "--csv " + shell_quote(path("cut.csv")), "without the columns command, preset"},
      {small + "--json " + shell_quote(path("folder")), "--json"},
      {"--sizes 8x16", "--sizes: '8x16' is not NxVxD"},
      {"--sizes 8x16x4,8x0x4", "--sizes: '8x0x4' is not NxVxD"},
      {"--tokens 0 --vocab 16 --hidden 4", "must be at least 1"},
  };
  for (const auto& [args, message] : cases) {
    const Ran r = baseline(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, message)) << args << "\n" << r.output;
  }
  EXPECT_EQ(slurp(path("foreign.csv")), "name,score\nalice,3\n");
  EXPECT_FALSE(fs::exists(path("nowhere")));
}

// Valid options without PyTorch: the script says PyTorch is missing, exit 4, nothing written.
TEST_F(TorchBaseline, WithoutPyTorchExit4) {
  if (torch_present()) GTEST_SKIP() << "python3 imports torch here";
  const Ran r =
      baseline("--tokens 8 --vocab 16 --hidden 4 --variants 'upcast, upcast,liger' --csv " +
               shell_quote(path("b.csv")));
  EXPECT_EQ(r.status, 4) << r.output;
  EXPECT_TRUE(contains(r.output, "PyTorch is not installed here")) << r.output;
  EXPECT_FALSE(fs::exists(path("b.csv")));
}

// A new CSV's header is every column the script writes, whatever the first row's status: a first
// row that did not run (a peer's package missing, an out-of-memory) has no timings, and the rows
// after it keep theirs.
TEST_F(TorchBaseline, ANewCsvHasEveryColumnWhateverTheFirstRow) {
  const std::string code =
      "import sys; sys.path.insert(0, " +
      shell_quote(std::string(XL_SOURCE_DIR) + "/harness/bench") +
      "); import torch_baseline as t; "
      "t.append_csv(sys.argv[1], ["
      "dict(date_utc='d', gpu='g', strategy='liger', status='not-supported', message='missing'), "
      "dict(date_utc='d', gpu='g', strategy='torch:upcast', status='ok', repeats=3, "
      "median_ms=12.5, min_ms=12.0, max_ms=13.0, tflops=7.0, peak_extra_bytes=1024)])";
  // The code goes through the shell in double quotes: its single quotes stay.
  const Ran r = testing::run_shell("python3 -c \"" + code + "\" " + shell_quote(path("n.csv")));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string text = slurp(path("n.csv"));
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "date_utc,gpu,command,preset,N,V,D,strategy,recipe,status,repeats,warmup,"
            "input_copies,median_ms,min_ms,max_ms,tflops,peak_extra_bytes,message")
      << text;
  EXPECT_TRUE(contains(text, "\nd,g,,,,,,torch:upcast,,ok,3,,,12.5,12.0,13.0,7.0,1024,\n")) << text;
  EXPECT_TRUE(contains(text, "\nd,g,,,,,,liger,,not-supported,,,,,,,,,missing\n")) << text;
}

}  // namespace
}  // namespace xentlab::bench::bench_tests
