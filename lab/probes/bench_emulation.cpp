// Benchmarks of the CPU emulation backend against the certified reference on the same row
// (Google Benchmark). Target: one emulated V = 128256 row within 20× of the reference.
//   bench_emulation                         all benchmarks, 1 OpenMP thread each
//   BM_ReferenceLogitsRow        reference, given logits (bf16), loss + dz of one row
//   BM_EmulatedLogitsRow/<s>     emulation of strategy s (0 naive … 3 fused), recipe
//                                bf16/bf16/fp32/bf16, loss + dz of one row
//   BM_ReferenceLinearRow        reference, linear head D = 512 (bf16), loss + dH of one row
//   BM_EmulatedLinearRow/<s>     emulation, same head, loss only (the emulation's gradients include
//                                the full V×D dW; RunRequest has no vocabulary sampling)
//   BM_EmulatedLinearRowGrads/0  emulation (naive) with dH and the full dW of one row
// Every benchmark reports rows/s; the ratio reference/emulation is the figure of merit.
#include <benchmark/benchmark.h>
#include <omp.h>

#include "datasets/synthetic.hpp"
#include "gpu/registry.hpp"
#include "lab/probes/certified_rows.hpp"
#include "reference/reference.hpp"

namespace {

using namespace xentlab;
using benchmarks::rows_per_second;
constexpr std::int64_t kV = 128256;

const Problem& logits_rows() {
  static const Problem p = make_gaussian_logits(4, kV, DType::bf16, 4.0, 3);
  return p;
}
const Problem& linear_head() {
  static const Problem p = make_gaussian_linear(4, kV, 512, DType::bf16, 4.0, 4);
  return p;
}

void BM_ReferenceLogitsRow(benchmark::State& st) {
  const Problem& p = logits_rows();
  ReferenceOptions o;
  o.want_dz = true;
  o.threads = 1;
  std::int64_t i = 0;
  for (auto _ : st) {
    o.token_rows = {i++ % p.N};
    benchmark::DoNotOptimize(compute_reference(p, LossSpec{}, o).dz.data());
  }
  rows_per_second(st);
}

void run_emulated(benchmark::State& st, const Problem& p, bool grads) {
  omp_set_num_threads(1);
  const auto strategies = make_strategies(Backend::cpu_emulation);
  const auto& s = strategies.at(static_cast<std::size_t>(st.range(0)));
  st.SetLabel(s->name());
  RunRequest req;
  req.problem = &p;
  req.recipe = parse_recipe("bf16/bf16/fp32/bf16");
  req.want_grads = grads;
  std::int64_t i = 0;
  for (auto _ : st) {
    req.token_rows = {i++ % p.N};
    benchmark::DoNotOptimize(s->run(req).loss.data());
  }
  rows_per_second(st);
}

void BM_EmulatedLogitsRow(benchmark::State& st) {
  run_emulated(st, logits_rows(), true);
}

void BM_ReferenceLinearRow(benchmark::State& st) {
  benchmarks::certified_rows(st, linear_head());
}

void BM_EmulatedLinearRow(benchmark::State& st) {
  run_emulated(st, linear_head(), false);
}
void BM_EmulatedLinearRowGrads(benchmark::State& st) {
  run_emulated(st, linear_head(), true);
}

BENCHMARK(BM_ReferenceLogitsRow)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_EmulatedLogitsRow)->DenseRange(0, 3)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_ReferenceLinearRow)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_EmulatedLinearRow)->DenseRange(0, 3)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_EmulatedLinearRowGrads)->Arg(0)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
