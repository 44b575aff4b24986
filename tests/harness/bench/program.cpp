// `xentlab bench` run as a user runs it, no device needed: invalid options and command lines exit
// 2 naming the option, integers are plain decimal, empty values are refused, and without a CUDA
// device a valid bench exits 4 (skipped where a device is present). Part of test_bench.
#include "tests/support/program.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/harness/bench/bench_support.hpp"

namespace xentlab::bench::bench_tests {
namespace {

// ---- the program ------------------------------------------------------------------------------

using testing::expect_exit_2_naming;
using testing::Ran;
using testing::xentlab;

TEST(BenchProgram, InvalidOptionsExit2NamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench --tokens 0 --vocab 10 --hidden 4", "--tokens must be at least 1"},
      {"bench --vocab 10 --hidden 4", "--tokens is required"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --strategies naive,flash",
       "unknown strategy 'flash'"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --recipes bf16/bf16", "four dtypes"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --memory-budget 4XB", "unknown unit"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --memory-budget 1e9",
       "no exponents: write 1e9 bytes as 1GB or 1000000000"},
      {"bench --preset nope", "unknown preset 'nope'"},
      {"bench --tokens 1099511627776 --vocab 1048576 --hidden 8", "2^48"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --csv /no/such/folder/x.csv", "does not exist"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --ranks 2",
       "--ranks 2 applies to the strategies that shard the vocabulary"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --strategies fused --gemms-alone",
       "--gemms-alone applies to the strategies whose GEMMs run apart from their loss kernels"},
  };
  expect_exit_2_naming(cases);
  const Ran h = xentlab("bench --help");
  EXPECT_EQ(h.status, 0);
  for (const char* opt : {"--tokens", "--vocab", "--hidden", "--recipes", "--strategies",
                          "--memory-budget", "--repeats", "--warmup", "--sample-rows", "--preset",
                          "--chunk-tokens", "--csv", "--h5", "--markdown"})
    EXPECT_NE(h.output.find(opt), std::string::npos) << opt;
}

// --ranks with vocab_parallel named: P = 0 and P > V exit 2 naming the cause (before any
// device is looked for); a valid P passes the options (exit 4 without a device). Skipped where
// this build's bench has no vocab_parallel (a CUDA build without NCCL).
TEST(BenchProgram, RanksOfVocabParallelAreCheckedBeforeTheDevice) {
  std::vector<std::string> names = strategy_names(Backend::cuda, StrategySet::all);
  if (names.empty()) names = strategy_names(Backend::cpu_emulation, StrategySet::all);
  if (std::find(names.begin(), names.end(), "vocab_parallel") == names.end())
    GTEST_SKIP() << "this build's bench has no vocab_parallel (no NCCL)";
  const std::string b = "bench --tokens 8 --vocab 10 --hidden 4 --strategies vocab_parallel ";
  expect_exit_2_naming({
      {b + "--ranks 0", "--ranks: vocabulary-parallel ranks must be at least 1 (got 0)"},
      {b + "--ranks 11", "vocabulary-parallel ranks (11) exceed the vocabulary (10 rows)"},
      {b + "--ranks 1.5", "--ranks"},
  });
  if (!device_present()) {
    const Ran r = xentlab(b + "--ranks 1");
    EXPECT_EQ(r.status, 4) << r.output;
  }
}

TEST(BenchProgram, CommandLinesThatDoNotParseExit2) {
  // CLI11's own codes (104, 106, 109, 114, …) are not the documented statuses.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "no command given"},
      {"frobnicate", "unknown command 'frobnicate'"},
      {"bench --no-such-option", "--no-such-option"},
      {"bench --tokens eight --vocab 10 --hidden 4", "--tokens"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --ranks two", "--ranks"},
      {"bench --tokens 8 --tokens 9 --vocab 10 --hidden 4", "--tokens"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --memory-budget '1 2 G'", "--memory-budget"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --memory-budget " + std::string(400, '9'),
       "--memory-budget"},
      {"verify", "required"},
  };
  expect_exit_2_naming(cases);
  EXPECT_EQ(xentlab("--help").status, 0);
  EXPECT_EQ(xentlab("--version").status, 0);
}

// Every command's integer options take plain decimal integers only: CLI11 alone would read 010
// as 8, 0x10 as 16, -1 as 2^64 − 1 for an unsigned option, and clamp past 2^63.
TEST(BenchProgram, IntegersArePlainDecimal) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench --tokens 010 --vocab 10 --hidden 4",
       "'010' is not a plain decimal integer: a leading zero"},
      {"bench --tokens 0x10 --vocab 10 --hidden 4", "'0x10' is not a plain decimal integer"},
      {"datasets --make gaussian --seed -1",
       "'-1' is not a plain decimal integer: it must not be negative"},
      {"bench --tokens 99999999999999999999 --vocab 10 --hidden 4",
       "past the largest 64-bit integer"},
      {"audit --rows 1e3", "--rows: '1e3' is not a plain decimal integer"},
      {"datasets --make gaussian -N 010", "--tokens: '010'"},
      {"reference -N 10.0", "--tokens: '10.0'"},
  };
  expect_exit_2_naming(cases);
  // Plain values still parse: the generated problem has the 10 tokens asked for.
  const Ran ok = xentlab("datasets --make gaussian -N 10");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("N=10 "), std::string::npos) << ok.output;
}

TEST(BenchProgram, EmptyValuesAreRefusedNamingTheOption) {
  for (const std::string opt :
       {"--csv ''", "--h5 ''", "--markdown ''", "--preset ''", "--recipes ''", "--recipes ,",
        "--strategies ''", "--strategies ,", "--memory-budget ''"}) {
    const Ran r = xentlab("bench --tokens 8 --vocab 10 --hidden 4 " + opt);
    EXPECT_EQ(r.status, 2) << opt << "\n" << r.output;
    const std::string name = opt.substr(0, opt.find(' '));
    EXPECT_NE(r.output.find(name + ": an empty value"), std::string::npos) << opt << "\n"
                                                                           << r.output;
  }
}

TEST(BenchProgram, NoDeviceExits4WithAClearMessage) {
  if (device_present()) GTEST_SKIP() << "a CUDA device is present: the bench runs for real";
  for (const std::string args :
       {"bench --preset llama3-8b-128k", "bench --tokens 4096 --vocab 262144 --hidden 8448",
        "bench -N 8 -V 10 -D 4 --strategies naive --recipes fp16/fp16/fp32/fp16 --repeats 1"}) {
    const Ran r = xentlab(args);
    EXPECT_EQ(r.status, 4) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("xentlab bench: no CUDA device"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace xentlab::bench::bench_tests
