// `xentlab bench`'s report (harness/bench/report.hpp), no device needed: rows, the table,
// Markdown, CSV and HDF5 formats on synthetic rows, and their files (appends, locks, concurrent
// writers, read-only files, sessions). Part of test_bench.
#include "harness/bench/report.hpp"

#include <fmt/format.h>
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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5.hpp"
#include "harness/bench/options.hpp"
#include "numerics/error.hpp"
#include "tests/harness/bench/bench_support.hpp"
#include "tests/support/temp_folder.hpp"
#include "tests/support/unprivileged.hpp"

namespace xentlab::bench::bench_tests {
namespace {
namespace fs = std::filesystem;

// ---- rows and formats -------------------------------------------------------------------------

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

// --gemms-alone: each row's own GEMMs beside it, in the terminal and Markdown tables (only when
// asked) and the JSON; a row without them shows a dash (null in the JSON).
TEST(BenchFormats, OwnGemmsTable) {
  BenchReport r = synthetic_report();
  EXPECT_EQ(format_table(r).find("GEMMs ms"), std::string::npos);  // not asked: no table
  r.options.gemms_alone = true;
  r.rows[0].gemms_time = summarize_times({600.0, 610.0, 590.0});
  r.rows[0].rel_to_gemms = r.rows[0].time.median / 600.0;
  const std::string t = format_table(r);
  EXPECT_NE(t.find("GEMMs ms"), std::string::npos) << t;
  EXPECT_NE(t.find("600.00"), std::string::npos) << t;
  EXPECT_NE(t.find(fmt::format("{:.3f}", 680.0 / 600.0)), std::string::npos) << t;
  const std::string md = format_markdown(r);
  EXPECT_NE(md.find("| strategy | recipe | median ms | GEMMs alone ms | × GEMMs |"),
            std::string::npos)
      << md;
  // The JSON carries them (the CSV's columns are those of earlier versions: appends go on).
  const auto j = bench_json(r);
  EXPECT_DOUBLE_EQ(j.at("rows")[0].at("gemms_alone_ms").at("median").get<double>(), 600.0);
  EXPECT_DOUBLE_EQ(j.at("rows")[0].at("rel_to_gemms").get<double>(), 680.0 / 600.0);
  EXPECT_TRUE(j.at("rows")[1].at("gemms_alone_ms").is_null());
  EXPECT_EQ(parse_csv(csv_header()).size(), parse_csv(csv_row(r, r.rows[0])).size());
}

// The registry's determinism per row: "yes"/"no" in the tables, a boolean in the JSON, a dash
// and null where unknown.
TEST(BenchFormats, DeterministicColumn) {
  BenchReport r = synthetic_report();
  r.rows[0].deterministic = true;
  r.rows[1].deterministic = false;
  r.rows[1].vocab_splits = 32;  // a strategy splitting the vocabulary: its splits beside its chunk
  const std::string md = format_markdown(r);
  EXPECT_NE(md.find("| 8192 × 32 vocabulary splits |"), std::string::npos) << md;
  EXPECT_NE(md.find("| vs naive | deterministic |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1.00× | yes |"), std::string::npos) << md;
  EXPECT_NE(md.find("× | no |"), std::string::npos) << md;
  EXPECT_NE(format_table(r).find("det."), std::string::npos);
  const auto j = bench_json(r);
  EXPECT_EQ(j.at("rows")[0].at("deterministic"), true);
  EXPECT_EQ(j.at("rows")[1].at("deterministic"), false);
  EXPECT_TRUE(j.at("rows")[2].at("deterministic").is_null());
  EXPECT_EQ(j.at("rows")[1].at("vocab_splits"), 32);
  EXPECT_EQ(j.at("rows")[0].at("vocab_splits"), 0);
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

/// The message of the OutputError that f throws (a folder or name that takes no file: exit 3).
template <class F>
std::string output_error(F&& f) {
  try {
    f();
  } catch (const OutputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no OutputError";
  return "";
}

TEST_F(BenchFiles, ChecksCreateTheTemporaryFile) {
  // A name the file system takes (250 ≤ 255 bytes), whose temporary name (".NAME.tmp-PID-N",
  // at least 1 + 250 + 5 + 1 + 1 + 1 = 259 bytes whatever the PID) it does not. (With 244 bytes
  // the temporary name fitted when the PID had 3 digits: the test failed after PID wrap-around.)
  const std::string long_name = path(std::string(246, 'b') + ".csv");
  for (auto check : {check_csv_target, check_h5_target}) {
    const std::string m = output_error([&] { check(long_name); });
    EXPECT_NE(m.find("cannot create the temporary file"), std::string::npos) << m;
    EXPECT_NE(m.find("File name too long"), std::string::npos) << m;
  }
  EXPECT_THROW(AtomicOutput(long_name, true).check_writable(), OutputError);
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
      } catch (const OutputError& e) {
        if (std::string(e.what()).find("Permission denied") == std::string::npos) return false;
      }
    }
    try {
      AtomicOutput(ro + ".md", false).check_writable();
      return false;
    } catch (const OutputError&) {
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

}  // namespace
}  // namespace xentlab::bench::bench_tests
