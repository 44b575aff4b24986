#pragma once
// The set-up shared by the tests of the xentlab program (tests/cli/*.cpp: one executable, test_cli,
// label "cpu", tests/CMakeLists.txt): the program run as a user runs it
// (tests/support/program.hpp), two file helpers, and the fixture of the commands that take a
// dataset (golden, audit, reference, datasets).
//
// The xentlab program's refusals and file handling, run as a user runs them (the binary, its exit
// status and its output): verify's number options, --junit on a re-run, --require; golden's and
// audit's dataset paths and loss-spec checks; the loss options reference, golden and audit share;
// audit's, --append's and candidate's refusals; the datasets listing's suggestion; and
// tools/scripts/plot_audit.py (bad input, existing plots, --force; skipped where its Python
// lacks h5py or matplotlib).
//
// The tests, by command: verify.cpp (verify and candidate), datasets.cpp (dataset paths, the
// normaliser and upstream gradient, the listing's suggestion), options/loss.cpp (the loss options
// every command shares), audit.cpp, scripts.cpp (examples/torch_candidate.py and
// tools/scripts/plot_audit.py), options/reference.cpp (the reference tier and memory budget).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/support/program.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab::cli_tests {
namespace fs = std::filesystem;
using testing::expect_exit_2_naming;
using testing::Ran;
using testing::shell_quote;
using testing::xentlab;

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The interpreter the README runs examples/torch_candidate.py with: the build folder's virtual
// environment (tools/setup.sh --python, which has h5py and numpy), else python3; empty when neither
// imports them (a test of the example then skips).
inline std::string example_python() {
  for (const std::string& py : {std::string(XL_VENV_PYTHON), std::string("python3")}) {
    if (py != "python3" && !fs::exists(py)) continue;
    if (testing::run_shell(shell_quote(py) + " -c 'import h5py, numpy'").status == 0) return py;
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// A temporary folder for the files of the commands that take a dataset (golden, audit, reference).
class DatasetProgram : public testing::TempFolderTest {
 protected:
  DatasetProgram() : TempFolderTest("cli-datasets") {}
};

}  // namespace xentlab::cli_tests
