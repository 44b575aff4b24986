// xentlab._xentlab: golden files.
#include <string>
#include <utility>
#include <vector>

#include "datasets/catalog.hpp"
#include "harness/verify/golden.hpp"
#include "numerics/loss_spec.hpp"
#include "python/src/common.hpp"
#include "reference/reference.hpp"

namespace xentlab::python {
namespace {

nb::dict golden_write(const std::string& path, const DatasetInstance& ds, const LossSpec& spec,
                      std::int64_t rows, std::int64_t vocab_rows, std::uint64_t sample_seed,
                      bool gradients, const std::string& tier, std::int64_t memory_budget,
                      int threads, bool force, const std::string& command,
                      std::vector<double> upstream, const std::string& compress) {
  GoldenOptions o;
  o.compression = h5::parse_compression(compress);
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
  d["raw_bytes"] = s.storage.raw_bytes;
  d["stored_bytes"] = s.storage.stored_bytes;
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

}  // namespace

void bind_golden(nb::module_& m) {
  using namespace nb::literals;
  m.def("write_golden", &golden_write, "path"_a, "problem"_a, "spec"_a, "rows"_a, "vocab_rows"_a,
        "sample_seed"_a, "gradients"_a, "tier"_a, "memory_budget"_a, "threads"_a, "force"_a,
        "command"_a, "upstream"_a, "compress"_a);
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
      .def_ro("checksums", &Golden::checksums)
      .def_ro("manifest", &Golden::manifest)
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
  m.def("golden_checksum_warning", &golden_checksum_warning, "golden"_a);
  m.def("read_golden", [](const std::string& path) {
    nb::gil_scoped_release release;
    return read_golden(path);
  });
}

}  // namespace xentlab::python
