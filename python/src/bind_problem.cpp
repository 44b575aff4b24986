// xentlab._xentlab: the loss spec and problems (arrays, catalog datasets).
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "datasets/catalog.hpp"
#include "datasets/problem.hpp"
#include "numerics/error.hpp"
#include "numerics/loss_spec.hpp"
#include "python/src/common.hpp"
#include "reference/reference.hpp"

namespace xentlab::python {
namespace {

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

}  // namespace

void bind_problem(nb::module_& m) {
  using namespace nb::literals;
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
}

}  // namespace xentlab::python
