// `xentlab audit`, run as a user runs it: its own options refused before the work, --append's
// refusals (another seed, chunk width or upstream gradient), and --ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "datasets/catalog.hpp"
#include "tests/cli/cli_support.hpp"

namespace xentlab::cli_tests {
namespace {

// ---- audit -----------------------------------------------------------------------------------

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
      {a + "--vocab-splits 3",
       "--vocab-splits 3 applies to the strategies that split the vocabulary (vocab_chunked), "
       "and --strategies names none"},
      {a + "--strategies vocab_chunked --vocab-splits -1", "--vocab-splits"},
  });
  EXPECT_FALSE(fs::exists(path("a.h5")));
  EXPECT_FALSE(fs::exists(path("a.h5.md")));
}

// One seed, one chunk width and one upstream gradient per results file: --append refuses runs of
// another, naming both, before the work, and leaves the file as it was.
TEST_F(DatasetProgram, AuditAppendRefusesAnotherSeedChunkWidthOrUpstream) {
  // chunked: a strategy that takes a chunk width (--chunk-tokens is refused for one that does not).
  const std::string small =
      "audit --backend cpu -q --no-plots --dataset odd-vocab -N 2 --strategies chunked "
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
      {"audit --backend cpu -q --no-plots --dataset odd-vocab -N 2 --strategies chunked "
       "--recipes fp32/fp32/fp32/fp32 --vocab-rows 16 -o " +
           shell_quote(path("a.h5")) + " --reduction none --append --markdown " +
           shell_quote(path("v.md")),
       "with 8 compared vocabulary rows, this audit compares 16"},
      // Another N under the same name: its description differs, refused before the work.
      {"audit --backend cpu -q --no-plots --dataset odd-vocab -N 3 --strategies chunked "
       "--recipes fp32/fp32/fp32/fp32 --vocab-rows 8 -o " +
           shell_quote(path("a.h5")) + " --reduction none --append --markdown " +
           shell_quote(path("v.md")),
       "linear N=2 V=507 D=123 fp32', this audit 'odd-vocab: linear N=3 V=507 D=123 fp32'"},
      // Two problems of one audit under one name (the embedded stories260k and the catalog's).
      {"audit --backend cpu -q --problems stories260k --dataset stories260k --strategies chunked "
       "--recipes fp32/fp32/fp32/fp32 -o " +
           shell_quote(path("d.h5")),
       "two problems of this audit are named 'stories260k'"},
      // A chunk width for strategies that do not chunk would be recorded, not used (fused's
      // token groups take it: it chunks tokens).
      {"audit --backend cpu -q --no-plots --dataset odd-vocab -N 2 --strategies naive "
       "--recipes fp32/fp32/fp32/fp32 --vocab-rows 8 -o " +
           shell_quote(path("b.h5")) + " --chunk-tokens 4",
       "none of the strategies named (naive) works through the tokens in chunks; leave the "
       "option out, or name one that does (chunked, checkpointed, fused, vocab_parallel)"},
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
      "audit --backend cpu -q --no-plots --dataset odd-vocab -N 2 --strategies vocab_parallel "
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

// --local-strategy: the strategy each rank of vocab_parallel runs. Checked before the work (a part
// the backend does not compose, or without vocab_parallel named); recorded on each run; --append
// refuses runs of another local part and leaves the file.
TEST_F(DatasetProgram, AuditLocalStrategyIsCheckedRecordedAndOnePerResultsFile) {
  const std::string small =
      "audit --backend cpu -q --dataset odd-vocab -N 2 --strategies vocab_parallel "
      "--recipes fp32/fp32/fp32/fp32 --vocab-rows 8 --ranks 3 -o " +
      shell_quote(path("a.h5"));
  expect_exit_2_naming({
      {small + " --local-strategy liger",
       "--local-strategy liger: vocab_parallel (cpu-emulation): 'liger' is not a local part"},
      {small + " --local-strategy vocab_parallel", "'vocab_parallel' is not a local part"},
      {"audit --backend cpu -q --strategies fused --local-strategy fused -o " +
           shell_quote(path("a.h5")),
       "--local-strategy fused applies to the strategies that shard the vocabulary "
       "(vocab_parallel), and --strategies names none"},
  });
  EXPECT_FALSE(fs::exists(path("a.h5")));
  const Ran first = xentlab(small + " --local-strategy fused");
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_TRUE(contains(slurp(path("a.h5.md")),
                       "; vocab_parallel: 3 vocabulary-parallel ranks, each running fused"))
      << slurp(path("a.h5.md"));
  const std::string before = slurp(path("a.h5"));
  expect_exit_2_naming({
      {small + " --append",
       "holds vocab_parallel runs of --local-strategy fused, this audit's are "
       "of --local-strategy chunked"},
  });
  EXPECT_EQ(slurp(path("a.h5")), before);
}

}  // namespace
}  // namespace xentlab::cli_tests
