#include "datasets/tensor.hpp"

#include <fmt/format.h>

#include <cstring>

#include "numerics/error.hpp"

namespace xentlab {

Tensor::Tensor(DType dtype, std::vector<std::int64_t> shape, std::string name)
    : dtype_(dtype), shape_(std::move(shape)), name_(std::move(name)) {
  numel_ = 1;
  for (std::int64_t e : shape_) {
    if (e < 0) throw InputError(fmt::format("{}: negative extent {} in its shape", name_, e));
    if (e > 0 && numel_ > (std::int64_t{1} << 62) / e / size_of(dtype_))
      throw InputError(fmt::format("{}: shape too large to allocate", name_));
    numel_ *= e;
  }
  bytes_.resize(static_cast<std::size_t>(numel_) * size_of(dtype_));  // zeroed when allocated
}

double Tensor::get(std::int64_t i) const {
  const std::byte* p = bytes_.data() + static_cast<std::size_t>(i) * size_of(dtype_);
  switch (dtype_) {
    case DType::fp32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::fp64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::bf16: {
      std::uint16_t b;
      std::memcpy(&b, p, 2);
      return bf16_bits_to_double(b);
    }
    case DType::fp16: {
      std::uint16_t b;
      std::memcpy(&b, p, 2);
      return fp16_bits_to_double(b);
    }
  }
  return 0.0;
}

void Tensor::set(std::int64_t i, double v) {
  std::byte* p = bytes_.data() + static_cast<std::size_t>(i) * size_of(dtype_);
  switch (dtype_) {
    case DType::fp32: {
      const float f = static_cast<float>(v);  // IEEE conversion: round to nearest even
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::fp64:
      std::memcpy(p, &v, 8);
      return;
    case DType::bf16: {
      const std::uint16_t b = bf16_bits_from_double(v);
      std::memcpy(p, &b, 2);
      return;
    }
    case DType::fp16: {
      const std::uint16_t b = fp16_bits_from_double(v);
      std::memcpy(p, &b, 2);
      return;
    }
  }
}

void Tensor::read(std::int64_t first, std::int64_t n, double* out) const {
  // Exact conversions, element by element: in parallel over a large range (a row's read inside a
  // caller's parallel loop stays on its thread).
  const bool par = n >= (std::int64_t{1} << 20);
  switch (dtype_) {
    case DType::fp32: {
      const float* f = reinterpret_cast<const float*>(bytes_.data()) + first;
#pragma omp parallel for schedule(static) if (par)
      for (std::int64_t k = 0; k < n; ++k) out[k] = f[k];
      return;
    }
    case DType::fp64: {
      std::memcpy(out, bytes_.data() + first * 8, static_cast<std::size_t>(n) * 8);
      return;
    }
    case DType::bf16: {
      const auto* b = reinterpret_cast<const std::uint16_t*>(bytes_.data()) + first;
#pragma omp parallel for schedule(static) if (par)
      for (std::int64_t k = 0; k < n; ++k) {
        const std::uint32_t u = static_cast<std::uint32_t>(b[k]) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        out[k] = f;
      }
      return;
    }
    case DType::fp16: {
      const auto* b = reinterpret_cast<const std::uint16_t*>(bytes_.data()) + first;
#pragma omp parallel for schedule(static) if (par)
      for (std::int64_t k = 0; k < n; ++k) out[k] = fp16_bits_to_double(b[k]);
      return;
    }
  }
}

}  // namespace xentlab
