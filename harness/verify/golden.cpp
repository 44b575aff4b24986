// `xentlab golden` (harness/verify/golden.hpp).
#include "harness/verify/golden.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>

#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5.hpp"
#include "judge/covariates.hpp"
#include "numerics/error.hpp"
#include "numerics/version.hpp"
#include "reference/reference.hpp"

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
// The outputs a golden file's reference forms: dH, dW and db of a linear head (dW and db over all
// token rows only), dz while S·V ≤ max_dz_elements (a logits problem's gradient; a linear head's
// Σ_i|dz_ij|, db's condition).
void set_outputs_wanted(ReferenceOptions& opt, bool linear, std::int64_t S, std::int64_t V,
                        bool partial, const GoldenOptions& o) {
  opt.want_dH = linear && o.gradients;
  opt.want_dW = opt.want_db = linear && o.gradients && !partial;
  opt.want_dz = o.gradients && (!linear || opt.want_db) && S * V <= o.max_dz_elements;
}

// The rows a golden file holds: S token rows and J vocabulary rows (a linear head's).
std::pair<std::int64_t, std::int64_t> golden_rows(const GoldenShape& g, const GoldenOptions& o) {
  const std::int64_t S = o.rows > 0 && o.rows < g.N ? o.rows : g.N;
  const std::int64_t J =
      g.D > 0 ? (o.vocab_rows > 0 && o.vocab_rows < g.V ? o.vocab_rows : g.V) : 0;
  return {S, J};
}

// The HDF5 library's buffers while the file is written (its type conversion buffer and
// metadata cache), beside db's condition (J doubles) formed for the file.
constexpr double kFileBufferBytes = 4.0 * (1 << 20);

// The reference's options for the estimate, and the bytes it may hold (its allotment) when the
// rest of the estimate leaves `left` of the budget.
struct ReferencePlan {
  ReferenceOptions opt;
  double least = 0, most = 0;
  double within(double left) const { return std::min(most, std::max(least, left)); }
};
ReferencePlan reference_plan(const GoldenShape& g, const GoldenOptions& o) {
  const auto [S, J] = golden_rows(g, o);
  ReferencePlan p;
  p.opt.tier = o.tier;
  p.opt.threads = o.threads;
  set_outputs_wanted(p.opt, g.D > 0, S, g.V, S < g.N, o);
  p.least = reference_memory_bytes(S, g.V, g.D, J, p.opt);
  p.most = reference_peak_bytes(S, g.V, g.D, J, p.opt);
  return p;
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
  set_outputs_wanted(opt, linear, static_cast<std::int64_t>(opt.token_rows.size()), pb.V, partial,
                     o);
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

GoldenShape GoldenShape::of(const Problem& p) {
  GoldenShape g;
  g.N = p.N;
  g.V = p.V;
  g.D = p.is_linear() ? p.D : 0;
  g.dtype = p.input_dtype();
  g.bias = p.bias.has_value();
  return g;
}

MemoryEstimate golden_memory(const GoldenShape& g, const GoldenOptions& o, std::int64_t budget) {
  const auto [S, J] = golden_rows(g, o);
  const double e = size_of(g.dtype), N = static_cast<double>(g.N), V = static_cast<double>(g.V),
               D = static_cast<double>(g.D);
  MemoryEstimate m;
  m.add(fmt::format("the problem ({})", to_string(g.dtype)),
        (g.D > 0 ? e * (N * D + V * D + (g.bias ? V : 0.0)) : e * N * V) + 8.0 * N);
  m.add("the upstream gradient, row samples and covariates",
        8.0 * (N + static_cast<double>(S) + static_cast<double>(J)) + 8.0 * 4.0 * double(S));
  m.add("the file's buffers", kFileBufferBytes + 8.0 * static_cast<double>(J));
  // The stages in turn: only the largest adds to the rest.
  const ReferencePlan rp = reference_plan(g, o);
  const double reference = rp.within(static_cast<double>(budget) - m.total());
  const double covariates = exact_row_covariates_bytes(S, g.V, g.D, g.dtype);
  if (g.generation_bytes >= covariates && g.generation_bytes >= reference)
    m.add("the generation (fp64 logits of the targets)", g.generation_bytes);
  else if (covariates >= reference)
    m.add("the exact covariates (fp64 logits and Σ|h||w|)", covariates);
  else
    m.add(fmt::format("the reference ({} tier, outputs and bounds)",
                      g.D > 0 ? to_string(o.tier) : "compensated"),
          reference);
  return m;
}

void check_golden_memory(const GoldenShape& g, const GoldenOptions& o, const std::string& what) {
  const MemoryBudget budget = MemoryBudget::from(o.memory_budget);
  check_memory_estimate(golden_memory(g, o, budget.bytes), budget, what,
                        "sample fewer token or vocabulary rows (--rows, --vocab-rows), a smaller "
                        "problem, or give a larger --memory-budget on a machine that has it");
}

namespace {

// Throws InputError at the first row whose logits are all −∞ while its target is valid: the
// reference's loss there is +∞ with a zero gradient (docs/reference.md), values implementations do
// not give (their softmax there is exp(−∞ − (−∞)), NaN: a NaN gradient, and a NaN loss where it is
// lse − x_t unguarded), so a golden file of it would fail every correct candidate. A linear head's
// logits are all −∞ exactly where every bias entry is (H and W are finite). Under a softcap no row
// is masked: a −∞ logit is −c there (tanh(−∞) = −1), in the reference as in the kernels, and the
// row's loss is the finite log V.
void refuse_masked_valid_rows(const Problem& pb, const LossSpec& spec) {
  if (spec.softcap > 0.0) return;
  const std::int64_t ignore_index = spec.ignore_index;
  const auto refuse = [&](std::int64_t i) {
    throw InputError(fmt::format(
        "{}: token row {} has every logit −∞ (masked) and the valid target {}: the reference's "
        "loss there is +∞ with a zero gradient, which implementations do not give (their softmax "
        "is exp(−∞ − (−∞)), NaN); give the row the target ignore_index ({}) or leave one of its "
        "logits unmasked",
        pb.describe(), i, pb.targets[static_cast<std::size_t>(i)], ignore_index));
  };
  const auto valid = [&](std::int64_t i) {
    return pb.targets[static_cast<std::size_t>(i)] != ignore_index;
  };
  if (pb.is_linear()) {
    if (!pb.bias) return;
    for (std::int64_t j = 0; j < pb.V; ++j)
      if (pb.bias->get(j) != -std::numeric_limits<double>::infinity()) return;
    for (std::int64_t i = 0; i < pb.N; ++i)
      if (valid(i)) refuse(i);
    return;
  }
  for (std::int64_t i = 0; i < pb.N; ++i) {
    if (!valid(i)) continue;
    bool masked = true;
    for (std::int64_t j = 0; j < pb.V && masked; ++j)
      masked = pb.logits.get(i * pb.V + j) == -std::numeric_limits<double>::infinity();
    if (masked) refuse(i);
  }
}

}  // namespace

GoldenSummary write_golden(const std::string& path, const DatasetInstance& ds, const LossSpec& spec,
                           const GoldenOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  AtomicOutput out(path, o.force);  // refuses an existing file before any work
  spec.validate();
  const Problem& pb = ds.problem;
  pb.validate(spec.ignore_index);
  refuse_masked_valid_rows(pb, spec);
  const bool linear = pb.is_linear();
  // Refused before any work when it cannot fit (the command checks the same before it makes the
  // problem). A budget given leaves the reference what the rest of the estimate leaves of it (its
  // blocks, and so its roundings, change only where that is below its largest plan); none leaves
  // it its own default, as before, where it takes its largest plan (reference_peak_bytes).
  const GoldenShape shape = GoldenShape::of(pb);
  check_golden_memory(shape, o, fmt::format("the golden file of {}", pb.describe()));
  const MemoryBudget budget = MemoryBudget::from(o.memory_budget);
  ReferenceOptions opt = reference_options(pb, spec, o);
  if (budget.given) {
    MemoryEstimate rest = golden_memory(shape, o, budget.bytes);
    rest.terms.pop_back();  // the largest stage
    opt.max_bytes = std::max<std::int64_t>(
        static_cast<std::int64_t>(reference_plan(shape, o).least),
        static_cast<std::int64_t>(static_cast<double>(budget.bytes) - rest.total()));
  }
  const std::int64_t S = static_cast<std::int64_t>(opt.token_rows.size());
  // The covariates first: their buffers (|W|, blocks of logits) are freed before the reference
  // plans its memory.
  const ExactRowCovariates cov = exact_row_covariates(pb, spec, opt.token_rows);
  const ReferenceResult r = compute_reference(pb, spec, opt);
  const std::int64_t J = static_cast<std::int64_t>(r.vocab_rows.size());

  GoldenSummary sum;
  sum.memory = golden_memory(shape, o, budget.bytes);
  sum.budget = budget;
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
  f.write_manifest();
  sum.storage = f.storage_totals();
  f.close();
  out.commit();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace xentlab
