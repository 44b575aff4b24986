// `xentlab bench`'s options (harness/bench/options.hpp), no device needed: timing statistics,
// byte sizes, option parsing and validation (sizes, names, the preset). Part of test_bench.
#include "harness/bench/options.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu/registry.hpp"
#include "harness/bench/report.hpp"
#include "harness/text.hpp"
#include "numerics/error.hpp"
#include "tests/harness/bench/bench_support.hpp"

namespace xentlab::bench::bench_tests {
namespace {
namespace fs = std::filesystem;

BenchArgs sized(std::int64_t N, std::int64_t V, std::int64_t D) {
  BenchArgs a;
  a.tokens = N;
  a.vocab = V;
  a.hidden = D;
  return a;
}

// ---- timing statistics ------------------------------------------------------------------------

TEST(BenchTiming, MedianAndSpread) {
  const TimingStats odd = summarize_times({5.0, 1.0, 3.0, 2.0, 4.0});
  EXPECT_EQ(odd.n, 5);
  EXPECT_EQ(odd.median, 3.0);
  EXPECT_EQ(odd.min, 1.0);
  EXPECT_EQ(odd.max, 5.0);
  EXPECT_EQ(odd.q1, 2.0);
  EXPECT_EQ(odd.q3, 4.0);
  const TimingStats even = summarize_times({4.0, 1.0, 2.0, 3.0});
  EXPECT_EQ(even.median, 2.5);
  EXPECT_EQ(even.q1, 1.75);
  const TimingStats none = summarize_times({});
  EXPECT_EQ(none.n, 0);
  EXPECT_TRUE(std::isnan(none.median));
}

// ---- byte sizes -------------------------------------------------------------------------------

TEST(BenchBytes, ParsesUnits) {
  EXPECT_EQ(parse_bytes("4294967296"), std::int64_t{4} << 30);
  EXPECT_EQ(parse_bytes("4GiB"), std::int64_t{4} << 30);
  EXPECT_EQ(parse_bytes("4gib"), std::int64_t{4} << 30);
  EXPECT_EQ(parse_bytes("4G"), std::int64_t{4} << 30);
  EXPECT_EQ(parse_bytes("512MiB"), std::int64_t{512} << 20);
  EXPECT_EQ(parse_bytes("1.5GiB"), std::int64_t{3} << 29);
  EXPECT_EQ(parse_bytes("2GB"), 2000000000);
  EXPECT_EQ(parse_bytes("10 KB"), 10000);
  EXPECT_EQ(parse_bytes("0"), 0);
  EXPECT_EQ(parse_bytes("1TiB"), std::int64_t{1} << 40);
  for (const char* bad : {"", "GiB", "-4GiB", "4XB", "4.5.1G", "1e9", "9999999TiB"})
    EXPECT_THROW(parse_bytes(bad), InputError) << bad;
}

// The exponent hint is for what reads as an exponent ("1e9", "1e+9"), not for an unknown unit that
// starts with e ("8E", exbibytes, which the units do not include).
TEST(BenchBytes, TheExponentHintOnlyForAnExponent) {
  const auto message = [](const char* text) {
    try {
      parse_bytes(text);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  for (const char* exp : {"1e9", "1E9", "1e+9"})
    EXPECT_NE(message(exp).find("no exponents"), std::string::npos) << message(exp);
  for (const char* unit : {"8E", "8EiB", "8e"}) {
    const std::string m = message(unit);
    EXPECT_NE(m.find("unknown unit"), std::string::npos) << m;
    EXPECT_EQ(m.find("no exponents"), std::string::npos) << m;
  }
}

TEST(BenchBytes, BlanksOnlyAroundTheNumberAndOneBeforeTheUnit) {
  EXPECT_EQ(parse_bytes(" 4GiB\t"), std::int64_t{4} << 30);
  EXPECT_EQ(parse_bytes("4 GiB"), std::int64_t{4} << 30);
  for (const char* bad : {"1 2 G", "1 2", "4  GiB", "4 G iB", "4\tGiB"})
    EXPECT_THROW(parse_bytes(bad), InputError) << bad;
  BenchArgs a = sized(16, 100, 8);
  a.memory_budget = "1 2 G";  // was 12 GiB
  EXPECT_THROW(resolve_options(a, kKnown), InputError);
}

TEST(BenchBytes, OutOfRangeIsAnInputErrorNamingTheOption) {
  const std::string huge(400, '9'), tiny = "0." + std::string(400, '0') + "1";
  for (const std::string& text : {huge, tiny, std::string("0.5")}) {
    EXPECT_THROW(parse_bytes(text), InputError) << text;  // not std::out_of_range (exit 3)
    BenchArgs a = sized(16, 100, 8);
    a.memory_budget = text;
    try {
      resolve_options(a, kKnown);
      ADD_FAILURE() << "accepted --memory-budget " << text;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--memory-budget: ", 0), 0u) << e.what();
    }
  }
}

TEST(BenchBytes, Formats) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(std::int64_t{32} << 20), "32.0 MiB");
  EXPECT_EQ(format_bytes(2134900736), "1.99 GiB");
  EXPECT_EQ(format_bytes(-1), "—");
}

// ---- options ----------------------------------------------------------------------------------

TEST(BenchOptions, Preset) {
  BenchArgs a;
  a.preset = "llama3-8b-128k";
  const BenchOptions o = resolve_options(a, kKnown);
  EXPECT_EQ(o.N, 131072);
  EXPECT_EQ(o.V, 128256);
  EXPECT_EQ(o.D, 4096);
  EXPECT_EQ(o.chunk_tokens, 8192);
  EXPECT_EQ(o.memory_budget, 0);
  ASSERT_GE(o.recipes.size(), 1u);
  EXPECT_EQ(o.recipes[0].name(), "bf16/bf16/fp32/bf16");
  for (const Recipe& r : o.recipes) EXPECT_EQ(r.input, DType::bf16);
  EXPECT_TRUE(o.strategies.empty());  // every registered strategy
  EXPECT_EQ(o.preset, "llama3-8b-128k");
  // 6·N·V·D and the inputs in bytes, exactly (V·D·2 alone is past 2^31).
  EXPECT_EQ(o.flops(), 6.0 * 131072.0 * 128256.0 * 4096.0);
  EXPECT_EQ(
      o.input_bytes(DType::bf16),
      (std::int64_t{131072} * 4096 + std::int64_t{128256} * 4096) * 2 + std::int64_t{131072} * 8);
  const Preset& p = find_preset("llama3-8b-128k");
  ASSERT_EQ(p.quoted.size(), 4u);
  EXPECT_EQ(p.quoted[1].strategy, "chunked");
  EXPECT_EQ(p.quoted[1].peak_memory, "14 GB");
  EXPECT_EQ(p.quoted[1].throughput_vs_naive, "0.85×");
}

TEST(BenchOptions, FlagsOverrideThePreset) {
  BenchArgs a;
  a.preset = "llama3-8b-128k";
  a.tokens = 8192;
  a.chunk_tokens = 0;
  a.recipes = {"bf16/bf16/fp32/fp32"};
  a.memory_budget = "4GiB";
  a.strategies = {"chunked,naive"};
  const BenchOptions o = resolve_options(a, kKnown);
  EXPECT_EQ(o.N, 8192);
  EXPECT_EQ(o.V, 128256);
  EXPECT_EQ(o.chunk_tokens, 0);
  EXPECT_EQ(o.memory_budget, std::int64_t{4} << 30);
  ASSERT_EQ(o.recipes.size(), 1u);
  EXPECT_EQ(o.recipes[0].grad, DType::fp32);
  EXPECT_EQ(o.strategies, (std::vector<std::string>{"chunked", "naive"}));
}

TEST(BenchOptions, Defaults) {
  const BenchOptions o = resolve_options(sized(64, 1000, 32), kKnown);
  EXPECT_EQ(o.repeats, 5);
  EXPECT_EQ(o.warmup, 1);
  EXPECT_EQ(o.sample_rows, 8);
  EXPECT_EQ(o.vocab_rows, 1000);  // 2048 clamped to V
  ASSERT_EQ(o.recipes.size(), 1u);
  EXPECT_EQ(o.recipes[0].name(), kDefaultRecipes);
  EXPECT_EQ(o.chunk_tokens, 0);
  EXPECT_EQ(o.memory_budget, 0);
  BenchArgs a = sized(4, 100000, 32);
  a.vocab_rows = 0;
  a.recipes = {"bf16/bf16/fp32/bf16,bf16/bf16/fp32/bf16", "fp16/fp16/fp32/fp16"};
  const BenchOptions b = resolve_options(a, kKnown);
  EXPECT_EQ(b.sample_rows, 4);      // clamped to N
  EXPECT_EQ(b.vocab_rows, 100000);  // 0 = all
  EXPECT_EQ(b.recipes.size(), 2u);  // duplicates once
}

TEST(BenchOptions, BadSizes) {
  EXPECT_THROW(resolve_options(sized(0, 10, 10), kKnown), InputError);
  EXPECT_THROW(resolve_options(sized(10, -3, 10), kKnown), InputError);
  EXPECT_THROW(resolve_options(sized(10, 10, 0), kKnown), InputError);
  BenchArgs missing;
  missing.vocab = 10;
  missing.hidden = 10;
  try {
    resolve_options(missing, kKnown);
    FAIL() << "no --tokens accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--tokens is required"), std::string::npos) << e.what();
  }
  // Past 2^48 elements in one matrix: refused, naming it (no overflow on the way).
  try {
    resolve_options(sized(std::int64_t{1} << 40, std::int64_t{1} << 20, 8), kKnown);
    FAIL() << "2^60-element logits accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("logits"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_options(sized(std::int64_t{1} << 62, 2, 4), kKnown), InputError);
}

// --ranks (as xentlab audit's): 1 to V, only with a strategy that shards the vocabulary named;
// not given, 1. The sharding names come from the registry's trait, as the command passes them.
TEST(BenchOptions, RanksAreCheckedAsTheAudits) {
  const std::vector<std::string> sharding = vocabulary_sharding_strategies();
  ASSERT_EQ(sharding, std::vector<std::string>{"vocab_parallel"});
  BenchArgs a = sized(64, 1000, 32);
  EXPECT_EQ(resolve_options(a, kKnown, sharding).ranks, 1);
  a.strategies = {"chunked,vocab_parallel"};
  a.ranks = 3;
  EXPECT_EQ(resolve_options(a, kKnown, sharding).ranks, 3);
  a.ranks = 1000;  // one row per rank
  EXPECT_EQ(resolve_options(a, kKnown, sharding).ranks, 1000);
  const auto refused = [&](BenchArgs b, const std::string& what) {
    try {
      (void)resolve_options(b, kKnown, sharding);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  a.ranks = 0;
  refused(a, "--ranks: vocabulary-parallel ranks must be at least 1 (got 0)");
  a.ranks = -4;
  refused(a, "--ranks: vocabulary-parallel ranks must be at least 1 (got -4)");
  a.ranks = std::int64_t{1} << 40;
  refused(a, "is past the largest int");
  a.ranks = 1001;
  refused(a, "--ranks 1001: vocabulary-parallel ranks (1001) exceed the vocabulary (1000 rows)");
  a.ranks = 2;
  a.strategies = {"chunked,fused"};
  refused(a,
          "--ranks 2 applies to the strategies that shard the vocabulary (vocab_parallel), "
          "and --strategies names none (e.g. --strategies vocab_parallel --ranks 2)");
  a.strategies.clear();  // the default set has no strategy that shards
  refused(a, "and --strategies names none");
}

// --vocab-splits (as xentlab audit's): 1 to V, only with a strategy that splits the vocabulary
// named; not given, 0 (from the memory budget). The splitting names from the registry's trait.
TEST(BenchOptions, VocabSplitsAreCheckedAsTheAudits) {
  const std::vector<std::string> splitting = vocabulary_splitting_strategies();
  ASSERT_EQ(splitting, std::vector<std::string>{"vocab_chunked"});
  const std::vector<std::string>& known = kKnown;
  BenchArgs a = sized(64, 1000, 32);
  EXPECT_EQ(resolve_options(a, known, {}, splitting).vocab_splits, 0);
  a.strategies = {"naive,vocab_chunked"};
  a.vocab_splits = 8;
  EXPECT_EQ(resolve_options(a, known, {}, splitting).vocab_splits, 8);
  a.vocab_splits = 1000;  // one row per split
  EXPECT_EQ(resolve_options(a, known, {}, splitting).vocab_splits, 1000);
  const auto refused = [&](BenchArgs b, const std::string& what) {
    try {
      (void)resolve_options(b, known, {}, splitting);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-2}, std::int64_t{1001}}) {
    a.vocab_splits = bad;
    refused(a, "--vocab-splits must be 1 to V = 1000 (--vocab), got " + std::to_string(bad));
  }
  a.vocab_splits = 2;
  a.strategies = {"chunked"};
  refused(a,
          "--vocab-splits 2 applies to the strategies that split the vocabulary (vocab_chunked), "
          "and --strategies names none (e.g. --strategies vocab_chunked --vocab-splits 2)");
}

// --gemms-alone: refused when every strategy named is one whose GEMMs are not timed alone (they
// would get no GEMMs column, the option silently doing nothing); accepted with one that is, or
// with none named (the default set, naive among it). The names from the registry's trait.
TEST(BenchOptions, GemmsAloneNeedsAStrategyWhoseGemmsRunApart) {
  const std::vector<std::string> apart = gemms_apart_strategies();
  ASSERT_EQ(apart, (std::vector<std::string>{"naive", "chunked", "checkpointed", "vocab_chunked"}));
  BenchArgs a = sized(64, 1000, 32);
  a.gemms_alone = true;
  EXPECT_TRUE(resolve_options(a, kKnown, {}, {}, apart).gemms_alone);
  a.strategies = {"fused,naive"};
  EXPECT_TRUE(resolve_options(a, kKnown, {}, {}, apart).gemms_alone);
  for (const std::string& only : {std::string("fused"), std::string("fused,vocab_parallel")}) {
    a.strategies = {only};
    try {
      (void)resolve_options(a, kKnown, {}, {}, apart);
      ADD_FAILURE() << "--gemms-alone accepted with --strategies " << only;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "--gemms-alone applies to the strategies whose GEMMs run apart from their "
                    "loss kernels (naive, chunked, checkpointed, vocab_chunked), and "
                    "--strategies names none (" +
                    only.substr(0, 5)),
                std::string::npos)
          << e.what();
    }
    a.gemms_alone = false;  // without the option, the same strategies are fine
    EXPECT_FALSE(resolve_options(a, kKnown, {}, {}, apart).gemms_alone);
    a.gemms_alone = true;
  }
}

TEST(BenchOptions, MatricesPast2Pow31Elements) {
  // W = 262144 × 8448 = 2.2·10^9 elements > 2^31, and logits 131072 × 262144 > 2^34: accepted,
  // with 64-bit byte counts.
  const BenchOptions o = resolve_options(sized(131072, 262144, 8448), kKnown);
  EXPECT_GT(o.V * o.D, std::int64_t{1} << 31);
  EXPECT_EQ(
      o.input_bytes(DType::fp32),
      (std::int64_t{131072} * 8448 + std::int64_t{262144} * 8448) * 4 + std::int64_t{131072} * 8);
  EXPECT_GT(o.input_bytes(DType::fp32), std::int64_t{1} << 33);
}

TEST(BenchOptions, NamesAndCounts) {
  auto throws_with = [](BenchArgs a, const std::string& what) {
    try {
      resolve_options(a, kKnown);
      ADD_FAILURE() << "accepted; expected an error naming " << what;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  BenchArgs a = sized(16, 100, 8);
  a.strategies = {"naive,flash"};
  throws_with(a, "unknown strategy 'flash'");
  a = sized(16, 100, 8);
  a.recipes = {"bf16/bf16/fp32"};
  throws_with(a, "four dtypes");
  a.recipes = {"bf16/bf17/fp32/bf16"};
  throws_with(a, "unknown dtype 'bf17'");
  a.recipes = {"fp64/fp64/fp64/fp64"};
  throws_with(a, "not fp64");
  a = sized(16, 100, 8);
  a.repeats = 0;
  throws_with(a, "--repeats");
  a = sized(16, 100, 8);
  a.warmup = -1;
  throws_with(a, "--warmup");
  a = sized(16, 100, 8);
  a.chunk_tokens = -5;
  throws_with(a, "--chunk-tokens");
  a = sized(16, 100, 8);
  a.sample_rows = -1;
  throws_with(a, "--sample-rows");
  a = sized(16, 100, 8);
  a.memory_budget = "lots";
  throws_with(a, "memory size 'lots'");
  a = sized(16, 100, 8);
  a.preset = "gpt5";
  throws_with(a, "unknown preset 'gpt5'");
  a = sized(16, 100, 8);
  a.csv = "same.out";
  a.markdown = "same.out";
  throws_with(a, "named by two");
}

TEST(BenchOptions, OneFileInTwoSpellingsIsRefused) {
  // Files that do not exist yet: fs::equivalent cannot compare them, weakly_canonical can.
  const std::string x = "xl-bench-no-such-file.out";
  const std::vector<std::pair<std::string, std::string>> same = {
      {x, "./" + x},
      {x, "xl-bench-no-such-folder/../" + x},
      {x, (fs::current_path() / x).string()},
      {"." + std::string(1, '/') + x, "././" + x}};
  for (const auto& [p, q] : same) {
    BenchArgs a = sized(16, 100, 8);
    a.csv = p;
    a.h5 = q;
    EXPECT_THROW(resolve_options(a, kKnown), InputError) << p << " " << q;
    a = sized(16, 100, 8);
    a.markdown = p;
    a.csv = q;
    EXPECT_THROW(resolve_options(a, kKnown), InputError) << p << " " << q;
  }
  BenchArgs a = sized(16, 100, 8);
  a.csv = x + ".csv";
  a.h5 = x + ".h5";
  EXPECT_NO_THROW(resolve_options(a, kKnown));
}

TEST(BenchOptions, RegistryNamesAreTheFilter) {
  // Without the CUDA backend the emulation's names stand in (the same strategies).
  auto strategies = make_strategies(Backend::cuda);
  if (strategies.empty()) strategies = make_strategies(Backend::cpu_emulation);
  std::vector<std::string> names;
  for (const auto& s : strategies) names.push_back(s->name());
  ASSERT_FALSE(names.empty());
  BenchArgs a = sized(16, 100, 8);
  a.strategies = {names.front()};
  EXPECT_EQ(resolve_options(a, names).strategies, std::vector<std::string>{names.front()});
}

}  // namespace
}  // namespace xentlab::bench::bench_tests
