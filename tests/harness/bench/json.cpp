// `xentlab bench --json` without a device: the report of synthetic rows (harness/bench/report.hpp
// bench_json) says what the CSV rows say, with "nan" where a value was not measured; write_outputs
// writes it with the other outputs; the program refuses a --json it could not write before any
// measurement (exit 2) and writes none when there is no device (exit 4). Part of test_bench.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "harness/bench/report.hpp"
#include "tests/harness/bench/bench_support.hpp"
#include "tests/support/json_report.hpp"
#include "tests/support/program.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab::bench::bench_tests {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using testing::Ran;
using testing::shell_quote;
using testing::xentlab;

// The CSV's fields of a row by its header's names.
std::string field(const std::vector<std::string>& row, const std::string& name) {
  const std::vector<std::string> header = parse_csv(csv_header());
  for (std::size_t k = 0; k < header.size(); ++k)
    if (header[k] == name) return row.at(k);
  ADD_FAILURE() << "no CSV column " << name;
  return {};
}

TEST(BenchJson, RowsSayWhatTheCsvSays) {
  const BenchReport r = synthetic_report();
  // Through a dump and a parse, as a reader gets it.
  const json doc = json::parse(bench_json(r).dump());
  EXPECT_EQ(doc.at("format"), "xentlab-report");
  EXPECT_EQ(doc.at("command"), "bench");
  EXPECT_EQ(doc.at("provenance").at("command_line"), r.options.command_line);
  EXPECT_EQ(doc.at("provenance").at("started_utc"), r.meta.date_utc);
  EXPECT_EQ(doc.at("options").at("N"), 131072);
  EXPECT_EQ(doc.at("options").at("preset"), "llama3-8b-128k");
  EXPECT_EQ(doc.at("device").at("gpu"), "NVIDIA H200");
  EXPECT_EQ(doc.at("device").at("sm"), "9.0");
  EXPECT_EQ(doc.at("policy").at("name"), kJudgePolicy);
  EXPECT_FALSE(doc.at("quoted").at("rows").empty());
  ASSERT_EQ(doc.at("rows").size(), r.rows.size());
  for (std::size_t k = 0; k < r.rows.size(); ++k) {
    const json& row = doc.at("rows")[k];
    const std::vector<std::string> csv = parse_csv(csv_row(r, r.rows[k]));
    EXPECT_EQ(row.at("strategy"), field(csv, "strategy"));
    EXPECT_EQ(row.at("status"), field(csv, "status"));
    EXPECT_EQ(row.at("message"), field(csv, "message"));
    if (measured(r.rows[k].status)) {
      EXPECT_DOUBLE_EQ(row.at("time_ms").at("median").get<double>(),
                       std::stod(field(csv, "median_ms")));
      EXPECT_EQ(row.at("peak_extra_bytes"), std::stoll(field(csv, "peak_extra_bytes")));
      EXPECT_DOUBLE_EQ(row.at("errors").at("dH").get<double>(), std::stod(field(csv, "err_dH")));
      EXPECT_EQ(row.at("times_ms").size(), 3u);
    }
  }
  // The refusal for memory: not measured, so no times, no measured memory, errors "nan".
  const json& refused = doc.at("rows")[2];
  EXPECT_EQ(refused.at("status"), "does-not-fit");
  EXPECT_TRUE(refused.at("time_ms").is_null());
  EXPECT_TRUE(refused.at("peak_extra_bytes").is_null());
  EXPECT_EQ(refused.at("planned_extra_bytes"), std::int64_t{3} << 30);
  EXPECT_EQ(refused.at("tflops"), "nan");
  EXPECT_EQ(refused.at("errors").at("loss"), "nan");
  EXPECT_EQ(refused.at("rel_to_naive"), "nan");
}

class BenchJsonFiles : public testing::TempFolderTest {
 protected:
  BenchJsonFiles() : TempFolderTest("bench-json") {}
};

TEST_F(BenchJsonFiles, WrittenWithTheOtherOutputsAndValid) {
  BenchReport r = synthetic_report();
  r.options.json = path("b.json");
  r.options.csv = path("b.csv");
  const OutputReport out = write_outputs(r, false);
  EXPECT_TRUE(out.failures.empty());
  EXPECT_NE(out.stdout_text.find("json: " + path("b.json")), std::string::npos);
  const json doc = testing::read_report(path("b.json"));
  EXPECT_EQ(doc.at("rows").size(), r.rows.size());
  // A re-run replaces its own report; a file that is not one is not written, and named.
  EXPECT_TRUE(write_outputs(r, false).failures.empty());
  std::ofstream(path("notes.json")) << "{}\n";
  r.options.json = path("notes.json");
  r.options.csv.clear();
  const OutputReport refused = write_outputs(r, false);
  ASSERT_EQ(refused.failures.size(), 1u);
  EXPECT_NE(refused.failures[0].find("is not a JSON report of xentlab bench"), std::string::npos)
      << refused.failures[0];
  EXPECT_EQ(exit_status(r, refused), 1);
  std::ifstream in(path("notes.json"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "{}\n");
  XL_EXPECT_VALID_REPORTS(path("b.json"));
}

// The keys of --gemms-alone (and options.vocab_splits, rows' deterministic) came after
// schema_version 1's first bench reports: a report without them, as those were written, is still a
// valid schema_version 1 report.
TEST_F(BenchJsonFiles, ReportsWrittenBeforeTheGemmsAloneKeysStayValid) {
  BenchReport r = synthetic_report();
  r.options.json = path("b.json");
  ASSERT_TRUE(write_outputs(r, false).failures.empty());
  json doc = testing::read_report(path("b.json"));
  ASSERT_TRUE(doc.at("options").contains("gemms_alone"));
  doc.at("options").erase("vocab_splits");
  doc.at("options").erase("gemms_alone");
  for (json& row : doc.at("rows")) {
    ASSERT_TRUE(row.contains("gemms_alone_ms"));
    row.erase("gemms_alone_ms");
    row.erase("rel_to_gemms");
    row.erase("deterministic");
  }
  std::ofstream(path("older.json")) << doc.dump(2) << "\n";
  XL_EXPECT_VALID_REPORTS(path("b.json"), path("older.json"));
}

// --gemms-alone's fields against the schema: a row's own GEMMs (an object) and a row without them
// (null) are valid; a wrong type (a count of 0, a string for the flag, a time or determinism) is
// not valid. (The keys are optional: the test above.)
TEST_F(BenchJsonFiles, GemmsAloneFieldsAreTyped) {
  BenchReport r = synthetic_report();
  r.options.gemms_alone = true;
  r.options.vocab_splits = 4;
  r.rows[0].gemms_time = summarize_times({600.0, 610.0, 590.0});
  r.rows[0].rel_to_gemms = r.rows[0].time.median / 600.0;
  const json good = json::parse(bench_json(r).dump());
  ASSERT_TRUE(good.at("rows")[0].at("gemms_alone_ms").is_object());
  ASSERT_TRUE(good.at("rows")[1].at("gemms_alone_ms").is_null());
  const auto write = [&](const std::string& name, const json& doc) {
    std::ofstream(path(name)) << doc.dump();
    return path(name);
  };
  XL_EXPECT_VALID_REPORTS(write("good.json", good));
  std::vector<std::pair<std::string, json>> bad;
  json d = good;
  d.at("rows")[0].at("deterministic") = "yes";
  bad.emplace_back("deterministic a string", d);
  d = good;
  d.at("options").at("gemms_alone") = "yes";
  bad.emplace_back("gemms_alone a string", d);
  d = good;
  d.at("rows")[0].at("gemms_alone_ms").at("n") = 0;
  bad.emplace_back("gemms_alone_ms of n = 0", d);
  d = good;
  d.at("rows")[0].at("gemms_alone_ms").at("median") = "600";
  bad.emplace_back("a median as a string", d);
  d = good;
  d.at("rows")[0].at("gemms_alone_ms")["q1"] = 595.0;
  bad.emplace_back("gemms_alone_ms with a key of its own", d);
  d = good;
  d.at("options").at("vocab_splits") = -1;
  bad.emplace_back("vocab_splits negative", d);
  for (std::size_t k = 0; k < bad.size(); ++k) {
    const Ran v =
        testing::validate_reports({write("bad" + std::to_string(k) + ".json", bad[k].second)});
    EXPECT_EQ(v.status, 1) << bad[k].first << "\n" << v.output;
  }
}

TEST_F(BenchJsonFiles, ProgramRefusesAJsonItCannotWriteBeforeMeasuring) {
  const std::string small = "bench -N 8 -V 10 -D 4 --strategies naive --repeats 1 ";
  std::ofstream(path("notes.txt")) << "my notes\n";
  testing::expect_exit_2_naming({
      {small + "--json " + shell_quote(path("nowhere/b.json")), "does not exist"},
      {small + "--json " + shell_quote(dir_.string()), "is a folder"},
      {small + "--json " + shell_quote(path("notes.txt")), "is not a JSON report of xentlab bench"},
      {small + "--json " + shell_quote(path("b.x")) + " --csv " + shell_quote(path("b.x")),
       "are the same file"},
      {small + "--json ''", "--json"},
  });
  EXPECT_FALSE(fs::exists(path("nowhere")));
  if (device_present()) GTEST_SKIP() << "a CUDA device is present: the bench runs for real";
  const Ran r = xentlab(small + "--json " + shell_quote(path("b.json")));
  EXPECT_EQ(r.status, 4) << r.output;
  EXPECT_FALSE(fs::exists(path("b.json")));  // nothing measured, nothing written
}

}  // namespace
}  // namespace xentlab::bench::bench_tests
