// The bench's Python scripts, run as a user runs them, without a GPU:
// harness/bench/torch_baseline.py (its options and output files checked before PyTorch is looked
// for, exit 2 naming the problem; exit 4 without PyTorch; its CSV rows) and
// tools/scripts/results_table.py (the strategy table of one card from a strategies CSV). Each skips
// where python3 is missing. Part of test_bench.
#include <gtest/gtest.h>
#include <unistd.h>

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
      // A digit to str.isdigit() that int() refuses: was a ValueError traceback.
      {"--sizes '\u00b2x16x4'", "is not NxVxD"},
      {"--tokens 0 --vocab 16 --hidden 4", "must be at least 1"},
      // Two ways of naming the shapes: one was dropped without a word (the preset over the
      // explicit shape, the explicit shape over --sizes).
      {"--preset llama3-8b-128k --tokens 8", "--preset and --tokens/--vocab/--hidden name the"},
      {"--sizes 8x16x4 " + small, "--sizes and --tokens/--vocab/--hidden name the shapes twice"},
      {"--sizes 8x16x4 --preset llama3-8b-128k", "--sizes and --preset name the shapes twice"},
      // No timed run: was statistics.median([]) raising after the first variant's warm-up.
      {small + "--repeats 0", "--repeats 0: at least 1 timed run"},
      {small + "--repeats -2", "--repeats -2: at least 1 timed run"},
      {small + "--warmup -1", "--warmup -1: at least 0 untimed runs"},
  };
  for (const auto& [args, message] : cases) {
    const Ran r = baseline(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, message)) << args << "\n" << r.output;
  }
  EXPECT_EQ(slurp(path("foreign.csv")), "name,score\nalice,3\n");
  EXPECT_FALSE(fs::exists(path("nowhere")));
}

// A CSV the rows could not be appended to once measured (a folder or a file without write
// permission) is refused before PyTorch is looked for, as the other output problems are; it was
// found only by append_csv() after every variant had run. Skips where permissions do not bind
// (root).
TEST_F(TorchBaseline, UnwritableCsvExit2BeforeMeasuring) {
  fs::create_directories(path("shut"));
  fs::permissions(path("shut"), fs::perms::owner_read | fs::perms::owner_exec);
  std::ofstream(path("kept.csv")).close();
  fs::permissions(path("kept.csv"), fs::perms::owner_read);
  const bool binds = ::access(path("shut").c_str(), W_OK) != 0;
  const std::string small = "--tokens 8 --vocab 16 --hidden 4 ";
  const Ran in_shut = baseline(small + "--csv " + shell_quote(path("shut/b.csv")));
  const Ran kept = baseline(small + "--csv " + shell_quote(path("kept.csv")));
  fs::permissions(path("shut"), fs::perms::owner_all);
  fs::permissions(path("kept.csv"), fs::perms::owner_read | fs::perms::owner_write);
  if (!binds) GTEST_SKIP() << "file permissions do not bind this user (root)";
  EXPECT_EQ(in_shut.status, 2) << in_shut.output;
  EXPECT_TRUE(contains(in_shut.output, "--csv: the folder " + path("shut") + " is not writable"))
      << in_shut.output;
  EXPECT_EQ(kept.status, 2) << kept.output;
  EXPECT_TRUE(contains(kept.output, "is not writable")) << kept.output;
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

// ---- tools/scripts/results_table.py -------------------------------------------------------------

class ResultsTable : public testing::TempFolderTest {
 protected:
  ResultsTable() : TempFolderTest("bench-results-table") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    if (testing::run_shell("python3 -c pass").status != 0) GTEST_SKIP() << "no python3 here";
  }
  // The table of a strategies CSV made of these rows (under the file's header).
  Ran table(const std::vector<std::string>& rows) const {
    std::ofstream out(path("s.csv"));
    out << "date,time_utc,commit,gpu,driver,tool,command,N,V,D,recipe,strategy,ms,"
           "peak_extra_bytes,peak_extra_gib,note\n";
    for (const std::string& r : rows) out << r << "\n";
    out.close();
    return testing::run_shell(
        "python3 " + shell_quote(std::string(XL_SOURCE_DIR) + "/tools/scripts/results_table.py") +
        " --results " + shell_quote(path("s.csv")));
  }
  // A day of the rows' month (the date pieced together: no dated prose in the sources).
  static std::string day(const std::string& dd) { return "2026-12-" + dd; }
  static std::string row(const std::string& dd, const std::string& time, const std::string& gpu,
                         const std::string& tool, const std::string& N, const std::string& recipe,
                         const std::string& strategy, const std::string& ms) {
    return day(dd) + "," + time + ",abc1234," + gpu + ",580," + tool + ",cmd," + N +
           ",128256,4096," + recipe + "," + strategy + "," + ms + ",1024,,";
  }
  static constexpr const char* kRecipe = "bf16/bf16/fp32/fp32";
};

// One card's rows: its table, the peers' times against naive's.
TEST_F(ResultsTable, OneCard) {
  const Ran r =
      table({row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "40.00"),
             row("01", "10:05", "H100", "torch_baseline", "8192", "", "pytorch-bf16", "50.00")});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "on H100 (driver 580), commit abc1234")) << r.output;
  EXPECT_TRUE(contains(r.output, "| naive | CPU, CUDA | every recipe | yes | 40.00 ms |"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "| 50.00 ms (0.80×) |")) << r.output;
}

// A bench row's × is against naive of its own run (same command and start), not a later naive;
// a bench row whose run timed no naive is compared with the latest naive and marked †.
TEST_F(ResultsTable, BenchRatiosAreWithinOneRun) {
  std::string other =
      row("01", "11:00", "H100", "xentlab-bench", "8192", kRecipe, "chunked", "50.00");
  other.replace(other.find(",cmd,"), 5, ",cmd2,");
  const Ran r = table(
      {row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "40.00"),
       row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "fused", "80.00"),
       row("01", "12:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "20.00"), other});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| 80.00 ms (0.50×) |")) << r.output;   // its run's 40 ms
  EXPECT_TRUE(contains(r.output, "| 50.00 ms (0.40×†) |")) << r.output;  // the latest 20 ms
}

// The same command started in the same minute on two cards is two runs: the table's card's bench
// row is compared with its own card's naive, never the other card's.
TEST_F(ResultsTable, SameRunIsOneCard) {
  const Ran r =
      table({row("01", "10:00", "H200", "xentlab-bench", "8192", kRecipe, "naive", "40.00"),
             row("01", "10:00", "H200", "xentlab-bench", "8192", kRecipe, "fused", "80.00"),
             row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "20.00")});
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_TRUE(contains(r.output, "Measured on H200 (driver 580)")) << r.output;
  EXPECT_TRUE(contains(r.output, "| 80.00 ms (0.50×) |")) << r.output;  // H200's 40 ms
}

// N is matched as a number, as the table's columns take it: a naive row whose N field reads
// " 8192" (which the CSV's number check accepts) is the same run's naive, no †.
TEST_F(ResultsTable, SameRunNaiveMatchesNAsANumber) {
  std::string naive =
      row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "40.00");
  naive.replace(naive.find(",8192,"), 6, ", 8192,");
  const Ran r =
      table({naive, row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "fused", "80.00"),
             row("01", "12:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "20.00")});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| 80.00 ms (0.50×) |")) << r.output;  // its run's 40 ms, no †
}

// Rows of two cards: the table is the card of the newest bench row it shows (recipe
// bf16/bf16/fp32/fp32 at N = 8192 or 131072), with none of the other card's rows, not even a
// newer PyTorch one; a newer bench row of another recipe and size does not change the card.
TEST_F(ResultsTable, TwoCardsAreNotMixed) {
  const Ran r = table({
      row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "40.00"),
      row("01", "10:05", "H100", "torch_baseline", "8192", "", "pytorch-bf16", "50.00"),
      row("02", "10:00", "H200", "xentlab-bench", "8192", kRecipe, "naive", "30.00"),
      row("02", "10:00", "H200", "xentlab-bench", "8192", kRecipe, "chunked", "60.00"),
      row("03", "10:00", "H100", "torch_baseline", "8192", "", "pytorch-bf16", "45.00"),
      row("04", "10:00", "H100", "xentlab-bench", "64", "fp32/fp32/fp32/fp32", "naive", "1.00"),
  });
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "Measured on H200 (driver 580)")) << r.output;
  EXPECT_TRUE(contains(r.output, "| 30.00 ms |")) << r.output;
  EXPECT_TRUE(contains(r.output, "| 60.00 ms (0.50×) |")) << r.output;
  EXPECT_TRUE(contains(r.output, "| PyTorch, bf16 throughout | torch | — | — | not measured |"))
      << r.output;
  for (const char* other : {"H100", "40.00", "45.00", "50.00", "1.00 ms"})
    EXPECT_FALSE(contains(r.output, other)) << other << "\n" << r.output;
}

// A peer's deterministic cell is torch_baseline.py's repeat-run comparison where its row has one
// ("no" when any size differed; one finding at both sizes said once), else what its source says.
TEST_F(ResultsTable, PeersDeterminismIsMeasuredWhereCompared) {
  const auto peer = [&](const std::string& strategy, const std::string& N,
                        const std::string& note) {
    return row("01", "10:05", "H100", "torch_baseline", N, "", strategy, "50.00") + "\"" + note +
           "\"";
  };
  const Ran r = table({
      row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "40.00"),
      peer("liger-flce", "8192", "torch 2.11; repeat runs bit-identical"),
      peer("cce", "8192", "torch 2.11; repeat runs differ in dH, dW"),
      peer("cce", "131072", "torch 2.11; repeat runs bit-identical"),
      peer("cce-exact", "8192", "torch 2.11"),
      peer("pytorch-bf16", "8192", "torch 2.11; repeat runs bit-identical"),
      peer("pytorch-bf16", "131072", "torch 2.11; repeat runs bit-identical"),
  });
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| yes, measured (bit-identical on repeat at N = 8192) |"))
      << r.output;
  // The same finding at both sizes is said once.
  EXPECT_TRUE(
      contains(r.output, "| yes, measured (bit-identical on repeat at N = 8192 and 131072) |"))
      << r.output;
  EXPECT_TRUE(contains(r.output,
                       "| no, measured (dH, dW differ on repeat at N = 8192; bit-identical on "
                       "repeat at N = 131072) |"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "| by its source, no (spin-locked sums) |")) << r.output;
}

// A repeat-run comparison the note does not state as torch_baseline.py writes it (said twice or
// both ways, "differ in" followed by nothing or by something other than a comma list of loss, dH
// and dW) is refused, exit 2 naming the line: read as it was, "bit-identical; … differ in dW"
// made the cell "yes", an empty list "no, measured ( differ …)", and a "|" or a line break in the
// list cut the Markdown row. A comparison that was not made leaves the source's word.
TEST_F(ResultsTable, PeersRepeatRunNotesThatCannotBeReadExit2) {
  const auto with = [&](const std::string& note) {
    return std::vector<std::string>{
        row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "40.00"),
        row("01", "10:05", "H100", "torch_baseline", "8192", "", "cce", "50.00") + "\"" + note +
            "\""};
  };
  for (const std::string note :
       {"torch 2.11; repeat runs bit-identical; repeat runs differ in dW",
        "repeat runs differ in dW; repeat runs differ in dH", "torch 2.11; repeat runs differ in ",
        "repeat runs differ in ; torch 2.11", "repeat runs differ in dH | dW",
        "repeat runs differ in dH\ndW", "repeat runs differ in dH, dW, torch 2.11"}) {
    const Ran r = table(with(note));
    EXPECT_EQ(r.status, 2) << note << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "s.csv line ")) << note << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "repeat runs")) << note << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "Traceback")) << r.output;
  }
  const Ran r = table(with("torch 2.11; repeat runs not compared (out of memory for the copies)"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "| bf16 inputs, gradient filter | by its source, no (spin-locked "
                       "sums) | 50.00 ms (0.80×) |"))
      << r.output;
}

// No bench row to make a table of, a row whose number is not one, a file of something else: exit
// 2 naming the cause (and the line), not a traceback.
TEST_F(ResultsTable, NothingToTabulateOrMalformedRowsExit2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "no `xentlab bench` row of recipe bf16/bf16/fp32/fp32 at N = 8192 or 131072"},
      {{row("01", "10:05", "H100", "torch_baseline", "8192", "", "pytorch-bf16", "50.00")},
       "no `xentlab bench` row"},
      {{row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "fast")},
       "s.csv line 2: ms 'fast' is not a positive number"},
      {{row("01", "10:00", "H100", "xentlab-bench", "8k", kRecipe, "naive", "40.00")},
       "s.csv line 2: N '8k' is not a positive number"},
      // A time of 0 would divide naive's by zero (a ZeroDivisionError traceback); one below 0 or
      // not finite would be tabulated as a time ("-3.00 ms (-13.33×)", "nan ms (nan×)").
      {{row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "40.00"),
        row("01", "10:05", "H100", "torch_baseline", "8192", "", "cce", "0")},
       "s.csv line 3: ms '0' is not a positive number"},
      {{row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "40.00"),
        row("01", "10:05", "H100", "torch_baseline", "8192", "", "cce", "-3")},
       "s.csv line 3: ms '-3' is not a positive number"},
      {{row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "nan")},
       "s.csv line 2: ms 'nan' is not a positive number"},
      {{row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "inf")},
       "s.csv line 2: ms 'inf' is not a positive number"},
      {{row("01", "10:00", "H100", "xentlab-bench", "0", kRecipe, "naive", "40.00")},
       "s.csv line 2: N '0' is not a positive number"},
      {{day("01") + ",10:00,abc1234,H100,580,xentlab-bench,cmd,8192"},
       "s.csv line 2: fewer fields than the header's"},
  };
  for (const auto& [rows, message] : cases) {
    const Ran r = table(rows);
    EXPECT_EQ(r.status, 2) << message << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "results_table.py: ")) << r.output;
    EXPECT_TRUE(contains(r.output, message)) << message << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "Traceback")) << r.output;
  }
  std::ofstream(path("other.csv")) << "name,score\nalice,3\n";
  const Ran foreign = testing::run_shell(
      "python3 " + shell_quote(std::string(XL_SOURCE_DIR) + "/tools/scripts/results_table.py") +
      " --results " + shell_quote(path("other.csv")));
  EXPECT_EQ(foreign.status, 2) << foreign.output;
  EXPECT_TRUE(contains(foreign.output, "its header has no column date, time_utc"))
      << foreign.output;
  // A header without the command column (which tells one run's rows from another's) is refused
  // the same way, not a KeyError traceback whose exit 1 --check would read as a stale table.
  std::ofstream(path("nocmd.csv"))
      << "date,time_utc,commit,gpu,driver,tool,N,V,D,recipe,strategy,ms,peak_extra_bytes,"
         "peak_extra_gib,note\n"
      << day("01") << ",10:00,abc1234,H100,580,xentlab-bench,8192,128256,4096," << kRecipe
      << ",fused,80.00,1024,,\n";
  for (const char* mode : {"", " --check"}) {
    const Ran r = testing::run_shell(
        "python3 " + shell_quote(std::string(XL_SOURCE_DIR) + "/tools/scripts/results_table.py") +
        " --results " + shell_quote(path("nocmd.csv")) + mode);
    EXPECT_EQ(r.status, 2) << mode << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "nocmd.csv: its header has no column command")) << r.output;
    EXPECT_FALSE(contains(r.output, "Traceback")) << r.output;
  }
}

// --write and --check on a copy of the script in a tree of its own (its targets are README.md and
// docs/benchmarks.md beside it): a target that cannot be read or has no marked block is exit 2
// naming it, and --write then leaves every target as it was. (A missing target was a
// FileNotFoundError traceback, exit 1, which --check reads as a stale table; a target without the
// block was found after the targets before it had been rewritten.)
TEST_F(ResultsTable, WriteAndCheckRefuseATargetWithoutItsBlock) {
  fs::create_directories(path("tree/tools/scripts"));
  fs::create_directories(path("tree/lab/results"));
  fs::create_directories(path("tree/docs"));
  fs::copy_file(std::string(XL_SOURCE_DIR) + "/tools/scripts/results_table.py",
                path("tree/tools/scripts/results_table.py"));
  std::ofstream(path("tree/lab/results/strategies.csv"))
      << "date,time_utc,commit,gpu,driver,tool,command,N,V,D,recipe,strategy,ms,"
         "peak_extra_bytes,peak_extra_gib,note\n"
      << row("01", "10:00", "H100", "xentlab-bench", "8192", kRecipe, "naive", "40.00") << "\n";
  const std::string stale_block = "<!-- results-table:begin -->\nold\n<!-- results-table:end -->\n";
  std::ofstream(path("tree/README.md")) << stale_block;
  const auto run = [&](const std::string& mode) {
    return testing::run_shell(
        "python3 " + shell_quote(path("tree/tools/scripts/results_table.py")) + " " + mode);
  };
  for (const bool exists : {false, true}) {
    if (exists) std::ofstream(path("tree/docs/benchmarks.md")) << "no block\n";
    for (const std::string mode : {"--write", "--check"}) {
      const Ran r = run(mode);
      EXPECT_EQ(r.status, 2) << mode << "\n" << r.output;
      EXPECT_TRUE(contains(r.output, exists ? "results_table.py: docs/benchmarks.md: no <!--"
                                            : "results_table.py: docs/benchmarks.md: cannot be "
                                              "read"))
          << mode << "\n"
          << r.output;
      EXPECT_FALSE(contains(r.output, "Traceback")) << r.output;
      EXPECT_EQ(slurp(path("tree/README.md")), stale_block) << mode;
    }
  }
  std::ofstream(path("tree/docs/benchmarks.md")) << stale_block;
  EXPECT_EQ(run("--check").status, 1);
  const Ran w = run("--write");
  ASSERT_EQ(w.status, 0) << w.output;
  EXPECT_TRUE(contains(slurp(path("tree/docs/benchmarks.md")), "| naive | CPU, CUDA |"));
  EXPECT_EQ(run("--check").status, 0);
}

}  // namespace
}  // namespace xentlab::bench::bench_tests
