#pragma once
// Program-level tests: runs a command line through the shell and captures its exit status and its
// output (stdout and stderr together). xentlab(args) runs the program under test (XENTLAB_BIN, set
// by tests/CMakeLists.txt for the test binaries that use it).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace xentlab::testing {

struct Ran {
  int status = -1;     ///< exit status (-1: did not exit normally, or could not be started)
  std::string output;  ///< stdout and stderr
};

/// Runs `command` with sh, stderr joined to stdout.
inline Ran run_shell(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  Ran r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

/// s quoted for sh as one word.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

#ifdef XENTLAB_BIN
/// The xentlab program with these arguments (shell syntax).
inline Ran xentlab(const std::string& args) {
  return run_shell(std::string(XENTLAB_BIN) + " " + args);
}

/// Each (arguments, message): the program exits 2 and its output contains the message.
inline void expect_exit_2_naming(const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [args, message] : cases) {
    const Ran r = xentlab(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  }
}
#endif

}  // namespace xentlab::testing
