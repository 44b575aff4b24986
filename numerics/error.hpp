#pragma once
// Exception types of xentlab. Every bad input is reported by throwing one of these with a message
// that names the offending tensor, row, value or file; nothing is silently clamped or skipped.
#include <stdexcept>
#include <string>

namespace xentlab {

/// Invalid user input: wrong shapes, non-finite values where they are not allowed, targets out of
/// range, sizes that are zero, negative or past the supported range.
class InputError : public std::invalid_argument {
 public:
  explicit InputError(const std::string& what) : std::invalid_argument(what) {}
};

/// A file that cannot be read as what it claims to be (truncated, foreign, wrong schema version).
class FormatError : public std::runtime_error {
 public:
  explicit FormatError(const std::string& what) : std::runtime_error(what) {}
};

/// An output file that could not be written (a full disk, an I/O error, permissions lost while
/// writing). The message names the destination the user asked for and the system's reason; the
/// destination itself is untouched (outputs are written to a temporary name, atomic_file.hpp).
class OutputError : public std::runtime_error {
 public:
  explicit OutputError(const std::string& what) : std::runtime_error(what) {}
};

/// A failure of the CUDA runtime or of cuBLAS (see gpu/cuda/common/cuda_check.hpp).
class DeviceError : public std::runtime_error {
 public:
  explicit DeviceError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace xentlab
