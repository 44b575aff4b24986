// xentlab._xentlab: the lab's C++ libraries as a Python extension (nanobind). A thin layer: every
// function here converts arrays and options and calls the library function the command line
// calls (reference/, datasets/, tools/golden/, tools/audit/); the Python package (python/xentlab)
// gives them their documented signatures. Errors keep the library's messages:
//   InputError  → xentlab.InputError  (a ValueError)     bad input, as `xentlab` exits 2
//   FormatError → xentlab.FormatError (a ValueError)     a file that is not what it claims
//   OutputError → xentlab.OutputError (an OSError)       an output that cannot be written
//   DeviceError → xentlab.DeviceError (a RuntimeError)
// An array of a dtype that is no float format of the lab, or not in host memory, is a TypeError.
#include <fmt/core.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "datasets/atomic_file.hpp"
#include "datasets/catalog.hpp"
#include "datasets/problem.hpp"
#include "datasets/tensor.hpp"
#include "gpu/registry.hpp"
#include "numerics/blas.hpp"
#include "numerics/dtype.hpp"
#include "numerics/error.hpp"
#include "numerics/loss_spec.hpp"
#include "numerics/recipe.hpp"
#include "numerics/stats.hpp"
#include "numerics/version.hpp"
#include "reference/reference.hpp"
#include "tools/audit/audit.hpp"
#include "tools/golden/golden_file.hpp"
#include "tools/golden/verify.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace xentlab::python {
namespace {

using AnyArray = nb::ndarray<nb::ro>;
namespace dl = nb::dlpack;

// ---------------------------------------------------------------------------------------------
// Arrays in: any strides (a transposed or sliced view is read element by element), host memory.

std::string dtype_text(dl::dtype t) {
  const char* code = t.code == static_cast<std::uint8_t>(dl::dtype_code::Int)      ? "int"
                     : t.code == static_cast<std::uint8_t>(dl::dtype_code::UInt)   ? "uint"
                     : t.code == static_cast<std::uint8_t>(dl::dtype_code::Float)  ? "float"
                     : t.code == static_cast<std::uint8_t>(dl::dtype_code::Bfloat) ? "bfloat"
                     : t.code == static_cast<std::uint8_t>(dl::dtype_code::Bool)   ? "bool"
                                                                                   : "complex";
  return fmt::format("{}{}", code, t.bits);
}

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

/// A Tensor with the array's values, bit for bit, in its own dtype. matrix: leading dimensions are
/// flattened into rows, (…, D) → (rows, D) (as the problem-file loaders do); else rank 1.
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
nb::ndarray<nb::numpy> f64(const std::vector<double>& v) {
  return f64(v, {v.size()});
}
nb::ndarray<nb::numpy> i64(const std::vector<std::int64_t>& v) {
  return owned(v, {v.size()}, nb::dtype<std::int64_t>());
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

// ---------------------------------------------------------------------------------------------
// Loss spec and problems.

LossSpec make_spec(std::int64_t ignore_index, double label_smoothing, double z_loss, double softcap,
                   double logit_scale, const std::string& reduction, const std::string& empty_mean,
                   std::int64_t normalizer) {
  LossSpec s;
  s.normalizer = normalizer;
  s.ignore_index = ignore_index;
  s.label_smoothing = label_smoothing;
  s.z_loss = z_loss;
  s.softcap = softcap;
  s.logit_scale = logit_scale;
  s.reduction = parse_reduction(reduction);
  if (empty_mean != "nan" && empty_mean != "zero")
    throw InputError(fmt::format("empty_mean '{}': expected nan or zero", empty_mean));
  s.empty_mean = empty_mean == "nan" ? EmptyMean::nan : EmptyMean::zero;
  s.validate();
  return s;
}

nb::dict spec_dict(const LossSpec& s) {
  nb::dict d;
  d["ignore_index"] = s.ignore_index;
  d["label_smoothing"] = s.label_smoothing;
  d["z_loss"] = s.z_loss;
  d["softcap"] = s.softcap;
  d["logit_scale"] = s.logit_scale;
  d["reduction"] = std::string(to_string(s.reduction));
  d["empty_mean"] = std::string(s.empty_mean == EmptyMean::nan ? "nan" : "zero");
  d["normalizer"] = s.normalizer;
  return d;
}

DatasetInstance instance_of(Problem p, const LossSpec& spec, const std::string& source) {
  DatasetInstance d;
  d.problem = std::move(p);
  d.spec = spec;
  d.source = source;
  d.generator = "python:arrays";
  d.regime = "arrays given from Python";
  return d;
}

// H and W in fp64 are refused when the problem is made, not when the reference first meets them,
// with the command's messages: for arrays, the problem-file loader's (datasets/loaders.cpp, after
// its file name); for a catalog problem generated in fp64, the reference's
// (reference/reference.cpp, compute_reference), which is where the command refuses it.
void refuse_fp64_arrays(DType h, DType w) {
  for (const auto& [name, dt] : {std::pair<const char*, DType>{"H", h}, {"W", w}})
    if (dt == DType::fp64)
      throw InputError(
          fmt::format("{} is float64; store H and W in float32, float16 or bf16 "
                      "(products of those are exact in double, which the reference "
                      "needs)",
                      name));
}

DatasetInstance linear_problem(const AnyArray& H, const AnyArray& W, std::optional<AnyArray> bias,
                               const AnyArray& targets, const LossSpec& spec,
                               const std::string& name, bool H_bits, bool W_bits, bool b_bits) {
  require_host(H, "H");
  require_host(W, "W");
  refuse_fp64_arrays(float_dtype(H, "H", H_bits), float_dtype(W, "W", W_bits));
  Tensor h = tensor_from(H, "H", true, H_bits);
  Tensor w = tensor_from(W, "W", true, W_bits);
  if (W.ndim() != 2)
    throw InputError(fmt::format("W: expected a 2-D array (V, D), got {} dimensions", W.ndim()));
  std::optional<Tensor> b;
  if (bias) b = tensor_from(*bias, "bias", false, b_bits);
  std::vector<std::int64_t> t = targets_from(targets);
  return instance_of(Problem::linear(std::move(h), std::move(w), std::move(b), std::move(t),
                                     spec.ignore_index, name),
                     spec, name);
}

DatasetInstance logits_problem(const AnyArray& Z, const AnyArray& targets, const LossSpec& spec,
                               const std::string& name, bool Z_bits) {
  Tensor z = tensor_from(Z, "logits", true, Z_bits);
  std::vector<std::int64_t> t = targets_from(targets);
  return instance_of(Problem::from_logits(std::move(z), std::move(t), spec.ignore_index, name),
                     spec, name);
}

DatasetInstance load(const std::string& name, std::optional<std::int64_t> N,
                     std::optional<std::int64_t> V, std::optional<std::int64_t> D,
                     std::optional<std::string> dtype, std::optional<double> sigma,
                     std::uint64_t seed, const std::map<std::string, double>& params,
                     std::int64_t ignore_index) {
  DatasetParams p;
  p.N = N;
  p.V = V;
  p.D = D;
  if (dtype) p.dtype = parse_dtype(*dtype);
  p.sigma = sigma;
  p.seed = seed;
  p.extra = params;
  // Calibrated targets where the command's default (--reference auto) draws them: on the GPU
  // when there is one, so a problem here is the command's on the same machine.
  p.targets = target_engine_for(ReferenceTier::automatic);
  DatasetInstance d = load_dataset(name, p, ignore_index);
  if (d.problem.is_linear() && d.problem.input_dtype() == DType::fp64)
    throw InputError("H/W in fp64 are not supported: products of fp64 values are not exact");
  return d;
}

nb::list catalog() {
  nb::list out;
  for (const DatasetEntry& e : dataset_catalog()) {
    nb::dict d;
    d["name"] = e.name;
    d["regime"] = e.regime;
    d["N"] = e.defaults.N;
    d["V"] = e.defaults.V;
    d["D"] = e.defaults.D;
    d["dtype"] = std::string(to_string(e.defaults.dtype));
    d["sigma"] = e.defaults.sigma;
    d["spec"] = spec_dict(e.defaults.spec);
    d["params"] = e.defaults.extra;
    d["fixed_shape"] = e.fixed_shape;
    out.append(d);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Reference.

nb::dict reference(const DatasetInstance& ds, const LossSpec& spec, const std::string& tier,
                   std::vector<std::int64_t> token_rows, std::vector<std::int64_t> vocab_rows,
                   bool want_dz, bool want_grads, std::int64_t memory_budget, int threads) {
  ReferenceOptions o;
  o.tier = parse_reference_tier(tier);
  o.token_rows = std::move(token_rows);
  o.vocab_rows = std::move(vocab_rows);
  o.want_dz = want_dz;
  const bool linear = ds.problem.is_linear();
  o.want_dH = o.want_dW = o.want_db = linear && want_grads;
  o.max_bytes = memory_budget;
  o.threads = threads;
  ReferenceResult r;
  {
    nb::gil_scoped_release release;
    r = compute_reference(ds.problem, spec, o);
  }
  const auto S = r.token_rows.size(), J = r.vocab_rows.size();
  const auto Dz = static_cast<std::size_t>(r.D), Vz = static_cast<std::size_t>(r.V);
  nb::dict d;
  d["tier"] = std::string(to_string(r.tier));
  d["N"] = r.N;
  d["V"] = r.V;
  d["D"] = r.D;
  d["n_valid"] = r.n_valid;
  d["partial"] = r.partial;
  d["token_rows"] = i64(r.token_rows);
  d["vocab_rows"] = i64(r.vocab_rows);
  d["reduced_loss"] = r.reduced_loss;
  d["reduced_loss_bound"] = r.reduced_loss_bound;
  for (const auto& [k, v] : {std::pair<const char*, const std::vector<double>*>{"loss", &r.loss},
                             {"loss_bound", &r.loss_bound},
                             {"lse", &r.lse},
                             {"lse_bound", &r.lse_bound},
                             {"ce", &r.ce},
                             {"z_term", &r.z_term},
                             {"max_logit", &r.max_logit},
                             {"p_target", &r.p_target},
                             {"entropy", &r.entropy},
                             {"sum_p_abs_z", &r.sum_p_abs_z},
                             {"grad_scale", &r.grad_scale}})
    d[k] = f64(*v);
  if (!r.db.empty()) {
    d["db"] = f64(r.db);
    d["db_bound"] = f64(r.db_bound);
  }
  if (!r.dH.empty()) {
    d["dH"] = f64(r.dH, {S, Dz});
    d["dH_bound"] = f64(r.dH_bound, {S, Dz});
    d["dH_cond"] = f64(r.dH_cond, {S, Dz});
  }
  if (!r.dW.empty()) {
    d["dW"] = f64(r.dW, {J, Dz});
    d["dW_bound"] = f64(r.dW_bound, {J, Dz});
    d["dW_cond"] = f64(r.dW_cond, {J, Dz});
  }
  if (!r.dz.empty()) {
    d["dz"] = f64(r.dz, {S, Vz});
    d["dz_bound"] = f64(r.dz_bound, {S, Vz});
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// Golden files.

nb::dict golden_write(const std::string& path, const DatasetInstance& ds, const LossSpec& spec,
                      std::int64_t rows, std::int64_t vocab_rows, std::uint64_t sample_seed,
                      bool gradients, const std::string& tier, std::int64_t memory_budget,
                      int threads, bool force, const std::string& command,
                      std::vector<double> upstream) {
  GoldenOptions o;
  o.upstream = std::move(upstream);
  o.rows = rows;
  o.vocab_rows = vocab_rows;
  o.sample_seed = sample_seed;
  o.gradients = gradients;
  o.tier = parse_reference_tier(tier);
  o.memory_budget = memory_budget;
  o.threads = threads;
  o.force = force;
  o.command = command;
  GoldenSummary s;
  {
    nb::gil_scoped_release release;
    s = write_golden(path, ds, spec, o);
  }
  nb::dict d;
  d["path"] = path;
  d["S"] = s.S;
  d["J"] = s.J;
  d["reduced_loss"] = s.reduced_loss;
  d["reduced_loss_bound"] = s.reduced_loss_bound;
  d["partial"] = s.partial;
  d["outputs"] = s.outputs;
  d["seconds"] = s.seconds;
  return d;
}

/// The reference arrays a golden file holds (name → the vector and its shape); empty ones are left
/// out. Covariates are per token row (S).
std::vector<std::pair<std::string, std::pair<const std::vector<double>*, std::vector<std::size_t>>>>
golden_array_table(const Golden& g, bool covariates) {
  const auto S = static_cast<std::size_t>(g.S), J = static_cast<std::size_t>(g.J);
  const auto Dz = static_cast<std::size_t>(g.D), Vz = static_cast<std::size_t>(g.V);
  std::vector<
      std::pair<std::string, std::pair<const std::vector<double>*, std::vector<std::size_t>>>>
      t;
  const auto put = [&](const char* name, const std::vector<double>& v,
                       std::vector<std::size_t> shape) {
    if (!v.empty()) t.push_back({name, {&v, std::move(shape)}});
  };
  if (covariates) {
    for (const auto& [k, v] :
         {std::pair<const char*, const std::vector<double>*>{"max_logit", &g.max_logit},
          {"p_target", &g.p_target},
          {"entropy", &g.entropy},
          {"sum_p_abs_z", &g.sum_p_abs_z},
          {"grad_scale", &g.grad_scale},
          {"target_logit", &g.target_logit},
          {"max_abs_logit", &g.max_abs_logit},
          {"mean_abs_logit", &g.mean_abs_logit},
          {"gemm_abs", &g.gemm_abs}})
      put(k, *v, {v->size()});
    return t;
  }
  put("loss", g.loss, {S});
  put("loss_bound", g.loss_bound, {S});
  put("lse", g.lse, {S});
  put("lse_bound", g.lse_bound, {S});
  put("dH", g.dH, {S, Dz});
  put("dH_bound", g.dH_bound, {S, Dz});
  put("dH_cond", g.dH_cond, {S, Dz});
  put("dW", g.dW, {J, Dz});
  put("dW_bound", g.dW_bound, {J, Dz});
  put("dW_cond", g.dW_cond, {J, Dz});
  put("db", g.db, {J});
  put("db_bound", g.db_bound, {J});
  put("db_cond", g.db_cond, {J});
  put("dz", g.dz, {S, Vz});
  put("dz_bound", g.dz_bound, {S, Vz});
  return t;
}

/// One array of a golden file as a read-only numpy view of the Golden's own storage, no copy: the
/// view keeps the Python object that owns the Golden alive. KeyError for a name it does not hold.
nb::object golden_view(nb::pointer_and_handle<Golden> g, const std::string& name, bool covariates) {
  for (const auto& [n, v] : golden_array_table(*g.p, covariates))
    if (n == name)
      return nb::cast(nb::ndarray<nb::numpy, const double>(v.first->data(), v.second.size(),
                                                           v.second.data(), g.h));
  throw nb::key_error(name.c_str());
}

std::vector<std::string> golden_array_names(const Golden& g, bool covariates) {
  std::vector<std::string> names;
  for (const auto& e : golden_array_table(g, covariates)) names.push_back(e.first);
  return names;
}

// ---------------------------------------------------------------------------------------------
// Verify.

nb::dict stats_dict(const ErrorStats& e) {
  nb::dict d;
  d["n"] = e.n;
  d["dtype"] = std::string(to_string(e.out_dtype));
  d["max_abs_err"] = e.max_abs_err;
  d["max_abs_err_index"] = e.max_abs_err_index;
  d["max_rel_err"] = e.max_rel_err;
  d["max_rel_err_index"] = e.max_rel_err_index;
  d["normwise_rel_err"] = e.normwise_rel_err;
  d["rms_abs_err"] = e.rms_abs_err;
  d["mean_abs_err"] = e.mean_abs_err;
  d["max_ulp"] = e.max_ulp;
  d["frac_ulp_le1"] = e.frac_ulp_le1;
  d["bias"] = e.bias;
  d["bias_stderr"] = e.bias_stderr;
  d["max_ratio"] = e.max_ratio;
  d["max_ratio_index"] = e.max_ratio_index;
  d["max_ratio_err"] = e.max_ratio_err;
  d["max_ratio_bound"] = e.max_ratio_bound;
  d["n_over_bound"] = e.n_over_bound;
  d["nonfinite_where_ref_finite"] = e.nonfinite_where_ref_finite;
  d["first_mismatch_index"] = e.first_mismatch_index;
  return d;
}

nb::dict output_dict(const OutputReport& o) {
  nb::dict d;
  d["name"] = o.name;
  d["status"] = o.status;
  d["message"] = o.message;
  d["dtype"] =
      o.dtype_known ? nb::object(nb::str(std::string(to_string(o.dtype)).c_str())) : nb::none();
  d["shape"] = o.shape;
  d["stats"] = o.stats ? nb::object(stats_dict(*o.stats)) : nb::none();
  d["index"] = o.index;
  d["element"] = o.element;
  d["candidate"] = o.candidate;
  d["reference"] = o.reference;
  d["error"] = o.error;
  d["tolerance"] = o.tolerance;
  // The differential check (docs/verify.md): its verdict, and the candidate's and the emulated
  // baseline's normwise error and relative-error quantile with the limits they were held to.
  d["bound_status"] = o.bound_status;
  d["differential_only"] = o.differential_only;
  nb::dict df;
  df["status"] = o.differential.status;
  df["message"] = o.differential.message;
  df["normwise"] = o.differential.candidate.normwise;
  df["baseline_normwise"] = o.differential.baseline.normwise;
  df["limit_normwise"] = o.differential.limit_normwise;
  df["rel_q"] = o.differential.candidate.rel_q;
  df["baseline_rel_q"] = o.differential.baseline.rel_q;
  df["limit_rel_q"] = o.differential.limit_rel_q;
  df["quantile_compared"] = o.differential.quantile_compared;
  d["differential"] = df;
  return d;
}

VerifyPolicy policy_of(std::optional<std::string> name, const std::string& strictness,
                       std::optional<double> k, std::optional<double> atol,
                       std::optional<double> rtol, const Golden& g) {
  if (atol || rtol) return make_explicit_policy(atol.value_or(0.0), rtol.value_or(0.0));
  return make_verify_policy(name ? *name : std::string(to_string(g.problem.input_dtype())),
                            strictness, k);
}

nb::dict verify(const Golden& g, const std::string& candidate, const VerifyPolicy& pol,
                const std::vector<std::string>& required, const std::string& check, bool explain,
                std::int64_t baseline_rows, std::uint64_t baseline_seed,
                const std::string& baseline_backend) {
  VerifyOptions opt;
  opt.required = required;
  opt.check = parse_verify_check(check);  // InputError naming the value, as the command's
  opt.explain = explain;
  opt.baseline.rows = baseline_rows;
  opt.baseline.seed = baseline_seed;
  // The device is asked for only where a baseline runs, as the command asks.
  const bool runs_baseline = !pol.explicit_tol && (opt.check != VerifyCheck::bound || explain);
  opt.baseline.backends = baseline_backends(baseline_backend, runs_baseline, "baseline_backend");
  VerifyReport r;
  {
    nb::gil_scoped_release release;
    r = verify_candidate(g, candidate, pol, opt);
  }
  nb::dict d;
  d["golden"] = r.golden;
  d["candidate"] = r.candidate;
  d["policy"] = r.policy;
  d["provenance"] = r.provenance;
  d["implementation"] = r.implementation;
  d["required"] = r.required;
  nb::list outs;
  for (const auto& o : r.outputs) outs.append(output_dict(o));
  d["outputs"] = outs;
  d["passed"] = r.passed;
  d["reason"] = r.reason;
  d["text"] = format_report(r);
  d["_report"] = nb::cast(std::move(r));
  return d;
}

// ---------------------------------------------------------------------------------------------
// Audit.

nb::dict run_record(const audit::RunRecord& r) {
  nb::dict d;
  d["problem"] = r.problem;
  d["regime"] = r.regime;
  d["strategy"] = r.strategy;
  d["backend"] = r.backend;
  d["device"] = r.device;
  d["recipe"] = r.recipe.name();
  d["spec"] = r.spec;
  d["chunk_tokens"] = r.chunk_tokens;
  d["upstream"] = r.upstream;
  d["input_dtype"] = std::string(to_string(r.input));
  d["disposition"] = std::string(to_string(r.verdict.disposition));
  d["output"] = r.verdict.output;
  d["reason"] = r.verdict.reason;
  d["max_ratio"] = r.verdict.ratio;
  d["bound_meaningful"] = r.bound_meaningful;
  d["bound_note"] = r.bound_note;
  d["baseline_note"] = r.baseline_note;
  d["seconds"] = r.seconds;
  nb::dict outs;
  for (const auto& o : r.outputs) outs[o.name.c_str()] = stats_dict(o.stats);
  d["outputs"] = outs;
  return d;
}

nb::dict verdict_row(const audit::VerdictRow& v) {
  nb::dict d;
  d["regime"] = v.regime;
  d["output"] = v.output;
  d["input"] = v.input;
  d["err_fp32_logits"] = v.err_fp32_logits;
  d["err_bf16_logits"] = v.err_bf16_logits;
  d["err_reduced_accum_best"] = v.err_reduced_accum_best;
  d["reduced_accum_best_recipe"] = v.reduced_accum_best_recipe;
  d["floor"] = v.floor;
  d["logits_bf16_ok"] = v.logits_bf16_ok;
  d["accum_fp32_needed"] = v.accum_fp32_needed;
  d["accum_tested"] = v.accum_tested;
  d["logits_why"] = v.logits_why;
  d["accum_why"] = v.accum_why;
  for (const auto& [name, a] :
       {std::pair<const char*, const audit::VerdictRow::Accum*>{"accum_bf16", &v.accum_bf16},
        {"accum_fp16", &v.accum_fp16}}) {
    nb::dict x;
    x["tested"] = a->tested;
    x["harmless"] = a->harmless;
    x["err"] = a->err;
    x["twin_err"] = a->twin_err;
    x["recipe"] = a->recipe;
    x["worst_err"] = a->worst_err;
    x["worst_twin_err"] = a->worst_twin_err;
    x["worst_recipe"] = a->worst_recipe;
    d[name] = x;
  }
  return d;
}

struct AuditProblems {
  std::vector<audit::AuditProblem> items;
};

nb::dict run_audit(const AuditProblems& ps, const std::vector<std::string>& strategies,
                   const std::vector<std::string>& recipes, const std::string& backend,
                   std::int64_t rows, std::int64_t vocab_rows, std::uint64_t seed,
                   const std::string& policy, const std::string& tier, std::int64_t memory_budget,
                   std::optional<std::string> out, bool force, bool append,
                   std::int64_t chunk_tokens, const std::string& upstream) {
  audit::AuditConfig cfg;
  cfg.chunk_tokens = chunk_tokens;
  cfg.upstream = upstream;
  cfg.strategies = strategies;
  for (const auto& r : recipes) cfg.recipes.push_back(parse_recipe(r));
  if (backend == "cpu") {
    cfg.backend = Backend::cpu_emulation;
    cfg.device = "cpu-emulation";
  } else {
    throw InputError(fmt::format(
        "backend '{}': the Python package audits on the CPU emulation (backend 'cpu'); the CUDA "
        "backend is `xentlab audit --backend cuda`",
        backend));
  }
  cfg.rows = rows;
  cfg.vocab_rows = vocab_rows;
  cfg.seed = seed;
  cfg.policy = policy;
  policy_by_name(policy);
  cfg.reference_tier = parse_reference_tier(tier);
  cfg.reference_memory = memory_budget;
  // append: a problem the file records as another is refused before the work.
  if (out && append) audit::check_append_problems(*out, ps.items, cfg);
  audit::AuditResult res;
  {
    nb::gil_scoped_release release;
    res = audit::run_audit(ps.items, cfg);
  }
  audit::require_some_run(res);
  if (out) {
    nb::gil_scoped_release release;
    audit::write_results(*out, res, cfg, force, append);
  }
  nb::dict d;
  nb::list runs, verdict;
  for (const auto& r : res.runs) runs.append(run_record(r));
  for (const auto& v : res.verdict) verdict.append(verdict_row(v));
  d["runs"] = runs;
  d["verdict"] = verdict;
  d["passed"] = res.passed;
  d["incorrect"] = res.incorrect;
  d["not_supported"] = res.not_supported;
  d["failed"] = res.failed;
  d["summary"] = audit::format_summary(res, false);
  d["markdown"] = audit::format_summary(res, true);
  return d;
}

}  // namespace
}  // namespace xentlab::python

NB_MODULE(_xentlab, m) {
  using namespace xentlab;
  using namespace xentlab::python;
  m.doc() = "The xentlab C++ libraries (python/src/module.cpp); use the package xentlab.";
  m.attr("__version__") = kVersion;
  // Python's own SIGINT handler raises KeyboardInterrupt: the library must not replace it with
  // the command's (which ends the process); writes stay atomic (datasets/atomic_file.hpp).
  leave_signal_handlers_alone();

  nb::exception<InputError>(m, "InputError", PyExc_ValueError);
  nb::exception<FormatError>(m, "FormatError", PyExc_ValueError);
  nb::exception<OutputError>(m, "OutputError", PyExc_OSError);
  nb::exception<DeviceError>(m, "DeviceError", PyExc_RuntimeError);

  m.def("blas_description", [] { return std::string(blas_description()); });
  m.def("preferred_blas_coretype", []() -> std::optional<std::string> {
    const char* c = preferred_blas_coretype();
    return c ? std::optional<std::string>(c) : std::nullopt;
  });
  m.def("cuda_reference_available", [] {
    std::string why;
    const bool ok = cuda_reference_available(&why);
    return std::make_pair(ok, why);
  });

  nb::class_<LossSpec>(m, "_LossSpec")
      .def("describe", &LossSpec::describe)
      .def("as_dict", [](const LossSpec& s) { return spec_dict(s); });
  m.def("make_spec", &make_spec, "ignore_index"_a, "label_smoothing"_a, "z_loss"_a, "softcap"_a,
        "logit_scale"_a, "reduction"_a, "empty_mean"_a, "normalizer"_a);

  nb::class_<DatasetInstance>(m, "_Problem")
      .def_prop_ro("N", [](const DatasetInstance& d) { return d.problem.N; })
      .def_prop_ro("V", [](const DatasetInstance& d) { return d.problem.V; })
      .def_prop_ro("D", [](const DatasetInstance& d) { return d.problem.D; })
      .def_prop_ro("name", [](const DatasetInstance& d) { return d.problem.name; })
      .def_prop_ro(
          "kind",
          [](const DatasetInstance& d) { return d.problem.is_linear() ? "linear" : "logits"; })
      .def_prop_ro(
          "input_dtype",
          [](const DatasetInstance& d) { return std::string(to_string(d.problem.input_dtype())); })
      .def_prop_ro("spec", [](const DatasetInstance& d) { return d.spec; })
      .def_prop_ro("source", [](const DatasetInstance& d) { return d.source; })
      .def_prop_ro("generator", [](const DatasetInstance& d) { return d.generator; })
      .def_prop_ro("regime", [](const DatasetInstance& d) { return d.regime; })
      .def_prop_ro(
          "targets", [](const DatasetInstance& d) { return i64(d.problem.targets); },
          nb::rv_policy::move)
      .def("describe", [](const DatasetInstance& d) { return d.problem.describe(); })
      .def("tensor", [](const DatasetInstance& d, const std::string& name) -> nb::object {
        const Problem& p = d.problem;
        if (name == "H" && p.is_linear()) return tensor_raw(p.H);
        if (name == "W" && p.is_linear()) return tensor_raw(p.W);
        if (name == "bias") return p.bias ? nb::object(tensor_raw(*p.bias)) : nb::none();
        if (name == "logits" && !p.is_linear()) return tensor_raw(p.logits);
        return nb::none();
      });
  m.def("load_dataset", &load, "name"_a, "N"_a.none(), "V"_a.none(), "D"_a.none(), "dtype"_a.none(),
        "sigma"_a.none(), "seed"_a, "params"_a, "ignore_index"_a);
  m.def("catalog", &catalog);
  m.def("linear_problem", &linear_problem, "H"_a, "W"_a, "bias"_a.none(), "targets"_a, "spec"_a,
        "name"_a, "H_bits"_a, "W_bits"_a, "b_bits"_a);
  m.def("logits_problem", &logits_problem, "logits"_a, "targets"_a, "spec"_a, "name"_a, "bits"_a);
  m.def("with_spec", [](const DatasetInstance& d, const LossSpec& s) {
    DatasetInstance c = d;
    c.problem.validate(s.ignore_index);
    c.spec = s;
    return c;
  });

  m.def("reference", &reference, "problem"_a, "spec"_a, "tier"_a, "token_rows"_a, "vocab_rows"_a,
        "dz"_a, "gradients"_a, "memory_budget"_a, "threads"_a);

  m.def("write_golden", &golden_write, "path"_a, "problem"_a, "spec"_a, "rows"_a, "vocab_rows"_a,
        "sample_seed"_a, "gradients"_a, "tier"_a, "memory_budget"_a, "threads"_a, "force"_a,
        "command"_a, "upstream"_a);
  m.def("random_upstream", &random_upstream, "N"_a, "seed"_a);
  nb::class_<Golden>(m, "_Golden")
      .def_ro("path", &Golden::path)
      .def_ro("N", &Golden::N)
      .def_ro("V", &Golden::V)
      .def_ro("D", &Golden::D)
      .def_ro("S", &Golden::S)
      .def_ro("J", &Golden::J)
      .def_ro("n_valid", &Golden::n_valid)
      .def_ro("partial", &Golden::partial)
      .def_ro("reduced_loss", &Golden::reduced_loss)
      .def_ro("reduced_loss_bound", &Golden::reduced_loss_bound)
      .def_ro("provenance", &Golden::provenance)
      .def_ro("spec", &Golden::spec)
      .def_prop_ro("upstream",
                   [](const Golden& g) -> nb::object {
                     if (g.upstream.empty()) return nb::none();
                     return nb::cast(f64(g.upstream));
                   })
      .def_prop_ro(
          "token_rows", [](const Golden& g) { return i64(g.token_rows); }, nb::rv_policy::move)
      .def_prop_ro(
          "vocab_rows", [](const Golden& g) { return i64(g.vocab_rows); }, nb::rv_policy::move)
      .def_prop_ro("problem",
                   [](const Golden& g) {
                     DatasetInstance d;
                     d.problem = g.problem;
                     d.spec = g.spec;
                     d.source = g.path;
                     d.generator = "golden";
                     return d;
                   })
      .def("array_names", &golden_array_names, "covariates"_a)
      .def("array", &golden_view, "name"_a, "covariates"_a);
  m.def("read_golden", [](const std::string& path) {
    nb::gil_scoped_release release;
    return read_golden(path);
  });

  nb::class_<VerifyPolicy>(m, "_VerifyPolicy")
      .def_ro("name", &VerifyPolicy::name)
      .def_prop_ro("k", [](const VerifyPolicy& p) { return p.explicit_tol ? 1.0 : p.judge.k; })
      .def("describe", [](const VerifyPolicy& p, const std::string& input_dtype) {
        return p.describe(parse_dtype(input_dtype));
      });
  nb::class_<VerifyReport>(m, "_VerifyReport");
  m.def(
      "verify_policy_name_check", [](const std::string& name) { (void)make_verify_policy(name); },
      "name"_a, "InputError (ValueError) naming a policy name verify does not know");
  m.def("verify_policy", &policy_of, "name"_a.none(), "strictness"_a, "k"_a.none(), "atol"_a.none(),
        "rtol"_a.none(), "golden"_a);
  m.def("check_tolerance_number", &check_tolerance_number, "option"_a, "value"_a, "zero_ok"_a);
  m.def("parse_required_outputs", &parse_required_outputs);
  m.def("candidate_output_names", &candidate_output_names);
  m.def("verify", &verify, "golden"_a, "candidate"_a, "policy"_a, "required"_a, "check"_a,
        "explain"_a, "baseline_rows"_a, "baseline_seed"_a, "baseline_backend"_a);
  m.def("check_junit_output", &check_junit_output, "path"_a, "force"_a);
  m.def("write_junit", [](const std::string& path, bool force, const VerifyReport& r) {
    write_junit(path, force, r);
  });
  m.def(
      "write_candidate",
      [](const std::string& path, bool force, const std::vector<std::string>& names,
         const std::vector<AnyArray>& arrays, const std::vector<bool>& bits,
         const std::string& implementation) {
        std::vector<std::pair<std::string, Tensor>> outs;
        for (std::size_t i = 0; i < names.size(); ++i) {
          const AnyArray& a = arrays[i];
          require_host(a, names[i]);
          Tensor t;
          if (a.ndim() == 0) {
            Tensor s(float_dtype(a, names[i], bits[i]), {}, names[i]);
            std::memcpy(s.data(), a.data(), s.nbytes());
            t = std::move(s);
          } else {
            t = tensor_from(a, names[i], a.ndim() >= 2, bits[i]);
          }
          outs.emplace_back(names[i], std::move(t));
        }
        write_candidate(path, force, outs, implementation);
      },
      "path"_a, "force"_a, "names"_a, "arrays"_a, "bits"_a, "implementation"_a);

  nb::class_<AuditProblems>(m, "_AuditProblems")
      .def(nb::init<>())
      .def("add",
           [](AuditProblems& ps, const std::string& name, const std::string& regime,
              const DatasetInstance& d, const LossSpec& s) {
             ps.items.push_back({name, regime, d.problem, s});
           })
      .def("add_default_set",
           [](AuditProblems& ps, std::uint64_t seed, std::int64_t tokens, std::int64_t hidden,
              const std::vector<std::string>& only) {
             auto all = audit::default_problem_set(seed, tokens, hidden, only);
             for (const auto& w : only) {
               bool found = false;
               for (const auto& p : all) found = found || p.name == w;
               if (!found)
                 throw InputError(fmt::format(
                     "unknown problem '{}' of the embedded set (see xentlab audit --help; "
                     "catalog datasets and files go to --dataset)",
                     w));
             }
             for (auto& p : all) ps.items.push_back(std::move(p));
           })
      .def_prop_ro("names", [](const AuditProblems& ps) {
        std::vector<std::string> n;
        for (const auto& p : ps.items) n.push_back(p.name);
        return n;
      });
  m.def("run_audit", &run_audit, "problems"_a, "strategies"_a, "recipes"_a, "backend"_a, "rows"_a,
        "vocab_rows"_a, "seed"_a, "policy"_a, "tier"_a, "memory_budget"_a, "out"_a.none(),
        "force"_a, "append"_a, "chunk_tokens"_a, "upstream"_a);
  m.def("strategy_names", [] { return strategy_names(Backend::cpu_emulation); });
  m.def("default_recipe_grid", [] {
    std::vector<std::string> names;
    for (const Recipe& r : default_recipe_grid()) names.push_back(r.name());
    return names;
  });
}
