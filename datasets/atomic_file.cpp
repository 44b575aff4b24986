#include "datasets/atomic_file.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "numerics/error.hpp"

namespace xentlab {
namespace fs = std::filesystem;

AtomicOutput::AtomicOutput(std::string path, bool force) : path_(std::move(path)), force_(force) {
  if (path_.empty()) throw InputError("output path is empty");
  const fs::path p(path_);
  std::error_code ec;
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw InputError(fmt::format("{}: the folder {} does not exist", path_, dir.string()));
  if (fs::exists(p, ec) && !force_)
    throw InputError(fmt::format("{}: the file exists; pass --force to overwrite it", path_));
  if (fs::is_directory(p, ec)) throw InputError(fmt::format("{}: is a folder", path_));
  static std::atomic<int> counter{0};
  temp_ =
      (dir / fmt::format(".{}.tmp-{}-{}", p.filename().string(), ::getpid(), counter++)).string();
}

AtomicOutput::~AtomicOutput() {
  if (!committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);  // nothing to report from a destructor; the destination is untouched
  }
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
    throw InputError(
        fmt::format("{}: cannot rename {} into place: {}", path_, temp_, ec.message()));
  committed_ = true;
}

}  // namespace xentlab
