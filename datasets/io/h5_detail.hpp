#pragma once
// Internals that datasets/io/h5.cpp and datasets/io/h5_storage.cpp share; not part of the h5
// interface (datasets/io/h5.hpp).
#include <set>
#include <string>
#include <vector>

#include "datasets/io/h5.hpp"

namespace xentlab::h5::detail {

/// What the objects opened from one file share.
struct FileState {
  Compression compression;  ///< how datasets are written (File::set_compression)
  bool checksums = false;   ///< the root declares checksums="sha256": every dataset has a digest
  std::set<std::string> verified;  ///< paths of the datasets whose digest was checked
};

/// Switches HDF5's automatic error printing off for this thread (each entry point calls it).
void silence();
/// Throws FormatError "WHERE: WHAT (HDF5's reason)": a file that cannot be read as it claims.
[[noreturn]] void fail(const std::string& where, const std::string& what);
/// Throws OutputError for a failed create, write or flush (see h5.cpp).
[[noreturn]] void fail_write(const std::string& where, const std::string& what);
/// The path of child `name` of the object at path `base`.
std::string join(const std::string& base, const std::string& name);

/// The dataset creation property list of a dataset of extents dims and elements of elem bytes
/// written under c: the default (contiguous), or chunks of about 1 MiB with shuffle and deflate.
/// Throws OutputError naming `where` when HDF5 refuses it.
Handle creation_plist(const Compression& c, const std::vector<hsize_t>& dims, std::size_t elem,
                      const std::string& where);
/// The digest stored in the attribute sha256: SHA-256 of n bytes, 64 lowercase hex digits.
std::string digest_hex(const void* data, std::size_t n);

}  // namespace xentlab::h5::detail
