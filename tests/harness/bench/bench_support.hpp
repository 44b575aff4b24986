#pragma once
// The set-up shared by the tests of `xentlab bench` (tests/harness/bench/*.cpp). Two executables
// (tests/CMakeLists.txt):
//  - test_bench, label "cpu", no device needed: option parsing and validation (sizes, names, byte
//    sizes, the preset), the table/Markdown/CSV/HDF5 formats on synthetic rows, and the program
//    itself: invalid options exit 2 naming the option, valid ones on a machine without a CUDA
//    device exit 4 with "no CUDA device" (skipped where a device is present);
//  - test_bench_gpu (XL_BENCH_GPU_TESTS), label "gpu", skipped without a device: a small bench
//    run end to end through the program, its CSV rows checked (every registered strategy, finite
//    and small errors against the reference, refusals as rows).
//
// test_bench is options.cpp (timing statistics, byte sizes, options and the preset), report.cpp
// (rows, the table/Markdown/CSV/HDF5 formats and their files), plan.cpp (the chunk plans of a
// memory budget, CUDA builds) and program.cpp (the program's exit statuses); test_bench_gpu is
// gpu.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/registry.hpp"
#include "harness/bench/options.hpp"
#include "harness/bench/report.hpp"
#ifdef XENTLAB_HAVE_CUDA
#include "gpu/cuda/common/device.hpp"
#endif

namespace xentlab::bench::bench_tests {

// Every strategy of the registry, as known_strategies() gives the options on any build.
inline const std::vector<std::string> kKnown = [] {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategy_table()) names.emplace_back(e.name);
  return names;
}();

/// Splits one CSV record (RFC 4180) into fields.
inline std::vector<std::string> parse_csv(const std::string& line) {
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

/// A report of three rows as a bench on an H200 would make it (the preset, two measured rows and a
/// refusal for memory; names and messages with commas and quotes), for the formats' tests.
inline BenchReport synthetic_report() {
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

/// Whether this build and machine have a CUDA device.
inline bool device_present() {
#ifdef XENTLAB_HAVE_CUDA
  return gpu::query_device().available;
#else
  return false;
#endif
}

}  // namespace xentlab::bench::bench_tests
