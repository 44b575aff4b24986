#pragma once
// Damaging an HDF5 file on purpose, for the tests of the readers' refusals: bytes flipped inside a
// contiguous dataset's stored data (its file offset from H5Dget_offset), as a bad disk or a stray
// write would leave them.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>

namespace xentlab::testing {

/// The file offset and size of the stored data of the contiguous dataset `dataset` in `file`
/// (fails the test when it is not contiguous or has no data).
inline std::pair<std::uint64_t, std::uint64_t> contiguous_extent(const std::string& file,
                                                                 const std::string& dataset) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << file;
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0) << file << ":" << dataset;
  const haddr_t at = H5Dget_offset(d);
  const hsize_t size = H5Dget_storage_size(d);
  H5Dclose(d);
  H5Fclose(f);
  EXPECT_NE(at, HADDR_UNDEF) << dataset << " is not contiguous";
  EXPECT_GT(size, 0u) << dataset;
  return {at, size};
}

/// Inverts the byte at `byte` (taken modulo the data's size) of the stored data of the contiguous
/// dataset `dataset` in `file`.
inline void flip_dataset_byte(const std::string& file, const std::string& dataset,
                              std::uint64_t byte) {
  const auto [at, size] = contiguous_extent(file, dataset);
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(io) << file;
  const auto pos = static_cast<std::streamoff>(at + byte % size);
  io.seekg(pos);
  char c = 0;
  io.read(&c, 1);
  c = static_cast<char>(~c);
  io.seekp(pos);
  io.write(&c, 1);
  ASSERT_TRUE(io) << file;
}

}  // namespace xentlab::testing
