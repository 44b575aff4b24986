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
#include <optional>
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
  /// Creates the temporary file and removes it again: proves, before any long work, that the
  /// folder takes a file of that name (permissions, a read-only file system, a name past the
  /// file system's limit: the temporary name is longer than the destination's). Throws
  /// OutputError naming the path and the reason otherwise (exit status 3: an output that cannot
  /// be written).
  void check_writable() const;
  /// Renames the temporary file onto path (atomic on POSIX within one file system). Checks again
  /// that path does not exist unless force (InputError); a rename that fails throws OutputError
  /// (the temporary is removed).
  void commit();

 private:
  std::string path_, temp_;
  bool force_ = false;
  bool committed_ = false;
};

/// Whether two output paths name one file, existing or not: the same spelling, the same path
/// once made absolute and normalized ("x", "./x", "dir/../x"; what exists is resolved through
/// links), or hard links to one existing file.
bool same_output_file(const std::string& a, const std::string& b);

/// By default the first temporary file written installs SIGINT/SIGTERM/SIGHUP handlers that remove
/// the temporaries being written and then end the process as the signal would (a command stopped
/// by Ctrl-C leaves no hidden file behind). A host with handlers of its own (the Python package:
/// Ctrl-C must raise KeyboardInterrupt, not end the interpreter) calls this first; its writes are
/// still atomic (temporary + rename), and a temporary is removed when the write fails.
void leave_signal_handlers_alone();

/// A location inside the temporary file of an AtomicOutput alive in this process, restated in
/// terms of the file the user asked for: `location` is the destination path followed by what
/// came after the temporary path in `where` (":/problem/W"), `temp_name` the temporary file's name.
struct OutputLocation {
  std::string location, temp_name;
};
/// The OutputLocation of `where` ("TEMP" or "TEMP:/inside"), or nullopt when `where` is not inside
/// an output being written. Used to report write failures (h5.cpp) by the name the user gave.
std::optional<OutputLocation> output_destination(const std::string& where);

/// An advisory exclusive lock (flock(2)) on the file "<path>.lock" beside `path`, held for the
/// object's lifetime; the constructor waits while another process holds it. Writers that append to
/// a shared file by copy, edit and rename (xentlab bench --csv/--h5) take it around the whole
/// read-modify-rename, so concurrent appends are serialized instead of losing rows. The lock file
/// is created when missing and left in place (removing it is safe when no writer is running).
/// Throws InputError naming the lock file when it cannot be created or locked.
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();
  const std::string& lock_path() const { return lock_path_; }

 private:
  std::string lock_path_;
  int fd_ = -1;
};

}  // namespace xentlab
