#pragma once
// The tests of the --json reports (tests/cli/json.cpp, tests/harness/bench/json.cpp): a report
// read back, and its validation against docs/schema/xentlab-report.schema.json by
// tests/support/validate_json.py with Python's jsonschema (the build folder's virtual environment,
// tools/setup.sh --python-venv, where it has the package, else python3). Set by
// tests/CMakeLists.txt: XL_SOURCE_DIR, XL_VENV_PYTHON.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/program.hpp"

namespace xentlab::testing {

/// The report at path, parsed (nlohmann's parse error, naming the position, when it is no JSON).
inline nlohmann::json read_report(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return nlohmann::json::parse(in);
}

/// What validating the files against the schema gave: status 0 valid, 1 not (the errors in
/// output), 77 no Python with jsonschema was found.
inline Ran validate_reports(const std::vector<std::string>& files) {
  const std::string script = std::string(XL_SOURCE_DIR) + "/tests/support/validate_json.py";
  const std::string schema = std::string(XL_SOURCE_DIR) + "/docs/schema/xentlab-report.schema.json";
  std::string args;
  for (const std::string& f : files) args += " " + shell_quote(f);
  Ran r;
  r.status = 77;
  for (const std::string& py : {std::string(XL_VENV_PYTHON), std::string("python3")}) {
    if (py != "python3" && !std::filesystem::exists(py)) continue;
    r = run_shell(shell_quote(py) + " " + shell_quote(script) + " " + shell_quote(schema) + args);
    if (r.status != 77) return r;
  }
  return r;
}

}  // namespace xentlab::testing

/// EXPECTs that the files are valid reports of the schema; skips the test (naming why) where no
/// Python with jsonschema is found.
#define XL_EXPECT_VALID_REPORTS(...)                                                          \
  do {                                                                                        \
    const ::xentlab::testing::Ran xl_v = ::xentlab::testing::validate_reports({__VA_ARGS__}); \
    if (xl_v.status == 77)                                                                    \
      GTEST_SKIP() << "no Python with the jsonschema package (tools/setup.sh --python-venv "  \
                      "build/venv installs it): "                                             \
                   << xl_v.output;                                                            \
    EXPECT_EQ(xl_v.status, 0) << xl_v.output;                                                 \
  } while (0)
