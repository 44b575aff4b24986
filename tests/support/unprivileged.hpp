#pragma once
// Permission tests (a read-only folder, an unreadable or read-only file) are about ordinary users:
// root reads and writes any file, so under root (containers, CI) the check runs in a child process
// that has given up root for the user "nobody" (uid/gid 65534). Files it must create go in a
// folder it may write to (the caller makes it so).
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <functional>

namespace xentlab::test {

/// Exit status of a child that could not give up root.
inline constexpr int kCannotDropRoot = 77;

/// Runs `check` in a child process without root's privileges; the child's exit status is 0 when
/// `check` returns true, 1 when it returns false or throws (the reason printed on stderr), and
/// kCannotDropRoot when the privileges could not be dropped (the caller skips).
inline int run_unprivileged(const std::function<bool()>& check) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (::geteuid() == 0 &&
        (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
      ::_exit(kCannotDropRoot);
    bool ok = false;
    try {
      ok = check();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "unprivileged check threw: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(ok ? 0 : 1);
  }
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
  return WEXITSTATUS(st);
}

}  // namespace xentlab::test

/// EXPECTs that `check` (a lambda returning bool) holds for an ordinary user; skips the test when
/// running as root without the means to drop privileges.
#define XL_EXPECT_UNPRIVILEGED(check)                                                  \
  do {                                                                                 \
    const int xl_rc = ::xentlab::test::run_unprivileged(check);                        \
    if (xl_rc == ::xentlab::test::kCannotDropRoot) GTEST_SKIP() << "cannot drop root"; \
    EXPECT_EQ(xl_rc, 0) << "the unprivileged check failed (see its stderr)";           \
  } while (0)
