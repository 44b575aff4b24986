// `xentlab reference`: run the certified reference on the embedded example (a seeded bf16 linear
// head) or a chosen Gaussian problem, print the loss with its certified bound, and check a sample
// against the multiprecision oracle.
#include <fmt/core.h>

#include <chrono>
#include <cmath>

#include "datasets/synthetic.hpp"
#include "numerics/error.hpp"
#include "reference/oracle.hpp"
#include "reference/reference.hpp"
#include "tools/cli/commands.hpp"

namespace xentlab::cli {
namespace {

struct ReferenceArgs {
  std::int64_t N = 64, V = 32000, D = 64;
  std::string dtype = "bf16";
  double sigma = 4.0;
  std::uint64_t seed = 1;
  std::int64_t oracle_rows = 2;
  LossSpec spec;
  std::string reduction = "mean";
};

int run_reference(const ReferenceArgs& a) {
  LossSpec spec = a.spec;
  spec.reduction = parse_reduction(a.reduction);
  const auto t0 = std::chrono::steady_clock::now();
  // This command computes dW for every vocabulary row (the library's working-set limit, checked
  // here before the problem is generated rather than after a minute of generating it).
  {
    const ReferenceOptions lim;
    const double bytes = static_cast<double>(a.V) * static_cast<double>(a.D) * 32.0;
    if (a.V > 0 && a.D > 0 && bytes > static_cast<double>(lim.max_bytes))
      throw InputError(fmt::format(
          "-V {} × -D {}: dW for every vocabulary row needs {:.1f} GiB of accumulators (limit "
          "{:.1f} GiB); use a smaller -V or -D here, or `xentlab golden`/`xentlab audit`, which "
          "sample vocabulary rows (--vocab-rows)",
          a.V, a.D, bytes / double(1 << 30), lim.max_bytes / double(1 << 30)));
  }
  Problem pb = make_gaussian_linear(a.N, a.V, a.D, parse_dtype(a.dtype), a.sigma, a.seed);
  fmt::print("problem  {} sigma={} seed={}\nspec     {}\n", pb.describe(), a.sigma, a.seed,
             spec.describe());
  ReferenceOptions opt;
  const ReferenceResult r = compute_reference(pb, spec, opt);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("loss     {:.17g}  ± {:.3g}  (certified bound, relative {:.2g})\n", r.reduced_loss,
             r.reduced_loss_bound, r.reduced_loss_bound / std::fabs(r.reduced_loss));
  auto max_rel = [](const std::vector<double>& v, const std::vector<double>& b) {
    double m = 0;
    for (std::size_t k = 0; k < v.size(); ++k)
      if (v[k] != 0) m = std::max(m, b[k] / std::fabs(v[k]));
    return m;
  };
  auto max_of = [](const std::vector<double>& b) {
    double m = 0;
    for (double x : b) m = std::max(m, x);
    return m;
  };
  fmt::print("dH       max bound {:.3g}, max relative bound {:.3g}\n", max_of(r.dH_bound),
             max_rel(r.dH, r.dH_bound));
  fmt::print("dW       max bound {:.3g}, max relative bound {:.3g}\n", max_of(r.dW_bound),
             max_rel(r.dW, r.dW_bound));
  fmt::print("time     {:.2f} s\n", secs);
  if (a.oracle_rows > 0) {
    OracleSampleSpec os;
    os.rows = a.oracle_rows;
    os.seed = a.seed;
    const OracleReport rep = check_with_oracle(pb, spec, opt, r, os);
    fmt::print("oracle   cpp_bin_float_100 on a sample: {} checks, max |fast − oracle|/bound = {:.3g}: {}\n{}",
               rep.checks.size(), rep.max_ratio, rep.passed() ? "PASSED" : "FAILED",
               rep.summary());
    return rep.passed() ? 0 : 1;
  }
  return 0;
}

}  // namespace

void register_reference(CLI::App& app) {
  auto a = std::make_shared<ReferenceArgs>();
  CLI::App* c = app.add_subcommand(
      "reference", "Certified CPU reference on the embedded example (bf16 head, N=64 V=32000 D=64)");
  c->add_option("--tokens,-N", a->N, "tokens N")->capture_default_str();
  c->add_option("--vocab,-V", a->V, "vocabulary V")->capture_default_str();
  c->add_option("--hidden,-D", a->D, "hidden size D")->capture_default_str();
  c->add_option("--dtype", a->dtype, "input dtype: bf16, fp16, fp32")->capture_default_str();
  c->add_option("--sigma", a->sigma, "standard deviation of the logits")->capture_default_str();
  c->add_option("--seed", a->seed, "generator seed")->capture_default_str();
  c->add_option("--oracle-rows", a->oracle_rows, "token rows checked by the oracle (0 = none)")
      ->check(non_negative())
      ->capture_default_str();
  c->add_option("--reduction", a->reduction, "none, mean or sum")->capture_default_str();
  c->add_option("--ignore-index", a->spec.ignore_index, "ignore_index")->capture_default_str();
  c->add_option("--label-smoothing", a->spec.label_smoothing, "label smoothing ε")
      ->capture_default_str();
  c->add_option("--z-loss", a->spec.z_loss, "z-loss λ")->capture_default_str();
  c->add_option("--softcap", a->spec.softcap, "softcap c (0 = off)")->capture_default_str();
  c->add_option("--logit-scale", a->spec.logit_scale, "logit scale (1/temperature)")
      ->capture_default_str();
  c->callback([a]() {
    const int rc = run_reference(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace xentlab::cli
