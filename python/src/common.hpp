#pragma once
// Shared by the translation units of xentlab._xentlab (python/src): the array conversions
// (arrays.cpp) and the binders each file defines, which module.cpp calls in order.
#include <fmt/core.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
// Every translation unit sees the same type casters (a missing one would turn a std::vector or
// std::optional argument into an unbound type, found only when called).
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "datasets/tensor.hpp"
#include "judge/stats.hpp"
#include "numerics/dtype.hpp"

namespace nb = nanobind;

namespace xentlab::python {

using AnyArray = nb::ndarray<nb::ro>;
namespace dl = nb::dlpack;

// ---------------------------------------------------------------------------------------------
// Arrays in (arrays.cpp): any strides (a transposed or sliced view is read element by element),
// host memory.

/// TypeError unless the array is in host memory.
void require_host(const AnyArray& a, const std::string& name);
/// The lab's dtype of a float array. bf16_bits: the caller (python/xentlab/_arrays.py) passes a
/// numpy bfloat16 array (ml_dtypes) as its uint16 view, since numpy exports no bfloat16 by DLPack.
DType float_dtype(const AnyArray& a, const std::string& name, bool bf16_bits);
/// A Tensor with the array's values, bit for bit, in its own dtype. matrix: leading dimensions are
/// flattened into rows, (…, D) → (rows, D) (as the problem-file loaders do); else rank 1.
Tensor tensor_from(const AnyArray& a, const std::string& name, bool matrix, bool bf16_bits);
/// Integer targets (any integer dtype, any rank: flattened), as int64.
std::vector<std::int64_t> targets_from(const AnyArray& a);

// ---------------------------------------------------------------------------------------------
// Arrays out: numpy arrays that own a copy (float64 results; tensors in their dtype, bf16 as its
// uint16 bit pattern for python/xentlab/_arrays.py to view as bfloat16).

template <class T>
nb::ndarray<nb::numpy> owned(std::vector<T> v, std::vector<std::size_t> shape, dl::dtype dt) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy>(heap->data(), shape.size(), shape.data(), owner, nullptr, dt);
}

template <class C>
nb::ndarray<nb::numpy> f64(const C& v, std::vector<std::size_t> shape) {
  return owned(std::vector<double>(v.begin(), v.end()), std::move(shape), nb::dtype<double>());
}
inline nb::ndarray<nb::numpy> f64(const std::vector<double>& v) {
  return f64(v, {v.size()});
}
inline nb::ndarray<nb::numpy> i64(const std::vector<std::int64_t>& v) {
  return owned(v, {v.size()}, nb::dtype<std::int64_t>());
}

/// (array, dtype name): the tensor's stored bits in a numpy array of its width (arrays.cpp).
nb::tuple tensor_raw(const Tensor& t);

/// The statistics of one output as a dict (bind_verify.cpp; the audit's runs use it too).
nb::dict stats_dict(const ErrorStats& e);

// ---------------------------------------------------------------------------------------------
// The binders, in the order module.cpp calls them.

/// _LossSpec, make_spec, _Problem, load_dataset, catalog, linear_problem, logits_problem,
/// with_spec (bind_problem.cpp).
void bind_problem(nb::module_& m);
/// reference (bind_reference.cpp).
void bind_reference(nb::module_& m);
/// write_golden, random_upstream, _Golden, read_golden (bind_golden.cpp).
void bind_golden(nb::module_& m);
/// _VerifyPolicy, _VerifyReport, the verify functions, write_candidate (bind_verify.cpp).
void bind_verify(nb::module_& m);
/// _AuditProblems, run_audit, strategy_names, default_recipe_grid (bind_audit.cpp).
void bind_audit(nb::module_& m);

}  // namespace xentlab::python
