// `xentlab bench`. Built twice (tests/CMakeLists.txt):
//  - test_bench, label "cpu", no device needed: option parsing and validation (sizes, names, byte
//    sizes, the preset), the table/Markdown/CSV/HDF5 formats on synthetic rows, and the program
//    itself: invalid options exit 2 naming the option, valid ones on a machine without a CUDA
//    device exit 4 with "no CUDA device" (skipped where a device is present);
//  - test_bench_gpu (XL_BENCH_GPU_TESTS), label "gpu", skipped without a device: a small bench
//    run end to end through the program, its CSV rows checked (every registered strategy, finite
//    and small errors against the reference, refusals as rows).
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "datasets/atomic_file.hpp"
#include "datasets/h5.hpp"
#include "gpu/registry.hpp"
#include "numerics/error.hpp"
#include "tests/program.hpp"
#include "tests/temp_folder.hpp"
#include "tests/unprivileged.hpp"
#include "tools/bench/bench_report.hpp"
#ifdef XENTLAB_HAVE_CUDA
#include "gpu/cuda/cuda_strategy.cuh"
#include "gpu/cuda/device.hpp"
#endif

namespace xentlab::bench {
namespace {
namespace fs = std::filesystem;

#ifndef XL_BENCH_GPU_TESTS
// Every strategy of the registry, as known_strategies() gives the options on any build.
const std::vector<std::string> kKnown = [] {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategy_table()) names.emplace_back(e.name);
  return names;
}();

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

// ---- rows and formats -------------------------------------------------------------------------

BenchReport synthetic_report() {
  BenchReport r;
  BenchArgs a;
  a.preset = "llama3-8b-128k";
  r.options = resolve_options(a, kKnown);
  r.options.command_line = "xentlab bench --preset llama3-8b-128k --csv 'a,b.csv' --note \"x\"";
  BenchMeta& m = r.meta;
  m.gpu_name = "NVIDIA H200";
  m.driver = "580.159.04";
  m.cuda_driver_api = 13000;
  m.cuda_runtime = 13000;
  m.sm_major = 9;
  m.multiprocessors = 132;
  m.sm_clock_mhz = 1980;
  m.mem_clock_mhz = 3201;
  m.l2_bytes = 50 << 20;
  m.memory_bytes = std::int64_t{150} << 30;
  m.date_utc = "2026-12-01T00:00:00Z";
  m.xentlab_version = "0.1.0";
  m.gemm_tflops = 780.0;
  m.sample_rows = 8;
  m.vocab_rows = 2048;
  const std::string rc = "bf16/bf16/fp32/bf16";
  auto ok = [&](const char* s, double ms, std::int64_t extra) {
    BenchRow row;
    row.strategy = s;
    row.recipe = rc;
    row.times_ms = {ms, ms * 1.01, ms * 0.99};
    row.time = summarize_times(row.times_ms);
    row.tflops = r.options.flops() / (ms * 1e-3) / 1e12;
    row.peak_extra_bytes = extra;
    row.planned_extra_bytes = extra;
    row.io_bytes = std::int64_t{4} << 30;
    row.chunk_rows = 8192;
    row.err_loss = 1e-7;
    row.err_lse = 2e-8;
    row.err_reduced_loss = 3e-7;
    row.err_dH = 5e-3;
    row.err_dW_sub = 1.3e-2;
    return row;
  };
  r.rows.push_back(ok("naive", 680.0, std::int64_t{31} << 30));
  r.rows.push_back(ok("chunked", 670.0, std::int64_t{4} << 30));
  BenchRow refused;
  refused.strategy = "checkpointed";
  refused.recipe = rc;
  refused.status = RowStatus::does_not_fit;
  refused.message = "checkpointed: memory budget 1 bytes is below the 2 bytes needed, \"really\"";
  refused.planned_extra_bytes = std::int64_t{3} << 30;
  r.rows.push_back(refused);
  fill_relative_throughput(r.rows);
  return r;
}

TEST(BenchRows, RelativeThroughput) {
  const BenchReport r = synthetic_report();
  EXPECT_DOUBLE_EQ(r.rows[0].rel_to_naive, 1.0);
  EXPECT_DOUBLE_EQ(r.rows[1].rel_to_naive, 680.0 / 670.0);
  EXPECT_TRUE(std::isnan(r.rows[2].rel_to_naive));
  std::vector<BenchRow> no_naive{r.rows[1]};
  fill_relative_throughput(no_naive);
  EXPECT_TRUE(std::isnan(no_naive[0].rel_to_naive));
}

TEST(BenchRows, RotationCopies) {
  EXPECT_EQ(rotation_copies(std::int64_t{2} << 30, 50 << 20), 1);
  EXPECT_EQ(rotation_copies(30 << 20, 50 << 20), 4);  // 120 MiB ≥ 100 MiB
  EXPECT_EQ(rotation_copies(100 << 20, 50 << 20), 1);
  EXPECT_EQ(rotation_copies(1000, 50 << 20), 64);  // capped
  EXPECT_EQ(rotation_copies(0, 50 << 20), 1);
}

TEST(BenchFormats, TerminalTable) {
  const std::string t = format_table(synthetic_report());
  EXPECT_NE(t.find("NVIDIA H200"), std::string::npos);
  EXPECT_NE(t.find("580.159.04"), std::string::npos);
  EXPECT_NE(t.find("does-not-fit"), std::string::npos);
  EXPECT_NE(t.find("680.00"), std::string::npos);
  EXPECT_NE(t.find("1.01"), std::string::npos);  // naive / chunked
  EXPECT_NE(t.find("5.0e-03"), std::string::npos);
  EXPECT_NE(t.find("below the 2 bytes needed"), std::string::npos);
  EXPECT_NE(t.find("N=131072 V=128256 D=4096"), std::string::npos);
}

TEST(BenchFormats, GemmTimeAtTheSustainedRate) {
  // The preset's 6·N·V·D = 6·131072·128256·4096 = 4.1314e14 FLOP at 650 TFLOP/s: 635.60 ms;
  // 8·N·V·D: 847.47 ms (arithmetic done by hand, not by the code under test).
  BenchReport r = synthetic_report();
  r.meta.gemm_sustained_tflops = 650.0;
  for (const std::string& s : {format_table(r), format_markdown(r)}) {
    EXPECT_NE(s.find("780.0 TFLOP/s alone, 650.0 sustained"), std::string::npos) << s;
    EXPECT_NE(s.find("6·N·V·D takes 635.60 ms (naive, chunked), 8·N·V·D 847.47 ms"),
              std::string::npos)
        << s;
  }
  // Without the sustained rate (reports written before it existed), no GEMM time is claimed.
  const std::string plain = format_markdown(synthetic_report());
  EXPECT_NE(plain.find("780.0 TFLOP/s alone\n"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("sustained"), std::string::npos);
  // A rate that is not a measurement (0, negative, infinite) gives no times either.
  for (const double bad : {0.0, -650.0, std::numeric_limits<double>::infinity()}) {
    BenchReport b = synthetic_report();
    b.meta.gemm_sustained_tflops = bad;
    EXPECT_EQ(format_markdown(b).find("takes"), std::string::npos) << bad;
  }
}

TEST(BenchFormats, MarkdownWithQuotedTable) {
  const std::string md = format_markdown(synthetic_report());
  EXPECT_NE(md.find("| strategy | recipe | status | median ms"), std::string::npos);
  EXPECT_NE(md.find("## Quoted vs measured (llama3-8b-128k)"), std::string::npos);
  EXPECT_NE(
      md.find("| chunked | bf16/bf16/fp32/bf16 | 14 GB | 4.00 GiB (8.00 GiB) | 0.85× | 1.01× |"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("| fused | bf16/bf16/fp32/bf16 | 6 GB | not measured"), std::string::npos);
  EXPECT_NE(md.find("does-not-fit: needs 3.00 GiB"), std::string::npos);
  EXPECT_NE(md.find("needs 3.000"), std::string::npos);
  // Every table line has its header's number of cells (messages cannot break a row).
  std::istringstream in(md);
  std::size_t cells = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("|", 0) != 0) {
      cells = 0;
      continue;
    }
    const auto n = static_cast<std::size_t>(std::count(line.begin(), line.end(), '|'));
    if (cells == 0) cells = n;
    EXPECT_EQ(n, cells) << line;
  }
  BenchReport plain = synthetic_report();
  plain.options.preset.clear();
  EXPECT_EQ(format_markdown(plain).find("Quoted vs measured"), std::string::npos);
}

#endif  // !XL_BENCH_GPU_TESTS

/// Splits one CSV record (RFC 4180) into fields.
std::vector<std::string> parse_csv(const std::string& line) {
  std::vector<std::string> f(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        f.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        f.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      f.emplace_back();
    } else {
      f.back() += c;
    }
  }
  return f;
}

#ifndef XL_BENCH_GPU_TESTS
TEST(BenchFormats, CsvRows) {
  const BenchReport r = synthetic_report();
  const auto header = parse_csv(csv_header());
  auto col = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name;
    return static_cast<std::size_t>(it - header.begin());
  };
  for (const BenchRow& row : r.rows) {
    const auto f = parse_csv(csv_row(r, row));
    ASSERT_EQ(f.size(), header.size());
    EXPECT_EQ(f[col("command")], r.options.command_line);  // commas and quotes survive
    EXPECT_EQ(f[col("gpu")], "NVIDIA H200");
    EXPECT_EQ(f[col("strategy")], row.strategy);
    EXPECT_EQ(f[col("N")], "131072");
  }
  const auto naive = parse_csv(csv_row(r, r.rows[0]));
  EXPECT_EQ(std::stod(naive[col("median_ms")]), 680.0);
  EXPECT_EQ(naive[col("status")], "ok");
  EXPECT_EQ(std::stod(naive[col("err_dH")]), 5e-3);
  const auto refused = parse_csv(csv_row(r, r.rows[2]));
  EXPECT_EQ(refused[col("status")], "does-not-fit");
  EXPECT_EQ(refused[col("median_ms")], "");
  EXPECT_EQ(refused[col("planned_extra_bytes")], std::to_string(std::int64_t{3} << 30));
  EXPECT_EQ(refused[col("message")], r.rows[2].message);
}

class BenchFiles : public testing::TempFolderTest {
 protected:
  BenchFiles() : TempFolderTest("bench") {}
};

// A row the judge found beyond its bound is measured (its times and errors are shown) and
// incorrect in every output; the exit status is 1 for an incorrect or failed row, as the audit's,
// and 0 for refusals.
TEST_F(BenchFiles, IncorrectRowsAreMeasuredAndExit1) {
  EXPECT_EQ(row_status(Disposition::passed), RowStatus::ok);
  EXPECT_EQ(row_status(Disposition::incorrect), RowStatus::incorrect);
  EXPECT_EQ(row_status(Disposition::not_supported), RowStatus::not_supported);
  EXPECT_EQ(row_status(Disposition::failed), RowStatus::failed);
  EXPECT_EQ(to_string(RowStatus::incorrect), "incorrect");
  EXPECT_TRUE(measured(RowStatus::incorrect));
  EXPECT_FALSE(measured(RowStatus::does_not_fit));
  BenchReport r = synthetic_report();
  EXPECT_EQ(exit_status(r, {}), 0);  // ok rows and a does-not-fit row
  r.rows[1].status = RowStatus::incorrect;
  r.rows[1].message = "dH: |e| = 0.5 > k·bound = 1·0.01 at element 3";
  fill_relative_throughput(r.rows);
  EXPECT_DOUBLE_EQ(r.rows[1].rel_to_naive, 680.0 / 670.0);
  EXPECT_EQ(exit_status(r, {}), 1);
  const std::string t = format_table(r);
  EXPECT_NE(t.find("chunked       bf16/bf16/fp32/bf16  incorrect"), std::string::npos) << t;
  EXPECT_NE(t.find("670.00"), std::string::npos) << t;
  EXPECT_NE(t.find("|e| = 0.5 > k·bound"), std::string::npos) << t;
  const auto header = parse_csv(csv_header());
  const auto f = parse_csv(csv_row(r, r.rows[1]));
  const auto col = std::find(header.begin(), header.end(), "status") - header.begin();
  EXPECT_EQ(f[static_cast<std::size_t>(col)], "incorrect");
  const auto med = std::find(header.begin(), header.end(), "median_ms") - header.begin();
  EXPECT_EQ(std::stod(f[static_cast<std::size_t>(med)]), 670.0);
  EXPECT_NE(format_markdown(r).find("| chunked | bf16/bf16/fp32/bf16 | incorrect | 670.00"),
            std::string::npos);
  r.options.csv.clear();
  r.options.markdown.clear();
  r.options.h5 = path("b.h5");
  const OutputReport out = write_outputs(r, false);
  EXPECT_TRUE(out.failures.empty());
  EXPECT_EQ(exit_status(r, out), 1);
  const h5::File file = h5::File::open_read(r.options.h5);
  EXPECT_EQ(file.open_group("sessions/000000/rows/0001").attr_string("status"), "incorrect");
  r.rows[1].status = RowStatus::failed;
  EXPECT_EQ(exit_status(r, {}), 1);
  r.rows[1].status = RowStatus::ok;
  OutputReport failed_output;
  failed_output.failures.push_back("--csv x.csv: not written");
  EXPECT_EQ(exit_status(r, failed_output), 1);
}

TEST_F(BenchFiles, CsvAppends) {
  const BenchReport r = synthetic_report();
  append_csv(path("b.csv"), r);
  append_csv(path("b.csv"), r);
  std::ifstream in(path("b.csv"));
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 1 + 2 * r.rows.size());
  EXPECT_EQ(lines[0], csv_header());
  EXPECT_EQ(lines[1], lines[1 + r.rows.size()]);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  std::ofstream(path("other.csv")) << "a,b,c\n1,2,3\n";
  EXPECT_THROW(check_csv_target(path("other.csv")), InputError);
  EXPECT_THROW(append_csv(path("other.csv"), r), InputError);
  EXPECT_THROW(check_csv_target(path("no-such-folder/b.csv")), InputError);
  EXPECT_NO_THROW(check_csv_target(path("new.csv")));
}

TEST_F(BenchFiles, H5Appends) {
  BenchReport r = synthetic_report();
  append_h5(path("b.h5"), r);
  r.meta.gemm_sustained_tflops = 676.5;
  append_h5(path("b.h5"), r);
  const h5::File f = h5::File::open_read(path("b.h5"));
  EXPECT_EQ(f.attr_string("format"), "xentlab-bench");
  EXPECT_EQ(f.attr_int("format_version"), 1);
  const h5::Group s = f.open_group("sessions");
  ASSERT_EQ(s.children().size(), 2u);
  const h5::Group g = s.open_group("000001");
  EXPECT_EQ(g.attr_string("gpu"), "NVIDIA H200");
  EXPECT_EQ(g.attr_string("driver"), "580.159.04");
  EXPECT_EQ(g.attr_string("command"), r.options.command_line);
  EXPECT_EQ(g.attr_int("N"), 131072);
  EXPECT_EQ(g.attr_int("sm_clock_mhz"), 1980);
  EXPECT_EQ(g.attr_double("gemm_tflops"), 780.0);
  EXPECT_EQ(g.attr_double("gemm_sustained_tflops"), 676.5);
  EXPECT_TRUE(std::isnan(s.open_group("000000").attr_double("gemm_sustained_tflops")));
  const h5::Group row = g.open_group("rows/0000");
  EXPECT_EQ(row.attr_string("strategy"), "naive");
  EXPECT_EQ(row.attr_double("median_ms"), 680.0);
  EXPECT_EQ(row.open_dataset("times_ms").read_double().size(), 3u);
  EXPECT_EQ(g.open_group("rows/0002").attr_string("status"), "does-not-fit");
  EXPECT_FALSE(g.open_group("rows/0002").exists("times_ms"));
  {
    h5::File other = h5::File::create(path("other.h5"));
    other.set_attr("format", "xentlab-results");
    other.set_attr("format_version", std::int64_t{1});
    other.close();
  }
  EXPECT_THROW(check_h5_target(path("other.h5")), InputError);
  std::ofstream(path("text.h5")) << "not hdf5";
  EXPECT_THROW(check_h5_target(path("text.h5")), FormatError);
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// The message of the InputError that f throws ("" and a test failure when it throws none).
template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}

TEST_F(BenchFiles, CsvWithoutFinalNewlineGetsOneBeforeTheRows) {
  const BenchReport r = synthetic_report();
  const std::string last = csv_row(r, r.rows[0]);
  std::ofstream(path("b.csv"), std::ios::binary) << csv_header() << "\n" << last;  // no "\n"
  append_csv(path("b.csv"), r);
  const auto lines = read_lines(path("b.csv"));
  ASSERT_EQ(lines.size(), 2 + r.rows.size());
  EXPECT_EQ(lines[1], last);  // not glued to the first new row
  EXPECT_EQ(lines[2], csv_row(r, r.rows[0]));
  EXPECT_EQ(parse_csv(lines[2]).size(), parse_csv(csv_header()).size());
  // The header alone without its newline: the same.
  std::ofstream(path("h.csv"), std::ios::binary) << csv_header();
  append_csv(path("h.csv"), r);
  EXPECT_EQ(read_lines(path("h.csv")).size(), 1 + r.rows.size());
}

TEST_F(BenchFiles, AppendsWaitForTheLockOfTheFile) {
  const BenchReport r = synthetic_report();
  std::atomic<bool> done{false};
  std::string error;
  std::thread writer;
  {
    const FileLock csv_lock(path("b.csv")), h5_lock(path("b.h5"));  // another writer holds them
    writer = std::thread([&] {
      try {
        append_csv(path("b.csv"), r);
        append_h5(path("b.h5"), r);
      } catch (const std::exception& e) {
        error = e.what();
      }
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(done.load()) << "appended while another writer held the lock";
    EXPECT_FALSE(fs::exists(path("b.csv")));
  }
  writer.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(read_lines(path("b.csv")).size(), 1 + r.rows.size());
  EXPECT_TRUE(fs::exists(path("b.csv.lock")));
}

TEST_F(BenchFiles, ConcurrentAppendsKeepEveryRow) {
  const BenchReport r = synthetic_report();
  constexpr int kWriters = 4, kAppends = 6;
  std::vector<pid_t> children;
  std::fflush(nullptr);
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        for (int k = 0; k < kAppends; ++k) {
          append_csv(path("b.csv"), r);
          append_h5(path("b.h5"), r);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "writer: %s\n", e.what());
        rc = 1;
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  EXPECT_EQ(read_lines(path("b.csv")).size(), 1 + kWriters * kAppends * r.rows.size());
  const h5::File f = h5::File::open_read(path("b.h5"));
  EXPECT_EQ(f.open_group("sessions").children().size(),
            static_cast<std::size_t>(kWriters * kAppends));
}

TEST_F(BenchFiles, ChecksCreateTheTemporaryFile) {
  // A name the file system takes (250 ≤ 255 bytes), whose temporary name (".NAME.tmp-PID-N",
  // at least 1 + 250 + 5 + 1 + 1 + 1 = 259 bytes whatever the PID) it does not. (With 244 bytes
  // the temporary name fitted when the PID had 3 digits: the test failed after PID wrap-around.)
  const std::string long_name = path(std::string(246, 'b') + ".csv");
  for (auto check : {check_csv_target, check_h5_target}) {
    const std::string m = input_error([&] { check(long_name); });
    EXPECT_NE(m.find("cannot create the temporary file"), std::string::npos) << m;
    EXPECT_NE(m.find("File name too long"), std::string::npos) << m;
  }
  EXPECT_THROW(AtomicOutput(long_name, true).check_writable(), InputError);
  EXPECT_NO_THROW(check_csv_target(path("ok.csv")));
  EXPECT_NO_THROW(AtomicOutput(path("ok.md"), false).check_writable());
  for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left behind: " << e.path();
  // A read-only folder, for an ordinary user.
  fs::create_directories(dir_ / "ro");
  fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec |
                                   fs::perms::group_read | fs::perms::group_exec |
                                   fs::perms::others_read | fs::perms::others_exec);
  const std::string ro = (dir_ / "ro" / "b").string();
  XL_EXPECT_UNPRIVILEGED([&] {
    for (auto check : {check_csv_target, check_h5_target}) {
      try {
        check(ro);
        std::fprintf(stderr, "a read-only folder passed the check\n");
        return false;
      } catch (const InputError& e) {
        if (std::string(e.what()).find("Permission denied") == std::string::npos) return false;
      }
    }
    try {
      AtomicOutput(ro + ".md", false).check_writable();
      return false;
    } catch (const InputError&) {
    }
    return true;
  });
}

TEST_F(BenchFiles, ReadOnlyFilesTakeTheRowsAndKeepTheirMode) {
  const BenchReport r = synthetic_report();
  fs::permissions(dir_, fs::perms::all);  // the unprivileged child writes here
  const auto ro = fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read;
  XL_EXPECT_UNPRIVILEGED([&] {
    append_csv(path("b.csv"), r);
    append_h5(path("b.h5"), r);
    fs::permissions(path("b.csv"), ro);
    fs::permissions(path("b.h5"), ro);
    check_csv_target(path("b.csv"));
    check_h5_target(path("b.h5"));
    append_csv(path("b.csv"), r);  // copy_file gives the temporary mode 0444: it must be writable
    append_h5(path("b.h5"), r);
    return read_lines(path("b.csv")).size() == 1 + 2 * r.rows.size() &&
           h5::File::open_read(path("b.h5")).open_group("sessions").children().size() == 2 &&
           fs::status(path("b.csv")).permissions() == ro &&
           fs::status(path("b.h5")).permissions() == ro;
  });
}

TEST_F(BenchFiles, H5SessionsAreCheckedAndNumberedPastTheLargest) {
  const BenchReport r = synthetic_report();
  append_h5(path("gap.h5"), r);
  append_h5(path("gap.h5"), r);
  append_h5(path("gap.h5"), r);
  {
    h5::File f = h5::File::open_rw(path("gap.h5"));
    ASSERT_EQ(H5Ldelete(f.id(), "sessions/000001", H5P_DEFAULT), 0);  // 000000, 000002 remain
    f.close();
  }
  append_h5(path("gap.h5"), r);  // by count this would be 000002 again
  const auto names = h5::File::open_read(path("gap.h5")).open_group("sessions").children();
  EXPECT_EQ(names, (std::vector<std::string>{"000000", "000002", "000003"}));
  {
    h5::File f = h5::File::create(path("flat.h5"));
    f.set_attr("format", "xentlab-bench");
    f.set_attr("format_version", std::int64_t{1});
    f.write("sessions", std::vector<double>{1.0, 2.0});
    f.close();
  }
  const std::string m = input_error([&] { check_h5_target(path("flat.h5")); });
  EXPECT_NE(m.find("/sessions is not a group"), std::string::npos) << m;
}

TEST_F(BenchFiles, EveryOutputIsAttemptedAndTheMarkdownIsNeverLost) {
  BenchReport r = synthetic_report();
  r.options.markdown = path("gone/b.md");  // its folder vanished during the run
  r.options.csv = path("gone/b.csv");
  r.options.h5 = path("b.h5");
  const OutputReport out = write_outputs(r, false);
  ASSERT_EQ(out.failures.size(), 2u);
  EXPECT_NE(out.failures[0].find("--markdown " + r.options.markdown), std::string::npos)
      << out.failures[0];
  EXPECT_NE(out.failures[0].find("does not exist"), std::string::npos) << out.failures[0];
  EXPECT_NE(out.failures[1].find("--csv " + r.options.csv), std::string::npos) << out.failures[1];
  EXPECT_NE(out.stdout_text.find(format_markdown(r)), std::string::npos);  // printed instead
  EXPECT_NE(out.stdout_text.find("h5: " + r.options.h5), std::string::npos);
  EXPECT_EQ(h5::File::open_read(path("b.h5")).open_group("sessions").children().size(), 1u);
  // Everything written: no failure, the Markdown only in its file.
  r.options.markdown = path("b.md");
  r.options.csv = path("b.csv");
  const OutputReport ok = write_outputs(r, false);
  EXPECT_TRUE(ok.failures.empty());
  EXPECT_EQ(ok.stdout_text.find("| strategy |"), std::string::npos);
  EXPECT_EQ(read_all(path("b.md")), format_markdown(r));
  EXPECT_EQ(read_lines(path("b.csv")).size(), 1 + r.rows.size());
}

TEST_F(BenchFiles, CsvHeaderVariants) {
  const BenchReport r = synthetic_report();
  // Empty: taken as new.
  std::ofstream(path("empty.csv")).close();
  EXPECT_NO_THROW(check_csv_target(path("empty.csv")));
  append_csv(path("empty.csv"), r);
  const auto lines = read_lines(path("empty.csv"));
  ASSERT_EQ(lines.size(), 1 + r.rows.size());
  EXPECT_EQ(lines[0], csv_header());
  // CRLF and a byte-order mark: said so.
  std::ofstream(path("crlf.csv"), std::ios::binary) << csv_header() << "\r\n";
  std::string m = input_error([&] { check_csv_target(path("crlf.csv")); });
  EXPECT_NE(m.find("CRLF"), std::string::npos) << m;
  std::ofstream(path("bom.csv"), std::ios::binary) << "\xEF\xBB\xBF" << csv_header() << "\n";
  m = input_error([&] { check_csv_target(path("bom.csv")); });
  EXPECT_NE(m.find("byte-order mark"), std::string::npos) << m;
  // No newline in the first 64 KiB: refused without reading the rest.
  std::ofstream(path("long.csv"), std::ios::binary) << std::string(std::size_t{1} << 20, 'a');
  m = input_error([&] { check_csv_target(path("long.csv")); });
  EXPECT_NE(m.find("no line end in its first 64 KiB"), std::string::npos) << m;
  // Unreadable (for an ordinary user): "cannot read", with the reason.
  fs::permissions(dir_, fs::perms::all);
  XL_EXPECT_UNPRIVILEGED([&] {
    std::ofstream(path("locked.csv")) << csv_header() << "\n";
    fs::permissions(path("locked.csv"), fs::perms::none);
    try {
      check_csv_target(path("locked.csv"));
    } catch (const InputError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return std::string(e.what()).find("cannot read: Permission denied") != std::string::npos;
    }
    return false;
  });
}

#ifdef XENTLAB_HAVE_CUDA
TEST(BenchPlan, AnExplicitBudgetBoundsAGivenChunkSize) {
  // The preset's shape and chunk size (8192 tokens: about 2 GiB of bf16 chunk logits alone).
  const Recipe rc = parse_recipe("bf16/bf16/fp32/bf16");
  const gpu::WorkspaceQuery q{131072, 128256, 4096, DType::bf16, false, rc, true};
  const std::int64_t budget = std::int64_t{1} << 30;
  EXPECT_NO_THROW(gpu::plan_chunks(q, 0, 8192, "chunked"));
  try {
    gpu::plan_chunks(q, budget, 8192, "chunked");
    ADD_FAILURE() << "chunks of 8192 tokens accepted within 1 GiB";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("8192 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(budget)), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(gpu::plan_workspace(q, 8192).total())), std::string::npos) << m;
  }
  // Through the strategies: an explicit budget refuses, none keeps the chunk size.
  int checked = 0;
  for (const auto& s : make_strategies(Backend::cuda)) {
    const auto* cs = dynamic_cast<const gpu::CudaStrategy*>(s.get());
    if (cs == nullptr || !strategy_traits(cs->name()).chunks_tokens) continue;
    ++checked;
    EXPECT_THROW(cs->plan(q, budget, 8192), InputError) << cs->name();
    EXPECT_EQ(cs->plan(q, 0, 8192).rows, 8192) << cs->name();
    EXPECT_EQ(cs->plan(q, std::int64_t{8} << 30, 8192).rows, 8192) << cs->name();
  }
  // Every chunking strategy of the default set (the one the bench measures).
  EXPECT_EQ(checked, std::count_if(strategy_table().begin(), strategy_table().end(),
                                   [](const StrategyEntry& e) {
                                     return e.traits.chunks_tokens && e.traits.in_default_set;
                                   }));
}

TEST(BenchPlan, BudgetSizedChunksHoldAtMostKMaxChunkLogits) {
  const Recipe rc = parse_recipe("bf16/bf16/fp32/fp32");
  // The 128K preset: 4 GiB or 64 GiB of budget still give 8192-token chunks (2^30 / 128256 =
  // 8371, balanced over 16 chunks and rounded to 128).
  const gpu::WorkspaceQuery big{131072, 128256, 4096, DType::bf16, false, rc, true};
  for (std::int64_t gib : {4, 64}) {
    const gpu::WorkspacePlan p = gpu::plan_chunks(big, gib << 30, 0, "chunked");
    EXPECT_EQ(p.rows, 8192) << gib << " GiB";
    EXPECT_EQ(p.n_chunks, 16) << gib << " GiB";
    EXPECT_LE(p.rows * big.V, gpu::kMaxChunkLogits);
  }
  // Under the cap the whole batch is one chunk when it fits; a given chunk size is not capped.
  const gpu::WorkspaceQuery small_v{131072, 507, 64, DType::bf16, false, rc, true};
  EXPECT_EQ(gpu::plan_chunks(small_v, std::int64_t{4} << 30, 0, "chunked").rows, 131072);
  EXPECT_EQ(gpu::plan_chunks(big, 0, 16384, "chunked").rows, 16384);
  // Past the cap, one chunk still wins where several would not fit: with bf16 gradients several
  // chunks need a V·D fp32 dW accumulator (16 GiB here) that one chunk does not.
  const Recipe bf16_grads = parse_recipe("bf16/bf16/fp32/bf16");
  const gpu::WorkspaceQuery wide{2048, std::int64_t{1} << 20, 4096, DType::bf16, false, bf16_grads,
                                 true};
  const std::int64_t eight = std::int64_t{8} << 30;
  ASSERT_LE(gpu::plan_workspace(wide, 2048).total(), eight);
  EXPECT_GT(gpu::plan_workspace(wide, 1).total(), eight);
  EXPECT_EQ(gpu::plan_chunks(wide, eight, 0, "chunked").rows, 2048);
  // And where several fit but only in chunks smaller than the cap, one chunk as before the cap.
  const gpu::WorkspaceQuery mid{16384, 128256, 4096, DType::bf16, false, bf16_grads, true};
  const std::int64_t whole = gpu::plan_workspace(mid, 16384).total();
  const gpu::WorkspacePlan p = gpu::plan_chunks(mid, whole, 0, "chunked");
  EXPECT_EQ(p.rows, 16384) << "budget " << whole << " bytes";
}

TEST(BenchPlan, TheDefaultBudgetBoundsTheChunkBuffersNotTheAccumulators) {
  // The Llama-3-8B head with fp32 logits from bf16 inputs: W widened to fp32 (V·D·4 = 2.1 GB) is
  // needed whatever the chunk size, more than the 2 GiB default alone. The default sizes the
  // chunk buffers on top of it; an explicit budget still bounds everything.
  const std::int64_t V = 128256, D = 4096;
  for (const char* name : {"bf16/fp32/fp32/bf16", "bf16/fp32/fp32/fp32"}) {
    const gpu::WorkspaceQuery q{8192, V, D, DType::bf16, false, parse_recipe(name), true};
    const gpu::WorkspacePlan one = gpu::plan_workspace(q, 1), two = gpu::plan_workspace(q, 2);
    const std::int64_t per_row = two.total() - one.total(), fixed = one.total() - per_row;
    ASSERT_GE(fixed, V * D * 4) << name;
    // With 2 GiB for everything: refused (bf16 gradients: W in fp32 and the fp32 dW accumulator,
    // 4.2 GB) or chunks of a few dozen tokens (fp32 gradients accumulate in the output).
    try {
      EXPECT_LT(gpu::plan_chunks(q, gpu::kDefaultChunkBudget, 0, "chunked").rows, 128) << name;
    } catch (const InputError&) {
      EXPECT_GT(fixed, gpu::kDefaultChunkBudget) << name;
    }
    const gpu::WorkspacePlan p = gpu::plan_chunks(q, 0, 0, "chunked");
    EXPECT_GT(p.n_chunks, 1) << name;  // the fp32 logits of 8192 tokens alone are 4.2 GB
    EXPECT_GE(p.rows, 2048) << name;   // 2 GiB of chunk buffers: about 4000 tokens, balanced
    EXPECT_LE(p.total() - fixed, gpu::kDefaultChunkBudget) << name;
  }
  // The 128K preset with bf16 gradients: several chunks need the fp32 dW accumulator (2.1 GB);
  // inside a 2 GiB budget for everything that left room for 49-token chunks only.
  const gpu::WorkspaceQuery big{
      131072, V, D, DType::bf16, false, parse_recipe("bf16/bf16/fp32/bf16"), true};
  const gpu::WorkspacePlan p = gpu::plan_chunks(big, 0, 0, "chunked");
  EXPECT_EQ(p.rows, 8192);
  EXPECT_EQ(p.dW_acc, V * D * 4);
  // Where nothing is fixed the default plan is the one a 2 GiB budget gives.
  const gpu::WorkspaceQuery plain{
      131072, V, D, DType::bf16, false, parse_recipe("bf16/bf16/fp32/fp32"), true};
  EXPECT_EQ(gpu::plan_chunks(plain, 0, 0, "chunked").rows,
            gpu::plan_chunks(plain, gpu::kDefaultChunkBudget, 0, "chunked").rows);
}
#endif

#endif  // !XL_BENCH_GPU_TESTS

// ---- the program ------------------------------------------------------------------------------

using testing::expect_exit_2_naming;
using testing::Ran;
using testing::xentlab;

bool device_present() {
#ifdef XENTLAB_HAVE_CUDA
  return gpu::query_device().available;
#else
  return false;
#endif
}

#ifndef XL_BENCH_GPU_TESTS
TEST(BenchProgram, InvalidOptionsExit2NamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench --tokens 0 --vocab 10 --hidden 4", "--tokens must be at least 1"},
      {"bench --vocab 10 --hidden 4", "--tokens is required"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --strategies naive,flash",
       "unknown strategy 'flash'"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --recipes bf16/bf16", "four dtypes"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --memory-budget 4XB", "unknown unit"},
      {"bench --preset nope", "unknown preset 'nope'"},
      {"bench --tokens 1099511627776 --vocab 1048576 --hidden 8", "2^48"},
      {"bench --tokens 8 --vocab 10 --hidden 4 --csv /no/such/folder/x.csv", "does not exist"},
  };
  expect_exit_2_naming(cases);
  const Ran h = xentlab("bench --help");
  EXPECT_EQ(h.status, 0);
  for (const char* opt : {"--tokens", "--vocab", "--hidden", "--recipes", "--strategies",
                          "--memory-budget", "--repeats", "--warmup", "--sample-rows", "--preset",
                          "--chunk-tokens", "--csv", "--h5", "--markdown"})
    EXPECT_NE(h.output.find(opt), std::string::npos) << opt;
}

TEST(BenchProgram, CommandLinesThatDoNotParseExit2) {
  // CLI11's own codes (104, 106, 109, 114, …) are not the documented statuses.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "no command given"},
      {"frobnicate", "unknown command 'frobnicate'"},
      {"bench --no-such-option", "--no-such-option"},
      {"bench --tokens eight --vocab 10 --hidden 4", "--tokens"},
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

#else  // XL_BENCH_GPU_TESTS

/// The CSV's rows as maps column → value.
std::vector<std::map<std::string, std::string>> read_rows(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  const auto header = parse_csv(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    const auto f = parse_csv(line);
    EXPECT_EQ(f.size(), header.size()) << line;
    std::map<std::string, std::string> m;
    for (std::size_t i = 0; i < f.size() && i < header.size(); ++i) m[header[i]] = f[i];
    rows.push_back(m);
  }
  return rows;
}

std::size_t registered() {
  return make_strategies(Backend::cuda).size();
}

#define XL_REQUIRE_DEVICE() \
  if (!device_present()) GTEST_SKIP() << "no CUDA device: " << gpu::query_device().reason

TEST(BenchGpu, SmallRunEndToEnd) {
  XL_REQUIRE_DEVICE();
  testing::TempFolder t("bench-gpu");
  // 300 tokens in chunks of 128 (3 chunks; the dW sub-problem then runs 3 chunks of 3 rows).
  const Ran r = xentlab(
      "bench -N 300 -V 1000 -D 64 --repeats 2 --chunk-tokens 128 "
      "--recipes bf16/bf16/fp32/bf16,bf16/bf16/fp32/fp32,bf16/fp32/fp32/bf16 "
      "--csv " +
      t.path("b.csv") + " --h5 " + t.path("b.h5") + " --markdown " + t.path("b.md"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("TFLOP/s"), std::string::npos) << r.output;
  const auto rows = read_rows(t.path("b.csv"));
  ASSERT_EQ(rows.size(), 3 * registered()) << r.output;
  for (const auto& row : rows) {
    const std::string what = row.at("strategy") + " " + row.at("recipe") + ": " + row.at("message");
    if (row.at("status") == "not-supported") {
      EXPECT_FALSE(row.at("message").empty()) << what;
      continue;
    }
    ASSERT_EQ(row.at("status"), "ok") << what;
    EXPECT_EQ(row.at("repeats"), "2");
    EXPECT_GT(std::stod(row.at("median_ms")), 0.0) << what;
    EXPECT_GT(std::stoll(row.at("peak_extra_bytes")), 0) << what;
    EXPECT_TRUE(std::isfinite(std::stod(row.at("reduced_loss_full")))) << what;
    for (const char* e : {"err_loss", "err_lse", "err_reduced_loss", "err_dH", "err_dW_sub"}) {
      ASSERT_FALSE(row.at(e).empty()) << e << " " << what;
      const double v = std::stod(row.at(e));
      EXPECT_TRUE(std::isfinite(v)) << e << " " << what;
      EXPECT_LT(v, 0.1) << e << " " << what;  // a scaling or row-mapping bug gives O(1)
    }
  }
  const h5::File f = h5::File::open_read(t.path("b.h5"));
  EXPECT_EQ(f.open_group("sessions/000000/rows").children().size(), rows.size());
  std::ifstream md(t.path("b.md"));
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("| strategy | recipe | status"), std::string::npos);
}

TEST(BenchGpu, RefusalsAreRows) {
  XL_REQUIRE_DEVICE();
  testing::TempFolder t("bench-gpu");
  const Ran r = xentlab("bench -N 512 -V 4096 -D 64 --repeats 1 --memory-budget 4KiB --csv " +
                        t.path("b.csv"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto rows = read_rows(t.path("b.csv"));
  ASSERT_EQ(rows.size(), registered());
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("status"), "does-not-fit") << row.at("strategy") << ": " << row.at("message");
    EXPECT_FALSE(row.at("message").empty());
    EXPECT_GT(std::stoll(row.at("planned_extra_bytes")), 4096) << row.at("strategy");
  }
}

#endif  // XL_BENCH_GPU_TESTS

}  // namespace
}  // namespace xentlab::bench
