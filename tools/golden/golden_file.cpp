#include "tools/golden/golden_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <optional>

#include "datasets/atomic_file.hpp"
#include "datasets/generators.hpp"
#include "datasets/h5.hpp"
#include "numerics/error.hpp"
#include "numerics/version.hpp"
#include "reference/reference.hpp"

namespace xentlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<std::int64_t> all_rows(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

double transform(double r, const LossSpec& spec) {
  double z = spec.logit_scale * r;
  if (spec.softcap > 0) z = spec.softcap * std::tanh(z / spec.softcap);
  return z;
}

// Per sampled row: the (transformed) target logit, max_j |x_j| and (1/V)Σ_j |x_j| over finite
// entries, and for linear problems scale·max_j (Σ_d |H_id||W_jd| + |b_j|) — the covariates that
// numerics/bounds.hpp needs beyond the reference's own. Logits of linear problems are fp64 GEMMs
// of exact products (absolute error ≤ γ_D·Σ|h||w|, immaterial for a covariate of a bound).
struct RowCovariates {
  std::vector<double> target_logit, max_abs_logit, mean_abs_logit, gemm_abs;
};

RowCovariates row_covariates(const Problem& pb, const LossSpec& spec,
                             const std::vector<std::int64_t>& rows) {
  const std::int64_t S = static_cast<std::int64_t>(rows.size()), V = pb.V, D = pb.D;
  RowCovariates c;
  c.target_logit.assign(static_cast<std::size_t>(S), 0.0);
  c.max_abs_logit.assign(static_cast<std::size_t>(S), 0.0);
  c.mean_abs_logit.assign(static_cast<std::size_t>(S), 0.0);
  if (pb.is_linear()) c.gemm_abs.assign(static_cast<std::size_t>(S), 0.0);
  // Linear problems: the logits and Σ_d |H_id||W_jd| as fp64 GEMMs (HeadLogits) of H and W, and
  // of |H| and |W|, in blocks of at most 2^27 logits (1 GiB).
  std::optional<Tensor> abs_w;
  std::optional<HeadLogits> z_of, abs_of;
  if (pb.is_linear()) {
    abs_w.emplace(pb.W.dtype(), pb.W.shape(), "|W|");
    // |x| clears the sign bit of the stored pattern (fp32, fp16, bf16): exact.
    const auto n = static_cast<std::int64_t>(pb.W.nbytes());
    const auto* from = static_cast<const unsigned char*>(pb.W.data());
    auto* to = static_cast<unsigned char*>(abs_w->data());
    const auto width =
        static_cast<std::int64_t>(pb.W.nbytes() / static_cast<std::size_t>(pb.W.numel()));
#pragma omp parallel for schedule(static)
    for (std::int64_t k = 0; k < n; ++k)
      to[k] = (k % width == width - 1) ? static_cast<unsigned char>(from[k] & 0x7F) : from[k];
    z_of.emplace(pb.W);
    abs_of.emplace(*abs_w);
  }
  const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t{1} << 27) / V);
  std::vector<double> raw, absd, X, AX;
  for (std::int64_t q0 = 0; q0 < S; q0 += block) {
    const std::int64_t m = std::min(block, S - q0);
    if (pb.is_linear()) {
      X.resize(static_cast<std::size_t>(m * D));
      AX.resize(X.size());
      for (std::int64_t r = 0; r < m; ++r)
        pb.H.read(rows[static_cast<std::size_t>(q0 + r)] * D, D, X.data() + r * D);
      for (std::size_t k = 0; k < X.size(); ++k) AX[k] = std::fabs(X[k]);
      z_of->compute(X.data(), m, raw);
      abs_of->compute(AX.data(), m, absd);
      if (pb.bias) {
#pragma omp parallel for schedule(static)
        for (std::int64_t j = 0; j < V; ++j) {
          const double b = pb.bias->get(j);
          for (std::int64_t r = 0; r < m; ++r) {
            const auto k = static_cast<std::size_t>(r * V + j);
            raw[k] = b == -kInf ? -kInf : raw[k] + b;
            absd[k] = absd[k] + (b == -kInf ? 0.0 : std::fabs(b));
          }
        }
      }
    } else {
      raw.resize(static_cast<std::size_t>(m * V));
      for (std::int64_t r = 0; r < m; ++r)
        pb.logits.read(rows[static_cast<std::size_t>(q0 + r)] * V, V, raw.data() + r * V);
    }
    // Σ|h||w| exists for a linear head only (absd is empty for given logits).
    const bool linear = pb.is_linear();
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < m; ++r) {
      const std::size_t q = static_cast<std::size_t>(q0 + r);
      const std::int64_t t = pb.targets[static_cast<std::size_t>(rows[q])];
      double mx = 0, sum = 0, ga = 0;
      for (std::int64_t j = 0; j < V; ++j) {
        const double rv = raw[static_cast<std::size_t>(r * V + j)];
        if (!std::isfinite(rv)) continue;
        const double x = std::fabs(transform(rv, spec));
        mx = std::max(mx, x);
        sum += x;
        if (linear) ga = std::max(ga, absd[static_cast<std::size_t>(r * V + j)]);
      }
      c.max_abs_logit[q] = mx;
      c.mean_abs_logit[q] = sum / static_cast<double>(V);
      if (pb.is_linear()) c.gemm_abs[q] = spec.logit_scale * ga;
      if (t != spec.ignore_index)
        c.target_logit[q] = transform(raw[static_cast<std::size_t>(r * V + t)], spec);
    }
  }
  return c;
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

GoldenSummary write_golden(const std::string& path, const DatasetInstance& ds, const LossSpec& spec,
                           const GoldenOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  AtomicOutput out(path, o.force);  // refuses an existing file before any work
  spec.validate();
  const Problem& pb = ds.problem;
  pb.validate(spec.ignore_index);
  const bool linear = pb.is_linear();
  ReferenceOptions opt;
  opt.threads = o.threads;
  opt.tier = o.tier;
  opt.max_bytes = o.memory_budget;
  opt.progress = o.progress;
  // Ones are stored as no upstream at all (the file of an all-ones g is the one of reduction none
  // without g); the reference checks the length, finiteness and the reduction.
  const bool ones =
      std::all_of(o.upstream.begin(), o.upstream.end(), [](double v) { return v == 1.0; });
  if (!o.upstream.empty() && spec.reduction != Reduction::none)
    throw InputError(fmt::format(
        "an upstream gradient is only taken with reduction none (the spec has reduction {})",
        to_string(spec.reduction)));
  if (!o.upstream.empty() && static_cast<std::int64_t>(o.upstream.size()) != pb.N)
    throw InputError(
        fmt::format("the upstream gradient has {} values; expected N = {} (one "
                    "dL/dloss_i per token)",
                    o.upstream.size(), pb.N));
  // The strategies and the candidates apply g in fp32, and the bounds have no underflow term for
  // g itself: each g_i is 0 or an fp32 number of the normal range, exactly.
  for (std::size_t i = 0; i < o.upstream.size(); ++i) {
    const double v = o.upstream[i], a = std::fabs(v);
    if (v != 0 && !(a >= 0x1p-126 && a <= max_finite(DType::fp32) && round_to(v, DType::fp32) == v))
      throw InputError(fmt::format(
          "upstream[{}] = {:.17g}: each upstream gradient value must be 0 or a normal fp32 number "
          "exactly (magnitude in [2^-126, 3.4e38], no more than 24 significant bits): kernels "
          "apply g in fp32, so another value is not the same upstream gradient for them, and the "
          "certified bounds do not cover its underflow or overflow",
          i, v));
  }
  if (!ones) opt.upstream = o.upstream;
  const bool partial = o.rows > 0 && o.rows < pb.N;
  opt.token_rows = partial ? sample_rows(pb.N, o.rows, o.sample_seed) : all_rows(pb.N);
  if (linear)
    opt.vocab_rows = (o.vocab_rows > 0 && o.vocab_rows < pb.V)
                         ? sample_rows(pb.V, o.vocab_rows, o.sample_seed + 1)
                         : all_rows(pb.V);
  const std::int64_t S = static_cast<std::int64_t>(opt.token_rows.size());
  opt.want_dH = linear && o.gradients;
  opt.want_dW = opt.want_db = linear && o.gradients && !partial;
  opt.want_dz = o.gradients && (!linear || opt.want_db) && S * pb.V <= o.max_dz_elements;
  // The covariates first: their buffers (|W|, blocks of logits) are freed before the reference
  // plans its memory.
  const RowCovariates cov = row_covariates(pb, spec, opt.token_rows);
  const ReferenceResult r = compute_reference(pb, spec, opt);
  const std::int64_t J = static_cast<std::int64_t>(r.vocab_rows.size());

  GoldenSummary sum;
  sum.S = S;
  sum.J = J;
  sum.partial = r.partial;
  sum.reduced_loss = r.reduced_loss;
  sum.reduced_loss_bound = r.reduced_loss_bound;

  h5::File f = h5::File::create(out.temp_path());
  f.set_attr("format", kGoldenFormat);
  f.set_attr("format_version", kGoldenVersion);
  f.set_attr("xentlab_version", kVersion);
  f.set_attr("created", utc_now());
  f.set_attr("generator", ds.generator);
  f.set_attr("dataset", ds.source);
  f.set_attr("regime", ds.regime);
  f.set_attr("seed", static_cast<std::int64_t>(ds.params.seed));
  f.set_attr("sample_seed", static_cast<std::int64_t>(o.sample_seed));
  f.set_attr("command", o.command);
  {
    h5::Group g = f.create_group("problem");
    g.set_attr("kind", linear ? "linear" : "logits");
    g.set_attr("name", pb.name);
    g.set_attr("N", pb.N);
    g.set_attr("V", pb.V);
    g.set_attr("D", pb.D);
    g.set_attr("input_dtype", std::string(to_string(pb.input_dtype())));
    if (!pb.targets_drawn_by.empty()) g.set_attr("targets_drawn_by", pb.targets_drawn_by);
    if (linear) {
      g.write_tensor("H", pb.H);
      g.write_tensor("W", pb.W);
      if (pb.bias) g.write_tensor("bias", *pb.bias);
    } else {
      g.write_tensor("logits", pb.logits);
    }
    g.write("targets", pb.targets);
  }
  {
    h5::Group g = f.create_group("spec");
    write_spec(g, spec, opt.upstream);
  }
  {
    h5::Group g = f.create_group("reference");
    g.set_attr("N", pb.N);
    g.set_attr("V", pb.V);
    g.set_attr("D", pb.D);
    g.set_attr("S", S);
    g.set_attr("J", J);
    g.set_attr("n_valid", r.n_valid);
    g.set_attr("partial", r.partial);
    g.set_attr("reduced_loss", r.reduced_loss);
    g.set_attr("reduced_loss_bound", r.reduced_loss_bound);
    g.set_attr("tier", std::string(to_string(r.tier)));
    g.set_attr("method",
               r.tier == ReferenceTier::compensated
                   ? "xentlab certified reference (reference/reference.hpp), compensated tier: "
                     "float64 with compensated sums; *_bound: |value − exact| ≤ bound"
                   : fmt::format("xentlab certified reference (reference/reference.hpp), {} tier: "
                                 "float64 GEMM with a-priori bounds γ_n·Σ|x||y|; *_bound: "
                                 "|value − exact| ≤ bound",
                                 to_string(r.tier)));
    g.write("token_rows", r.token_rows);
    g.write("vocab_rows", r.vocab_rows);
    g.write("loss", r.loss);
    g.write("loss_bound", r.loss_bound);
    g.write("lse", r.lse);
    g.write("lse_bound", r.lse_bound);
    sum.outputs = {"loss", "lse"};
    if (!r.partial) sum.outputs.push_back("reduced_loss");
    if (!r.dH.empty()) {
      g.write("dH", r.dH.data(), {S, pb.D});
      g.write("dH_bound", r.dH_bound.data(), {S, pb.D});
      g.write("dH_cond", r.dH_cond.data(), {S, pb.D});
      sum.outputs.push_back("dH");
    }
    if (!r.dW.empty()) {
      g.write("dW", r.dW.data(), {J, pb.D});
      g.write("dW_bound", r.dW_bound.data(), {J, pb.D});
      g.write("dW_cond", r.dW_cond.data(), {J, pb.D});
      sum.outputs.push_back("dW");
    }
    if (!r.db.empty()) {
      g.write("db", r.db.data(), {J});
      g.write("db_bound", r.db_bound.data(), {J});
      if (!r.dz.empty()) {
        // Σ_i |dz_ij| over the token rows: the condition of db (numerics/bounds.hpp db_cond).
        std::vector<double> dbc(static_cast<std::size_t>(J), 0.0);
        for (std::int64_t q = 0; q < S; ++q)
          for (std::int64_t jj = 0; jj < J; ++jj)
            dbc[static_cast<std::size_t>(jj)] += std::fabs(r.dz[static_cast<std::size_t>(
                q * pb.V + r.vocab_rows[static_cast<std::size_t>(jj)])]);
        g.write("db_cond", dbc.data(), {J});
      }
      sum.outputs.push_back("db");
    }
    if (!linear && !r.dz.empty()) {
      g.write("dz", r.dz.data(), {S, pb.V});
      g.write("dz_bound", r.dz_bound.data(), {S, pb.V});
      sum.outputs.push_back("dz");
    }
  }
  {
    h5::Group g = f.create_group("covariates");
    g.write("max_logit", r.max_logit);
    g.write("p_target", r.p_target);
    g.write("entropy", r.entropy);
    g.write("sum_p_abs_z", r.sum_p_abs_z);
    g.write("grad_scale", r.grad_scale);
    g.write("ce", r.ce);
    g.write("z_term", r.z_term);
    g.write("target_logit", cov.target_logit);
    g.write("max_abs_logit", cov.max_abs_logit);
    g.write("mean_abs_logit", cov.mean_abs_logit);
    if (linear) g.write("gemm_abs", cov.gemm_abs);
  }
  f.close();
  out.commit();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
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
  return g;
}

}  // namespace xentlab
