#pragma once
// Atomic output files: every writer of xentlab (golden, candidate, results) writes to a temporary
// file in the destination's folder and renames it into place only when the file is complete, so an
// interrupted run never leaves a half-written or clobbered file. An existing destination is kept
// unless the caller passes force (the CLI's --force).
//
// Use:
//   AtomicOutput out(path, force);          // throws InputError if path exists and !force
//   h5::File f = h5::File::create(out.temp_path());  … write …  f.close();
//   out.commit();                           // rename(temp, path); the destructor removes an
//                                           // uncommitted temporary
#include <string>

namespace xentlab {

class AtomicOutput {
 public:
  /// Checks that the destination folder exists and that path does not exist (unless force), and
  /// picks a fresh temporary name ".<name>.tmp-<pid>-<n>" beside it. Throws InputError naming the
  /// path otherwise.
  AtomicOutput(std::string path, bool force);
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  /// Removes the temporary file when commit() was not reached (an exception, an interrupted write).
  ~AtomicOutput();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  /// Renames the temporary file onto path (atomic on POSIX within one file system). Checks again
  /// that path does not exist unless force. Throws InputError on failure (the temporary is
  /// removed).
  void commit();

 private:
  std::string path_, temp_;
  bool force_ = false;
  bool committed_ = false;
};

}  // namespace xentlab
