// The reference options of reference, golden and audit (cli/options/reference.hpp), run as a
// user runs them: the reference tier and the memory budget.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "harness/verify/golden.hpp"
#include "tests/cli/cli_support.hpp"

namespace xentlab::cli_tests {
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
      // A budget beyond the machine's memory is refused (1024 TiB: more than any machine runs
      // this suite): the kernel would stop the command before it reached it.
      {ref + "--memory-budget 1024T", "exceeds this machine's memory"},
      {"verify a.h5 b.h5 --memory-budget 1024T", "exceeds this machine's memory"},
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
  const Ran ok = testing::xentlab(ref + "--reference compensated --memory-budget 1GB");
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
      // The Llama-3-8B head (V = 128256, D = 4096) is refused before it is generated: its W alone
      // is 1.05 GB of bf16.
      {"golden --dataset llama3-8b -N 16 --memory-budget 1M --out " + ::testing::TempDir() +
           "xl-never-golden2.h5",
       "but the memory budget is 0.00 GiB (1048576 bytes, as given): refused before any work"},
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
  EXPECT_NE(r.output.find("memory budget is 0.00 GiB (65536 bytes, as given)"), std::string::npos)
      << r.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "files left in " << dir;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace xentlab::cli_tests
