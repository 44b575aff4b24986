// `xentlab bench` on a device (test_bench_gpu, label "gpu", XL_BENCH_GPU_TESTS; skipped without a
// device): a small bench end to end through the program, its CSV rows checked (every registered
// strategy, finite and small errors against the reference, refusals as rows).
#ifndef XL_BENCH_GPU_TESTS
#error "gpu.cpp is test_bench_gpu's, built with XL_BENCH_GPU_TESTS (tests/CMakeLists.txt)"
#endif
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datasets/io/h5.hpp"
#include "gpu/registry.hpp"
#include "tests/harness/bench/bench_support.hpp"
#include "tests/support/program.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab::bench::bench_tests {
namespace {

using testing::Ran;
using testing::xentlab;

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
  if (!device_present()) GTEST_SKIP() << gpu::query_device().reason

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

// --gemms-alone: every strategy but fused has its GEMMs timed alone beside it. They are a part of
// its work, so they take no longer than the whole strategy (1.5× of it: room for the noise of a
// small problem's sub-millisecond runs).
TEST(BenchGpu, GemmsAloneArePartOfTheStrategysTime) {
  XL_REQUIRE_DEVICE();
  testing::TempFolder t("bench-gpu-gemms");
  const Ran r = xentlab(
      "bench -N 2048 -V 32000 -D 512 --repeats 5 --gemms-alone --sample-rows 0 "
      "--strategies naive,chunked,checkpointed,vocab_chunked,fused --json " +
      t.path("b.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("GEMMs ms"), std::string::npos) << r.output;
  std::ifstream in(t.path("b.json"));
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc.at("rows").size(), 5u) << r.output;
  for (const auto& row : doc.at("rows")) {
    const std::string what =
        row.at("strategy").get<std::string>() + ": " + row.at("message").get<std::string>();
    ASSERT_EQ(row.at("status"), "ok") << what;
    if (row.at("strategy") == "fused") {
      EXPECT_TRUE(row.at("gemms_alone_ms").is_null()) << what;  // one kernel: no GEMMs apart
      continue;
    }
    const double gemms = row.at("gemms_alone_ms").at("median").get<double>();
    EXPECT_GT(gemms, 0.0) << what;
    EXPECT_LT(gemms, 1.5 * row.at("time_ms").at("median").get<double>()) << what;
  }
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

}  // namespace
}  // namespace xentlab::bench::bench_tests
