// Where the audit's per-run assessment spends its time (judge/bounds_for.cpp assess_run): a linear
// bf16 head of N × V × D with full dW, its reference on the BLAS tier, and an output that is the
// reference rounded to bf16 (as a strategy's bf16 gradients would be). Prints the wall time of the
// bounds, of each output's statistics and of the whole assessment, repeated.
//   bench_assessment [N V D repeats [all|bounds [recipe]]]
//   (defaults 64 32768 4096 2 all bf16/bf16/fp32/bf16; bounds: the bounds alone)
#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "datasets/synthetic.hpp"
#include "gpu/registry.hpp"
#include "judge/bounds_for.hpp"
#include "judge/stats.hpp"
#include "numerics/dtype.hpp"
#include "reference/reference.hpp"

using namespace xentlab;

namespace {
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
template <class Vec>
HostArray<double> rounded(const Vec& v, DType t) {
  HostArray<double> o(v.size());
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < v.size(); ++i) o[i] = round_to(v[i], t);
  return o;
}
}  // namespace

int main(int argc, char** argv) {
  const std::int64_t N = argc > 1 ? std::atoll(argv[1]) : 64;
  const std::int64_t V = argc > 2 ? std::atoll(argv[2]) : 32768;
  const std::int64_t D = argc > 3 ? std::atoll(argv[3]) : 4096;
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 2;
  auto t0 = std::chrono::steady_clock::now();
  const Problem pb = make_gaussian_linear(N, V, D, DType::bf16, 4.0, 1);
  fmt::print("problem {}x{}x{}: {:.2f} s ({} threads)\n", N, V, D, since(t0),
             omp_get_max_threads());
  LossSpec spec;
  ReferenceOptions ro;
  ro.tier = ReferenceTier::blas;
  t0 = std::chrono::steady_clock::now();
  const ReferenceResult ref = compute_reference(pb, spec, ro);
  fmt::print("reference: {:.2f} s\n", since(t0));
  StrategyOutputs out;
  out.token_rows = ref.token_rows;
  out.loss = ref.loss;
  out.lse = ref.lse;
  out.reduced_loss = ref.reduced_loss;
  out.loss_dtype = DType::fp32;
  out.grad_dtype = DType::bf16;
  out.dH = rounded(ref.dH, DType::bf16);
  out.dW = rounded(ref.dW, DType::bf16);
  const HostArray<double> db = rounded(ref.db, DType::bf16);
  out.db.assign(db.begin(), db.end());
  const Recipe recipe = parse_recipe(argc > 6 ? argv[6] : "bf16/bf16/fp32/bf16");
  const auto st = make_strategy(Backend::cpu_emulation, "chunked");
  const DeclaredArithmetic arith = st->arithmetic(recipe);
  const Policy policy = policy_by_name("audit");
  const bool bounds_only = argc > 5 && std::string(argv[5]) == "bounds";
  for (int r = 0; r < repeats; ++r) {
    if (bounds_only) {
      t0 = std::chrono::steady_clock::now();
      const Bounds b = bounds_for_reference(pb, spec, recipe, arith, ref, 0);
      fmt::print("repeat {}: bounds {:.2f} s\n", r, since(t0));
      continue;
    }
    t0 = std::chrono::steady_clock::now();
    const Bounds b = bounds_for_reference(pb, spec, recipe, arith, ref, 0);
    const double tb = since(t0);
    t0 = std::chrono::steady_clock::now();
    const ErrorStats sW =
        compute_error_stats(out.dW.data(), ref.dW.data(), static_cast<std::int64_t>(ref.dW.size()),
                            DType::bf16, b.dW.data());
    const double tsW = since(t0);
    t0 = std::chrono::steady_clock::now();
    const RunAssessment as = assess_run(pb, spec, recipe, arith, out, ref, policy);
    const double ta = since(t0);
    fmt::print(
        "repeat {}: bounds {:.2f} s, dW stats {:.2f} s ({:.1f} ns/element), assess_run {:.2f} s "
        "(its bounds {:.2f} s); dW max ratio {:.3g}\n",
        r, tb, tsW, 1e9 * tsW / static_cast<double>(ref.dW.size()), ta, as.bounds_seconds,
        sW.max_ratio);
  }
  return 0;
}
