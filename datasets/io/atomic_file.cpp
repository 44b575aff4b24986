#include "datasets/io/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "numerics/error.hpp"

namespace xentlab {
namespace fs = std::filesystem;
namespace {

// Temporary files being written, removed by a SIGINT/SIGTERM/SIGHUP handler so that an interrupted
// run leaves neither a half-written destination (that never happens: rename is the last step) nor
// a hidden temporary. Fixed storage: unlink() is async-signal-safe, allocation is not.
constexpr std::size_t kMaxTemps = 16;
constexpr std::size_t kMaxTempPath = 4096;
char g_temps[kMaxTemps][kMaxTempPath];
volatile std::sig_atomic_t g_used[kMaxTemps];
// The destination of each registered temporary (not touched by the signal handler).
std::string g_dests[kMaxTemps];
std::mutex g_dests_mutex;

extern "C" void remove_temps_and_reraise(int sig) {
  for (std::size_t k = 0; k < kMaxTemps; ++k)
    if (g_used[k]) ::unlink(g_temps[k]);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::atomic<bool> g_signal_cleanup{true};

void register_temp(const std::string& path, const std::string& dest) {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!g_signal_cleanup.load()) return;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, remove_temps_and_reraise);
  });
  std::lock_guard<std::mutex> lock(g_dests_mutex);
  for (std::size_t k = 0; k < kMaxTemps; ++k)
    if (!g_used[k]) {
      std::snprintf(g_temps[k], kMaxTempPath, "%s", path.c_str());
      g_dests[k] = dest;
      g_used[k] = 1;
      return;
    }
}

void unregister_temp(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_dests_mutex);
  for (std::size_t k = 0; k < kMaxTemps; ++k)
    if (g_used[k] && path == g_temps[k]) {
      g_used[k] = 0;
      return;
    }
}

}  // namespace

void leave_signal_handlers_alone() {
  g_signal_cleanup.store(false);
}

bool same_output_file(const std::string& a, const std::string& b) {
  if (a == b) return true;
  auto canonical = [](const std::string& p) {
    std::error_code ec;
    const fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
    return ec ? fs::path(p).lexically_normal() : c;
  };
  std::error_code ec;
  return canonical(a) == canonical(b) || fs::equivalent(a, b, ec);
}

std::optional<OutputLocation> output_destination(const std::string& where) {
  std::lock_guard<std::mutex> lock(g_dests_mutex);
  for (std::size_t k = 0; k < kMaxTemps; ++k) {
    if (!g_used[k]) continue;
    const std::string temp = g_temps[k];
    if (where.compare(0, temp.size(), temp) != 0) continue;
    if (where.size() > temp.size() && where[temp.size()] != ':') continue;
    return OutputLocation{g_dests[k] + where.substr(temp.size()),
                          fs::path(temp).filename().string()};
  }
  return std::nullopt;
}

AtomicOutput::AtomicOutput(std::string path, bool force) : path_(std::move(path)), force_(force) {
  if (path_.empty()) throw InputError("output path is empty");
  const fs::path p(path_);
  std::error_code ec;
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw InputError(fmt::format("{}: the folder {} does not exist", path_, dir.string()));
  if (fs::is_directory(p, ec)) throw InputError(fmt::format("{}: is a folder", path_));
  const fs::file_status st = fs::symlink_status(p, ec);
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw InputError(fmt::format(
        "{}: exists and is not a regular file (a device, FIFO, socket or link): refusing to "
        "replace it, even with --force",
        path_));
  if (fs::exists(st) && !force_)
    throw InputError(fmt::format("{}: the file exists; pass --force to overwrite it", path_));
  static std::atomic<int> counter{0};
  temp_ =
      (dir / fmt::format(".{}.tmp-{}-{}", p.filename().string(), ::getpid(), counter++)).string();
  if (temp_.size() >= kMaxTempPath) throw InputError(fmt::format("{}: path too long", path_));
  register_temp(temp_, path_);
}

AtomicOutput::~AtomicOutput() {
  if (!committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);  // nothing to report from a destructor; the destination is untouched
  }
  unregister_temp(temp_);
}

void AtomicOutput::check_writable() const {
  errno = 0;
  std::ofstream f(temp_, std::ios::binary);
  const int err = errno;
  if (!f)
    throw OutputError(fmt::format("{}: cannot create the temporary file {} beside it: {}", path_,
                                  fs::path(temp_).filename().string(),
                                  err != 0 ? std::strerror(err) : "unknown error"));
  f.close();
  std::error_code ec;
  fs::remove(temp_, ec);
}

void AtomicOutput::commit() {
  std::error_code ec;
  if (!fs::exists(temp_, ec))
    throw InputError(fmt::format("{}: the temporary file {} was not written", path_, temp_));
  if (fs::exists(path_, ec) && !force_)
    throw InputError(
        fmt::format("{}: the file appeared while writing; pass --force to overwrite it", path_));
  fs::rename(temp_, path_, ec);
  if (ec)
    throw OutputError(
        fmt::format("{}: cannot rename {} into place: {}", path_, temp_, ec.message()));
  committed_ = true;
}

FileLock::FileLock(const std::string& path) : lock_path_(path + ".lock") {
  fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0 && errno == EACCES)  // another user's lock file: flock needs no write access
    fd_ = ::open(lock_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    throw OutputError(
        fmt::format("{}: cannot open the lock file: {}", lock_path_, std::strerror(errno)));
  int r;
  while ((r = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
  }
  if (r != 0) {
    const int err = errno;
    ::close(fd_);
    throw OutputError(fmt::format("{}: cannot lock: {}", lock_path_, std::strerror(err)));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
}

}  // namespace xentlab
