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
#include <string>
#include <vector>

#include "gpu/registry.hpp"
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

/// Whether this build and machine have a CUDA device.
inline bool device_present() {
#ifdef XENTLAB_HAVE_CUDA
  return gpu::query_device().available;
#else
  return false;
#endif
}

}  // namespace xentlab::bench::bench_tests
