#pragma once
// Tensor: a dense, row-major host array stored in its own dtype (fp32, fp16, bf16 or fp64).
//
// Values are held exactly as stored (16-bit formats as their bit patterns), so every element reads
// back exactly as a double. Shapes and offsets are 64-bit: N·V and V·D past 2^31 elements work.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "numerics/dtype.hpp"
#include "numerics/host_array.hpp"

namespace xentlab {

class Tensor {
 public:
  Tensor() = default;
  /// Zero-filled tensor. Throws InputError for a negative extent or more than 2^62 bytes.
  Tensor(DType dtype, std::vector<std::int64_t> shape, std::string name = "tensor");

  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t dim(int k) const { return shape_.at(static_cast<std::size_t>(k)); }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  bool empty() const { return numel_ == 0; }
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  /// Element i (flat index) as an exact double.
  double get(std::int64_t i) const;
  /// Stores round_to(v, dtype()) at flat index i (round to nearest even).
  void set(std::int64_t i, double v);
  /// Copies n elements starting at flat index first into out, exactly.
  void read(std::int64_t first, std::int64_t n, double* out) const;

  /// Raw storage: dtype-sized elements, little-endian bit patterns for the 16-bit formats.
  const void* data() const { return bytes_.data(); }
  void* data() { return bytes_.data(); }
  std::size_t nbytes() const { return bytes_.size(); }

 private:
  DType dtype_ = DType::fp32;
  std::vector<std::int64_t> shape_;
  std::int64_t numel_ = 0;
  std::string name_ = "tensor";
  /// Zeroed in parallel when allocated (numerics/host_array.hpp): a Llama-3-8B head's W or a
  /// candidate's dW is a gigabyte or more.
  HostArray<std::byte> bytes_;
};

}  // namespace xentlab
