// The golden and candidate file formats (datasets/formats/golden.hpp, docs/formats.md).
#include "datasets/formats/golden.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "numerics/error.hpp"
#include "numerics/version.hpp"

namespace xentlab {
namespace {

LossSpec read_spec(const h5::Group& g, std::int64_t version) {
  LossSpec s;
  // Version 1 has no normaliser (the batch's own count); in version 2 the attribute is required.
  if (version >= 2) s.normalizer = g.attr_int("normalizer");
  s.ignore_index = g.attr_int("ignore_index");
  s.label_smoothing = g.attr_double("label_smoothing");
  s.z_loss = g.attr_double("z_loss");
  s.softcap = g.attr_double("softcap");
  s.logit_scale = g.attr_double("logit_scale");
  try {
    s.reduction = parse_reduction(g.attr_string("reduction"));
  } catch (const InputError& e) {
    throw FormatError(fmt::format("{}: {}", g.where(), e.what()));
  }
  const std::string em = g.attr_string("empty_mean");
  if (em != "nan" && em != "zero")
    throw FormatError(fmt::format("{}: empty_mean is '{}', expected nan or zero", g.where(), em));
  s.empty_mean = em == "nan" ? EmptyMean::nan : EmptyMean::zero;
  try {
    s.validate();
  } catch (const InputError& e) {
    throw FormatError(fmt::format("{}: {}", g.where(), e.what()));
  }
  return s;
}

// Reads dataset `name` of g as doubles when present, checking its shape.
std::vector<double> read_opt(const h5::Group& g, const std::string& name,
                             const std::vector<std::int64_t>& shape) {
  if (!g.exists(name)) return {};
  const h5::Dataset d = g.open_dataset(name);
  const h5::DatasetInfo inf = d.info();
  if (inf.shape != shape) {
    h5::DatasetInfo want = inf;
    want.shape = shape;
    throw FormatError(fmt::format("{}: shape {} but the golden file's sizes require {}", d.where(),
                                  inf.describe(), want.describe()));
  }
  return d.read_double();
}

std::vector<double> read_req(const h5::Group& g, const std::string& name,
                             const std::vector<std::int64_t>& shape) {
  if (!g.exists(name))
    throw FormatError(fmt::format("{}: required dataset '{}' is missing", g.where(), name));
  return read_opt(g, name, shape);
}

}  // namespace

void ref_output(const Golden& g, const std::string& name, RefOutput& r) {
  if (name == "loss" || name == "lse") {
    r.ref = name == "loss" ? &g.loss : &g.lse;
    r.ref_bound = name == "loss" ? &g.loss_bound : &g.lse_bound;
    r.shape = {g.S};
    r.full_shape = {g.N};
    r.rows = &g.token_rows;
  } else if (name == "dH") {
    r.ref = &g.dH;
    r.ref_bound = &g.dH_bound;
    r.shape = {g.S, g.D};
    r.full_shape = {g.N, g.D};
    r.rows = &g.token_rows;
  } else if (name == "dz") {
    r.ref = &g.dz;
    r.ref_bound = &g.dz_bound;
    r.shape = {g.S, g.V};
    r.full_shape = {g.N, g.V};
    r.rows = &g.token_rows;
  } else if (name == "dW") {
    r.ref = &g.dW;
    r.ref_bound = &g.dW_bound;
    r.shape = {g.J, g.D};
    r.full_shape = {g.V, g.D};
    r.rows = &g.vocab_rows;
  } else if (name == "db") {
    r.ref = &g.db;
    r.ref_bound = &g.db_bound;
    r.shape = {g.J};
    r.full_shape = {g.V};
    r.rows = &g.vocab_rows;
  } else if (name == "reduced_loss") {
    if (g.reduced_loss) {
      r.scalar_ref = {*g.reduced_loss};
      r.scalar_bound = {*g.reduced_loss_bound};
    }
    r.ref = &r.scalar_ref;
    r.ref_bound = &r.scalar_bound;
    r.shape = {};
    r.full_shape = {1};
  }
}

std::vector<double> select_rows(const std::vector<double>& full, std::int64_t cols,
                                const std::vector<std::int64_t>& rows) {
  std::vector<double> out(rows.size() * static_cast<std::size_t>(cols));
  for (std::size_t q = 0; q < rows.size(); ++q)
    std::copy_n(full.begin() + rows[q] * cols, cols,
                out.begin() + static_cast<std::ptrdiff_t>(q) * cols);
  return out;
}

void write_spec(h5::Group& g, const LossSpec& s, const std::vector<double>& upstream) {
  g.set_attr("ignore_index", s.ignore_index);
  g.set_attr("label_smoothing", s.label_smoothing);
  g.set_attr("z_loss", s.z_loss);
  g.set_attr("softcap", s.softcap);
  g.set_attr("logit_scale", s.logit_scale);
  g.set_attr("reduction", std::string(to_string(s.reduction)));
  g.set_attr("empty_mean", std::string(s.empty_mean == EmptyMean::nan ? "nan" : "zero"));
  g.set_attr("normalizer", s.normalizer);
  g.set_attr("describe", s.describe() + (upstream.empty() ? "" : " upstream=stored"));
  if (!upstream.empty()) g.write("upstream", upstream);
}

Golden read_golden(const std::string& path) {
  const h5::File f = h5::File::open_read(path);
  if (!f.has_attr("format"))
    throw FormatError(
        fmt::format("{}: not a xentlab golden file (no 'format' attribute at the root; "
                    "a foreign HDF5 file?)",
                    path));
  const std::string fmt_name = f.attr_string("format");
  if (fmt_name != kGoldenFormat)
    throw FormatError(
        fmt::format("{}: its format attribute is '{}', not '{}'", path, fmt_name, kGoldenFormat));
  const std::int64_t ver = f.attr_int("format_version");
  if (ver < 1 || ver > kGoldenVersion)
    throw FormatError(
        fmt::format("{}: golden format_version {}; this xentlab ({}) reads versions 1 to {}", path,
                    ver, kVersion, kGoldenVersion));
  // Deleted datasets (a reference output a candidate would then not be held to), added ones and
  // edited attributes (the loss spec, the sampled rows' counts) are refused before anything is
  // read, naming what changed; the data themselves are checked by their digests as they are read.
  f.verify_manifest();
  Golden g;
  g.path = path;
  g.provenance =
      fmt::format("generator={} dataset={} seed={} created={} xentlab={} format_version={}",
                  f.attr_string("generator"), f.attr_string("dataset"), f.attr_int("seed"),
                  f.attr_string("created"), f.attr_string("xentlab_version"), ver);
  const h5::Group sg = f.open_group("spec");
  g.spec = read_spec(sg, ver);
  const h5::Group pg = f.open_group("problem");
  const std::string kind = pg.attr_string("kind");
  const auto targets = pg.open_dataset("targets").read_int64();
  try {
    if (kind == "linear") {
      std::optional<Tensor> bias;
      if (pg.exists("bias")) bias = pg.open_dataset("bias").read_tensor();
      g.problem =
          Problem::linear(pg.open_dataset("H").read_tensor(), pg.open_dataset("W").read_tensor(),
                          std::move(bias), targets, g.spec.ignore_index, pg.attr_string("name"));
    } else if (kind == "logits") {
      g.problem = Problem::from_logits(pg.open_dataset("logits").read_tensor(), targets,
                                       g.spec.ignore_index, pg.attr_string("name"));
    } else {
      throw FormatError(
          fmt::format("{}: kind is '{}', expected linear or logits", pg.where(), kind));
    }
  } catch (const InputError& e) {
    throw FormatError(fmt::format("{}: the stored problem is invalid: {}", pg.where(), e.what()));
  }
  g.N = g.problem.N;
  g.V = g.problem.V;
  g.D = g.problem.D;
  if (ver >= 2 && sg.exists("upstream")) {
    if (g.spec.reduction != Reduction::none)
      throw FormatError(
          fmt::format("{}: an upstream gradient is stored with reduction {} (only "
                      "reduction none takes one)",
                      sg.where(), to_string(g.spec.reduction)));
    g.upstream = read_req(sg, "upstream", {g.N});
    for (std::size_t i = 0; i < g.upstream.size(); ++i)
      if (!std::isfinite(g.upstream[i]))
        throw FormatError(
            fmt::format("{}: upstream[{}] = {} is not finite", sg.where(), i, g.upstream[i]));
  }
  g.provenance += fmt::format("\n           loss: {}{}", g.spec.describe(),
                              g.upstream.empty()
                                  ? ""
                                  : " upstream=stored (dL/dloss_i per token: the candidate applies "
                                    "it)");
  const h5::Group rg = f.open_group("reference");
  g.token_rows = rg.open_dataset("token_rows").read_int64();
  g.vocab_rows = rg.open_dataset("vocab_rows").read_int64();
  g.S = static_cast<std::int64_t>(g.token_rows.size());
  g.J = static_cast<std::int64_t>(g.vocab_rows.size());
  for (auto t : g.token_rows)
    if (t < 0 || t >= g.N)
      throw FormatError(fmt::format("{}: token row {} outside [0, {})", rg.where(), t, g.N));
  for (auto j : g.vocab_rows)
    if (j < 0 || j >= g.V)
      throw FormatError(fmt::format("{}: vocabulary row {} outside [0, {})", rg.where(), j, g.V));
  g.n_valid = rg.attr_int("n_valid");
  g.partial = rg.attr_int("partial") != 0;
  if (!g.partial) {
    g.reduced_loss = rg.attr_double("reduced_loss");
    g.reduced_loss_bound = rg.attr_double("reduced_loss_bound");
  }
  const std::int64_t S = g.S, J = g.J, D = g.D, V = g.V;
  g.loss = read_req(rg, "loss", {S});
  g.loss_bound = read_req(rg, "loss_bound", {S});
  g.lse = read_req(rg, "lse", {S});
  g.lse_bound = read_req(rg, "lse_bound", {S});
  g.dH = read_opt(rg, "dH", {S, D});
  g.dH_bound = read_opt(rg, "dH_bound", {S, D});
  g.dH_cond = read_opt(rg, "dH_cond", {S, D});
  g.dW = read_opt(rg, "dW", {J, D});
  g.dW_bound = read_opt(rg, "dW_bound", {J, D});
  g.dW_cond = read_opt(rg, "dW_cond", {J, D});
  g.db = read_opt(rg, "db", {J});
  g.db_bound = read_opt(rg, "db_bound", {J});
  g.db_cond = read_opt(rg, "db_cond", {J});
  g.dz = read_opt(rg, "dz", {S, V});
  g.dz_bound = read_opt(rg, "dz_bound", {S, V});
  const h5::Group cg = f.open_group("covariates");
  g.max_logit = read_req(cg, "max_logit", {S});
  g.p_target = read_req(cg, "p_target", {S});
  g.entropy = read_req(cg, "entropy", {S});
  g.sum_p_abs_z = read_req(cg, "sum_p_abs_z", {S});
  g.grad_scale = read_req(cg, "grad_scale", {S});
  g.target_logit = read_req(cg, "target_logit", {S});
  g.max_abs_logit = read_req(cg, "max_abs_logit", {S});
  g.mean_abs_logit = read_req(cg, "mean_abs_logit", {S});
  if (g.problem.is_linear()) g.gemm_abs = read_req(cg, "gemm_abs", {S});
  // Each dataset read above was checked against its digest; the ones not read (covariates ce and
  // z_term, …) are checked too, so that a damaged file is refused whatever part is damaged.
  f.verify_digests();
  g.checksums = f.declares_checksums();
  g.manifest = f.has_manifest();
  return g;
}

std::string golden_checksum_warning(const Golden& g) {
  if (g.checksums && g.manifest) return "";
  if (g.checksums)
    return fmt::format(
        "{}: no manifest: written by an older xentlab (deleted datasets and edited attributes "
        "cannot be detected; xentlab golden now stores a manifest of them)",
        g.path);
  return fmt::format(
      "{}: no checksums: written by an older xentlab (its data cannot be checked for damage; "
      "xentlab golden writes them with a sha256 digest per dataset)",
      g.path);
}

const std::vector<std::string>& candidate_output_names() {
  static const std::vector<std::string> n = {"loss", "lse", "reduced_loss", "dH", "dW", "db", "dz"};
  return n;
}

std::vector<std::string> parse_required_outputs(const std::vector<std::string>& names) {
  const std::vector<std::string>& known = candidate_output_names();
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (std::find(known.begin(), known.end(), n) == known.end()) {
      std::string all;
      for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
      throw InputError(fmt::format("--require: unknown output '{}' (the outputs: {})", n, all));
    }
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw InputError(fmt::format("--require: '{}' is named twice", n));
    out.push_back(n);
  }
  return out;
}

}  // namespace xentlab
