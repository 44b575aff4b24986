#pragma once
// SHA-256 (FIPS 180-4) of a byte string or a file, as 64 lowercase hexadecimal digits (the
// format of sha256sum). Used to check that a data file is the one the repository ships.
#include <cstddef>
#include <string>

namespace xentlab {

/// Digest of n bytes at data.
std::string sha256_hex(const void* data, std::size_t n);

/// Digest of the file's contents. Throws InputError naming the file when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace xentlab
