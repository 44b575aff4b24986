// The memory budget, as a user meets it. The audit: a budget below what a problem needs at once
// makes a given-logits problem audited in blocks of token rows, whose measured peak (the process's
// maximum resident set, wait4) stays within the budget plus the fixed process baseline and below
// the audit at once; a budget below even one block is refused before any work (exit 2, naming the
// estimate, its terms and the budget). golden, verify and candidate: a budget below their
// estimate is refused before any work (golden before it generates the problem), exit 2, no file
// written; golden's measured peak stays within the estimate it prints plus the process baseline.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "tests/cli/cli_support.hpp"

namespace xentlab::cli_tests {
namespace {

struct Measured {
  int status = -1;
  double peak_bytes = 0;  ///< maximum resident set of the program (ru_maxrss)
  std::string output;
};

// Runs the xentlab program with `args` (no shell: the peak is the program's own).
Measured run_measured(const std::vector<std::string>& args, const std::string& log) {
  Measured m;
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv{const_cast<char*>(XENTLAB_BIN)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(XENTLAB_BIN, argv.data());
    ::_exit(127);
  }
  int st = 0;
  struct rusage ru {};
  ::wait4(pid, &st, 0, &ru);
  m.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  m.peak_bytes = static_cast<double>(ru.ru_maxrss) * 1024.0;
  m.output = slurp(log);
  return m;
}

class AuditMemory : public DatasetProgram {};

// The process baseline: the program's own peak auditing a problem of a few kilobytes (its code,
// libraries, OpenMP and BLAS threads), measured, not assumed (15 MB on the 2-core machine). The
// audit's estimate counts what the process holds (its resident memory when it plans), so a blocked
// audit stays within the budget itself.
TEST_F(AuditMemory, BlocksStayWithinTheBudgetAndBelowTheWholeAudit) {
  // The catalog's given-logits problem at 256 rows × V = 32000 (fp32 logits: 33 MB; its
  // reference's dz and bound, 131 MB at once).
  const std::vector<std::string> common{
      "audit", "--dataset",    "offset", "--tokens",    "256",  "--rows", "0",      "--recipes",
      "fp32",  "--strategies", "naive",  "--reduction", "none", "-q",     "--force"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const Measured tiny =
      run_measured({"audit", "--dataset", "offset", "--tokens", "8", "--vocab", "64", "--rows", "0",
                    "--recipes", "fp32", "--strategies", "naive", "-q", "-o", path("tiny.h5")},
                   path("tiny.log"));
  ASSERT_EQ(tiny.status, 0) << tiny.output;
  const double baseline = tiny.peak_bytes;
  const Measured whole = run_measured(with({"-o", path("whole.h5")}), path("whole.log"));
  ASSERT_EQ(whole.status, 0) << whole.output;
  // The program's own resident memory (a build with CUDA maps cuBLAS: about 230 MB) is counted.
  const double budget = 450.0 * (1 << 20);
  const Measured blocked = run_measured(
      with({"--memory-budget", "450MiB", "-o", path("blocked.h5")}), path("blocked.log"));
  ASSERT_EQ(blocked.status, 0) << blocked.output;
  EXPECT_TRUE(contains(blocked.output, "in blocks of")) << blocked.output;
  EXPECT_LE(blocked.peak_bytes, budget)
      << "peak " << blocked.peak_bytes << " budget " << budget << " baseline " << baseline;
  EXPECT_LT(blocked.peak_bytes, whole.peak_bytes);
  // Below one block's estimate: refused before any work, exit 2, naming estimate and budget.
  const Measured refused = run_measured(
      with({"--memory-budget", "30MiB", "-o", path("refused.h5")}), path("refused.log"));
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_TRUE(contains(refused.output, "would hold an estimated")) << refused.output;
  EXPECT_TRUE(contains(refused.output, "memory budget is 0.03 GiB (31457280 bytes, as given)"))
      << refused.output;
  EXPECT_FALSE(fs::exists(path("refused.h5")));
}

// The figure "(N bytes)" after "estimated " in a command's output; -1 when there is none.
double estimated_bytes(const std::string& text) {
  const auto at = text.find("estimated ");
  if (at == std::string::npos) return -1;
  const auto open = text.find('(', at), close = text.find(" bytes)", at);
  if (open == std::string::npos || close == std::string::npos || close < open) return -1;
  return std::strtod(text.substr(open + 1, close - open - 1).c_str(), nullptr);
}

// A linear head's reference was counted as a flat 1 GiB, so any audit of one was refused under
// --memory-budget 1G however small; it is counted as the most it can hold (its BLAS plan's
// largest blocks): a small head fits 640 MiB, and the measured peak stays within the budget.
TEST_F(AuditMemory, SmallLinearHeadsFitASmallBudget) {
  const Measured m =
      run_measured({"audit", "--backend", "cpu", "--problems", "calibrated", "--recipes",
                    "bf16/fp32/fp32/bf16", "--strategies", "naive", "--memory-budget", "640MiB",
                    "-q", "--no-plots", "-o", path("small.h5")},
                   path("small.log"));
  EXPECT_EQ(m.status, 0) << m.output;
  EXPECT_LE(m.peak_bytes, 640.0 * (1 << 20)) << m.output;
}

class CommandMemory : public DatasetProgram {};

// The brief's case: the Llama-3 8B head at 256 tokens (W alone 1.05 GB of bf16) against 1 GiB is
// refused from its shape, before the problem is generated (that took 21 s and more): exit 2, the
// estimate at least the problem's own bytes, the peak far below them, no file.
TEST_F(CommandMemory, GoldenIsRefusedBeforeItGeneratesTheProblem) {
  const Measured m =
      run_measured({"golden", "--dataset", "llama3-8b", "--tokens", "256", "--vocab-rows", "8192",
                    "--memory-budget", "1GiB", "-o", path("llama.h5")},
                   path("llama.log"));
  EXPECT_EQ(m.status, 2) << m.output;
  EXPECT_TRUE(contains(m.output, "would hold an estimated")) << m.output;
  EXPECT_TRUE(contains(m.output, "memory budget is 1.00 GiB (1073741824 bytes, as given)"))
      << m.output;
  EXPECT_FALSE(contains(m.output, "problem  llama3-8b")) << "generated first: " << m.output;
  const double problem = 2.0 * (128256.0 * 4096 + 256.0 * 4096) + 8.0 * 256;  // bf16 W, H; targets
  EXPECT_GE(estimated_bytes(m.output), problem) << m.output;
  EXPECT_LT(m.peak_bytes, 0.25 * problem);
  EXPECT_FALSE(fs::exists(path("llama.h5")));
}

// golden on the catalog's given-logits problem (256 × 32000 fp32 logits, dz and its bound): the
// measured peak is within the estimate golden prints plus the process baseline (a tiny golden's
// peak, measured).
TEST_F(CommandMemory, GoldenStaysWithinItsEstimate) {
  const Measured tiny = run_measured(
      {"golden", "--dataset", "offset", "--tokens", "8", "--vocab", "64", "-o", path("tiny.h5")},
      path("tiny.log"));
  ASSERT_EQ(tiny.status, 0) << tiny.output;
  const Measured m =
      run_measured({"golden", "--dataset", "offset", "--tokens", "256", "-o", path("offset.h5")},
                   path("offset.log"));
  ASSERT_EQ(m.status, 0) << m.output;
  const double estimate = estimated_bytes(m.output);
  ASSERT_GT(estimate, 0) << m.output;
  EXPECT_GE(estimate, 2.0 * 8 * 256 * 32000) << "dz and its bound as doubles: " << m.output;
  EXPECT_LE(m.peak_bytes, estimate + tiny.peak_bytes)
      << "peak " << m.peak_bytes << " estimate " << estimate << " baseline " << tiny.peak_bytes;
}

// verify and candidate: a budget below reading the golden file is refused before it is read; a
// budget of exactly that (the figure the refusal names) is refused at the next estimate, before
// the candidate is judged or the strategy runs: exit 2 each time, no candidate or JUnit file.
TEST_F(CommandMemory, VerifyAndCandidateAreRefusedBeforeAnyWork) {
  const std::string g = path("g.h5"), c = path("c.h5");
  ASSERT_EQ(
      run_measured({"golden", "--dataset", "offset", "--tokens", "64", "--vocab", "4096", "-o", g},
                   path("g.log"))
          .status,
      0);
  ASSERT_EQ(
      run_measured({"candidate", g, c, "--strategy", "naive", "--recipe", "fp32"}, path("c.log"))
          .status,
      0);
  const Measured read = run_measured(
      {"verify", g, c, "--memory-budget", "64KiB", "--junit", path("j.xml")}, path("v1.log"));
  EXPECT_EQ(read.status, 2) << read.output;
  EXPECT_TRUE(contains(read.output, "verify of " + g + " would hold an estimated")) << read.output;
  const double golden = estimated_bytes(read.output);
  // The logits (fp32) and the reference's dz and its bound (doubles) at least.
  EXPECT_GE(golden, 64.0 * 4096 * (4 + 8 + 8)) << read.output;
  const std::string just = fmt::format("{:.0f}", golden);
  const Measured verify = run_measured(
      {"verify", g, c, "--memory-budget", just, "--junit", path("j.xml")}, path("v2.log"));
  EXPECT_EQ(verify.status, 2) << verify.output;
  EXPECT_TRUE(contains(verify.output, "verify of " + c + " against " + g)) << verify.output;
  EXPECT_GT(estimated_bytes(verify.output), golden) << verify.output;
  EXPECT_FALSE(contains(verify.output, "PASSED")) << verify.output;
  EXPECT_FALSE(fs::exists(path("j.xml")));
  for (const std::string& budget : {std::string("64KiB"), just}) {
    const Measured cand = run_measured({"candidate", g, path("c2.h5"), "--strategy", "naive",
                                        "--recipe", "fp32", "--memory-budget", budget},
                                       path("c2.log"));
    EXPECT_EQ(cand.status, 2) << cand.output;
    EXPECT_TRUE(contains(cand.output, "would hold an estimated")) << cand.output;
    EXPECT_TRUE(contains(cand.output, budget == just ? "candidate naive fp32/fp32/fp32/fp32 on"
                                                     : "candidate of " + g))
        << cand.output;
    EXPECT_FALSE(fs::exists(path("c2.h5")));
  }
}

}  // namespace
}  // namespace xentlab::cli_tests
