// xentlab._xentlab: arrays in and out (see common.hpp).
#include <cstring>
#include <limits>

#include "numerics/error.hpp"
#include "python/src/common.hpp"

namespace xentlab::python {
namespace {

std::string dtype_text(dl::dtype t) {
  const char* code = t.code == static_cast<std::uint8_t>(dl::dtype_code::Int)      ? "int"
                     : t.code == static_cast<std::uint8_t>(dl::dtype_code::UInt)   ? "uint"
                     : t.code == static_cast<std::uint8_t>(dl::dtype_code::Float)  ? "float"
                     : t.code == static_cast<std::uint8_t>(dl::dtype_code::Bfloat) ? "bfloat"
                     : t.code == static_cast<std::uint8_t>(dl::dtype_code::Bool)   ? "bool"
                                                                                   : "complex";
  return fmt::format("{}{}", code, t.bits);
}

/// Calls f(byte pointer of element i) for every element in row-major order of the logical shape,
/// following the array's strides (in elements; negative and zero strides included).
template <class F>
void for_each_element(const AnyArray& a, F&& f) {
  const std::size_t nd = a.ndim();
  const std::size_t item = a.itemsize();
  const auto* base = static_cast<const std::uint8_t*>(a.data());
  std::size_t total = 1;
  for (std::size_t k = 0; k < nd; ++k) total *= a.shape(k);
  if (total == 0) return;
  std::vector<std::size_t> idx(nd, 0);
  std::int64_t offset = 0;  // elements
  for (std::size_t n = 0; n < total; ++n) {
    f(base + offset * static_cast<std::int64_t>(item));
    for (std::size_t k = nd; k-- > 0;) {
      if (++idx[k] < a.shape(k)) {
        offset += a.stride(k);
        break;
      }
      offset -= a.stride(k) * static_cast<std::int64_t>(a.shape(k) - 1);
      idx[k] = 0;
    }
  }
}

}  // namespace

void require_host(const AnyArray& a, const std::string& name) {
  if (a.device_type() != nb::device::cpu::value)
    throw nb::type_error(
        fmt::format("{}: the array is not in host memory (DLPack device type {}); the lab reads "
                    "host arrays (tensor.cpu())",
                    name, a.device_type())
            .c_str());
}

/// The lab's dtype of a float array. bf16_bits: the caller (python/xentlab/_arrays.py) passes a
/// numpy bfloat16 array (ml_dtypes) as its uint16 view, since numpy exports no bfloat16 by DLPack.
DType float_dtype(const AnyArray& a, const std::string& name, bool bf16_bits) {
  const dl::dtype t = a.dtype();
  if (t.lanes == 1) {
    if (t.code == static_cast<std::uint8_t>(dl::dtype_code::Float)) {
      if (t.bits == 32) return DType::fp32;
      if (t.bits == 16) return DType::fp16;
      if (t.bits == 64) return DType::fp64;
    }
    if (t.code == static_cast<std::uint8_t>(dl::dtype_code::Bfloat) && t.bits == 16)
      return DType::bf16;
    if (bf16_bits && t.code == static_cast<std::uint8_t>(dl::dtype_code::UInt) && t.bits == 16)
      return DType::bf16;
  }
  throw nb::type_error(fmt::format("{}: dtype {} is not a float format of the lab (float32, "
                                   "float16, bfloat16, float64)",
                                   name, dtype_text(t))
                           .c_str());
}

Tensor tensor_from(const AnyArray& a, const std::string& name, bool matrix, bool bf16_bits) {
  require_host(a, name);
  const DType dt = float_dtype(a, name, bf16_bits);
  std::vector<std::int64_t> shape;
  if (matrix) {
    if (a.ndim() < 2)
      throw InputError(fmt::format("{}: expected a 2-D array (rows, columns), got {} dimension(s)",
                                   name, a.ndim()));
    std::int64_t rows = 1;
    for (std::size_t k = 0; k + 1 < a.ndim(); ++k) rows *= static_cast<std::int64_t>(a.shape(k));
    shape = {rows, static_cast<std::int64_t>(a.shape(a.ndim() - 1))};
  } else {
    if (a.ndim() != 1)
      throw InputError(
          fmt::format("{}: expected a 1-D array, got {} dimension(s)", name, a.ndim()));
    shape = {static_cast<std::int64_t>(a.shape(0))};
  }
  Tensor t(dt, shape, name);
  auto* out = static_cast<std::uint8_t*>(t.data());
  const std::size_t item = static_cast<std::size_t>(size_of(dt));
  std::size_t i = 0;
  for_each_element(a, [&](const std::uint8_t* p) { std::memcpy(out + item * i++, p, item); });
  return t;
}

/// Integer targets (any integer dtype, any rank: flattened), as int64.
std::vector<std::int64_t> targets_from(const AnyArray& a) {
  require_host(a, "targets");
  const dl::dtype t = a.dtype();
  const bool is_int = t.code == static_cast<std::uint8_t>(dl::dtype_code::Int);
  const bool is_uint = t.code == static_cast<std::uint8_t>(dl::dtype_code::UInt);
  if (t.lanes != 1 || !(is_int || is_uint) ||
      !(t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64))
    throw nb::type_error(
        fmt::format("targets: dtype {} is not an integer dtype (class indices)", dtype_text(t))
            .c_str());
  std::vector<std::int64_t> out;
  out.reserve(a.size());
  for_each_element(a, [&](const std::uint8_t* p) {
    std::int64_t v = 0;
    switch (t.bits) {
      case 8:
        v = is_int ? *reinterpret_cast<const std::int8_t*>(p) : *p;
        break;
      case 16: {
        std::uint16_t u;
        std::memcpy(&u, p, 2);
        v = is_int ? static_cast<std::int16_t>(u) : u;
        break;
      }
      case 32: {
        std::uint32_t u;
        std::memcpy(&u, p, 4);
        v = is_int ? static_cast<std::int32_t>(u) : static_cast<std::int64_t>(u);
        break;
      }
      default: {
        std::uint64_t u;
        std::memcpy(&u, p, 8);
        if (is_uint && u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          throw InputError(
              fmt::format("targets[{}] = {}: beyond the range of int64", out.size(), u));
        v = static_cast<std::int64_t>(u);
      }
    }
    out.push_back(v);
  });
  return out;
}

/// (array, dtype name): the tensor's stored bits in a numpy array of its width.
nb::tuple tensor_raw(const Tensor& t) {
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  const auto* p = static_cast<const std::uint8_t*>(t.data());
  const std::string name(to_string(t.dtype()));
  switch (t.dtype()) {
    case DType::fp64:
      return nb::make_tuple(
          owned(std::vector<double>(reinterpret_cast<const double*>(p),
                                    reinterpret_cast<const double*>(p) + t.numel()),
                shape, nb::dtype<double>()),
          name);
    case DType::fp32:
      return nb::make_tuple(owned(std::vector<float>(reinterpret_cast<const float*>(p),
                                                     reinterpret_cast<const float*>(p) + t.numel()),
                                  shape, nb::dtype<float>()),
                            name);
    default: {  // fp16 (numpy float16) and bf16 (uint16 bits)
      std::vector<std::uint16_t> bits(static_cast<std::size_t>(t.numel()));
      std::memcpy(bits.data(), p, bits.size() * 2);
      const dl::dtype dt = t.dtype() == DType::fp16
                               ? dl::dtype{static_cast<std::uint8_t>(dl::dtype_code::Float), 16, 1}
                               : nb::dtype<std::uint16_t>();
      return nb::make_tuple(owned(std::move(bits), shape, dt), name);
    }
  }
}

}  // namespace xentlab::python
