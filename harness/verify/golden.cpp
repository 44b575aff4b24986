// `xentlab golden` (harness/verify/golden.hpp).
#include "harness/verify/golden.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5.hpp"
#include "judge/covariates.hpp"
#include "numerics/error.hpp"
#include "numerics/version.hpp"

namespace xentlab {
namespace {

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
// The reference options of a golden file: threads, tier, memory, the upstream gradient (checked:
// reduction none only, N values, each 0 or a normal fp32 number), the token and vocabulary rows
// (all, or seeded samples) and the outputs wanted.
ReferenceOptions reference_options(const Problem& pb, const LossSpec& spec,
                                   const GoldenOptions& o) {
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
  return opt;
}

// The root attributes and /problem: the problem bit-exact in its dtype.
void write_problem(h5::File& f, const DatasetInstance& ds, const GoldenOptions& o) {
  const Problem& pb = ds.problem;
  const bool linear = pb.is_linear();
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

// /reference: the certified reference's outputs and bounds; the outputs stored go to sum.
void write_reference(h5::File& f, const Problem& pb, const ReferenceResult& r, GoldenSummary& sum) {
  const bool linear = pb.is_linear();
  const std::int64_t S = sum.S, J = sum.J;
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
      // Σ_i |dz_ij| over the token rows: the condition of db (judge/bounds.hpp db_cond).
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

// /covariates: the reference's per-token quantities and the exact covariates.
void write_covariates(h5::File& f, const ReferenceResult& r, const ExactRowCovariates& cov,
                      bool linear) {
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

}  // namespace

GoldenSummary write_golden(const std::string& path, const DatasetInstance& ds, const LossSpec& spec,
                           const GoldenOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  AtomicOutput out(path, o.force);  // refuses an existing file before any work
  spec.validate();
  const Problem& pb = ds.problem;
  pb.validate(spec.ignore_index);
  const bool linear = pb.is_linear();
  ReferenceOptions opt = reference_options(pb, spec, o);
  const std::int64_t S = static_cast<std::int64_t>(opt.token_rows.size());
  // The covariates first: their buffers (|W|, blocks of logits) are freed before the reference
  // plans its memory.
  const ExactRowCovariates cov = exact_row_covariates(pb, spec, opt.token_rows);
  const ReferenceResult r = compute_reference(pb, spec, opt);
  const std::int64_t J = static_cast<std::int64_t>(r.vocab_rows.size());

  GoldenSummary sum;
  sum.S = S;
  sum.J = J;
  sum.partial = r.partial;
  sum.reduced_loss = r.reduced_loss;
  sum.reduced_loss_bound = r.reduced_loss_bound;

  h5::File f = h5::File::create(out.temp_path());
  f.set_compression(o.compression);
  write_problem(f, ds, o);
  {
    h5::Group g = f.create_group("spec");
    write_spec(g, spec, opt.upstream);
  }
  write_reference(f, pb, r, sum);
  write_covariates(f, r, cov, linear);
  sum.storage = f.storage_totals();
  f.close();
  out.commit();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace xentlab
