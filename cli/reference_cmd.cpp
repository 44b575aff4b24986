// `xentlab reference`: run the certified reference on the embedded example (a seeded bf16 linear
// head) or a chosen Gaussian problem, print the loss with its certified bound, and check a sample
// against the multiprecision oracle.
#include <fmt/core.h>

#include <chrono>
#include <cmath>

#include "cli/commands.hpp"
#include "cli/options/loss.hpp"
#include "cli/options/reference.hpp"
#include "datasets/synthetic.hpp"
#include "numerics/blas.hpp"
#include "numerics/error.hpp"
#include "reference/oracle.hpp"
#include "reference/reference.hpp"

namespace xentlab::cli {
namespace {

struct ReferenceArgs {
  std::int64_t N = 64, V = 32000, D = 64;
  std::string dtype = "bf16";
  double sigma = 4.0;
  std::uint64_t seed = 1;
  std::int64_t oracle_rows = 2;
  LossOptions loss;  ///< LossDefaults::spec
  ReferenceChoice choice;
  int threads = 0;
};

int run_reference(const ReferenceArgs& a) {
  const LossSpec spec = a.loss.check_given();  // e.g. a normaliser beside reduction none or sum
  ReferenceOptions opt;
  opt.upstream = a.loss.upstream_values(a.N, a.seed);
  apply_reference_choice(a.choice, opt);  // bad option values are refused before generating
  opt.threads = a.threads;
  check_reference_fits(a.N, a.V, a.D, a.V, opt);  // memory and tier, before generating
  Problem pb = make_gaussian_linear(a.N, a.V, a.D, parse_dtype(a.dtype), a.sigma, a.seed);
  fmt::print("problem  {} sigma={} seed={}\nspec     {}{}\n", pb.describe(), a.sigma, a.seed,
             spec.describe(),
             opt.upstream.empty() ? "" : fmt::format(" upstream=random (seed {})", a.seed));
  opt.progress = progress_printer("reference");
  const auto t0 = std::chrono::steady_clock::now();
  const ReferenceResult r = compute_reference(pb, spec, opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("loss     {:.17g}  ± {:.3g}  (certified bound, relative {:.2g})\n", r.reduced_loss,
             r.reduced_loss_bound, r.reduced_loss_bound / std::fabs(r.reduced_loss));
  auto max_rel = [](const auto& v, const auto& b) {
    double m = 0;
    for (std::size_t k = 0; k < v.size(); ++k)
      if (v[k] != 0) m = std::max(m, b[k] / std::fabs(v[k]));
    return m;
  };
  auto max_of = [](const auto& b) {
    double m = 0;
    for (double x : b) m = std::max(m, x);
    return m;
  };
  fmt::print("dH       max bound {:.3g}, max relative bound {:.3g}\n", max_of(r.dH_bound),
             max_rel(r.dH, r.dH_bound));
  fmt::print("dW       max bound {:.3g}, max relative bound {:.3g}\n", max_of(r.dW_bound),
             max_rel(r.dW, r.dW_bound));
  // Five GEMM-shaped products of S·V·D multiply-adds (logits; dH and |dz|·|W|; dW and |dz|ᵀ·|H|).
  const double gemm_flop = 10.0 * static_cast<double>(pb.N) * pb.V * pb.D;
  fmt::print("time     {:.2f} s  (tier {}; the reference alone, not the problem's generation{})\n",
             secs, to_string(r.tier),
             r.tier == ReferenceTier::compensated
                 ? ""
                 : fmt::format("; {:.3g} TFLOP/s on the 10·N·V·D of its five GEMMs",
                               gemm_flop / secs / 1e12));
  if (r.tier == ReferenceTier::blas) fmt::print("blas     {}\n", blas_description());
  if (r.tier != ReferenceTier::compensated) {
    const double ceiling = measure_dgemm_rate(r.tier);
    fmt::print(
        "gemm     this {} tier's dgemm on a square product now: {:.3g} TFLOP/s; the reference "
        "reached {:.0f} % of it\n",
        to_string(r.tier), ceiling / 1e12, 100.0 * gemm_flop / secs / ceiling);
  }
  if (a.oracle_rows > 0) {
    OracleSampleSpec os;
    os.rows = a.oracle_rows;
    os.seed = a.seed;
    const OracleReport rep = check_with_oracle(pb, spec, opt, r, os);
    fmt::print(
        "oracle   cpp_bin_float_100 on a sample: {} checks, max |fast − oracle|/bound = {:.3g}: "
        "{}\n{}",
        rep.checks.size(), rep.max_ratio, rep.passed() ? "PASSED" : "FAILED", rep.summary());
    return rep.passed() ? 0 : 1;
  }
  return 0;
}

}  // namespace

void register_reference(CLI::App& app) {
  auto a = std::make_shared<ReferenceArgs>();
  CLI::App* c = app.add_subcommand(
      "reference",
      "Certified CPU reference on the embedded example (bf16 head, N=64 V=32000 D=64)");
  c->add_option("--tokens,-N", a->N, "tokens N")->capture_default_str();
  c->add_option("--vocab,-V", a->V, "vocabulary V")->capture_default_str();
  c->add_option("--hidden,-D", a->D, "hidden size D")->capture_default_str();
  c->add_option("--dtype", a->dtype, "input dtype: bf16, fp16, fp32")->capture_default_str();
  c->add_option("--sigma", a->sigma, "standard deviation of the logits")->capture_default_str();
  c->add_option("--seed", a->seed, "generator seed")->capture_default_str();
  c->add_option("--oracle-rows", a->oracle_rows, "token rows checked by the oracle (0 = none)")
      ->check(non_negative())
      ->capture_default_str();
  c->add_option("--threads", a->threads, "OpenMP threads (0 = default)")->check(in_range(0, 4096));
  add_reference_options(c, a->choice);
  a->loss.defaults = LossDefaults::spec;
  add_loss_options(c, a->loss,
                   {LossOption::reduction, LossOption::ignore_index, LossOption::label_smoothing,
                    LossOption::z_loss, LossOption::softcap, LossOption::logit_scale,
                    LossOption::normalizer, LossOption::upstream});
  c->callback([a]() {
    const int rc = run_reference(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli
