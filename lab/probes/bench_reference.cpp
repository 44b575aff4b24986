// Benchmarks of the certified reference (Google Benchmark).
//   bench_reference --benchmark_filter=Row        rows/s of loss+dH, V=128256 D=4096 bf16
//   BM_CertifiedRow   the fast tier (Sum2 logits, compensated sums, Dot2 dH, with bounds)
//   BM_PlainDoubleRow the same loops in plain double, uncertified (the 4× target's baseline)
//   BM_CertifiedRows/threads  4 rows with 1 and 2 OpenMP threads (scaling)
//   BM_OracleRow      one row of the cpp_bin_float_100 oracle (V=32000, D=64: loss + 1 dH entry)
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "datasets/synthetic.hpp"
#include "lab/probes/certified_rows.hpp"
#include "reference/oracle.hpp"
#include "reference/reference.hpp"

namespace {

using namespace xentlab;
using benchmarks::certified_rows;

const Problem& llama_head() {
  static const Problem p = make_gaussian_linear(8, 128256, 4096, DType::bf16, 4.0, 1);
  return p;
}

void BM_CertifiedRow(benchmark::State& st) {
  certified_rows(st, llama_head());
}

// Plain double: logits by a double dot product, max-shifted softmax with plain sums, dz, and
// dH = dz·W by plain multiply-adds. No compensation, no bounds.
void BM_PlainDoubleRow(benchmark::State& st) {
  const Problem& p = llama_head();
  const std::int64_t V = p.V, D = p.D;
  std::vector<double> h(D), w(D), z(V), dH(D);
  std::int64_t i = 0;
  for (auto _ : st) {
    const std::int64_t row = i++ % p.N;
    p.H.read(row * D, D, h.data());
    for (std::int64_t j = 0; j < V; ++j) {
      p.W.read(j * D, D, w.data());
      double acc = 0;
      for (std::int64_t d = 0; d < D; ++d) acc = std::fma(h[d], w[d], acc);
      z[j] = acc;
    }
    double m = -INFINITY;
    for (double x : z) m = std::max(m, x);
    double s = 0;
    for (std::int64_t j = 0; j < V; ++j) s += (z[j] = std::exp(z[j] - m));
    const std::int64_t t = p.targets[static_cast<std::size_t>(row)];
    std::fill(dH.begin(), dH.end(), 0.0);
    for (std::int64_t j = 0; j < V; ++j) {
      const double g = z[j] / s - (j == t ? 1.0 : 0.0);
      p.W.read(j * D, D, w.data());
      for (std::int64_t d = 0; d < D; ++d) dH[d] = std::fma(g, w[d], dH[d]);
    }
    benchmark::DoNotOptimize(dH.data());
    benchmark::DoNotOptimize(m + std::log(s));
  }
  st.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}

void BM_CertifiedRows(benchmark::State& st) {
  const Problem& p = llama_head();
  ReferenceOptions o;
  o.want_dW = o.want_db = false;
  o.threads = static_cast<int>(st.range(0));
  o.token_rows = {0, 1, 2, 3};
  for (auto _ : st) benchmark::DoNotOptimize(compute_reference(p, LossSpec{}, o).dH.data());
  st.counters["rows/s"] =
      benchmark::Counter(4.0 * static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}

void BM_OracleRow(benchmark::State& st) {
  static const Problem p = make_gaussian_linear(4, 32000, 64, DType::bf16, 4.0, 2);
  std::int64_t i = 0;
  for (auto _ : st) {
    Oracle o(p, LossSpec{});
    const std::int64_t row = i++ % p.N;
    benchmark::DoNotOptimize(o.row(row).loss);
    benchmark::DoNotOptimize(o.dH(row, 0));
  }
  st.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.counters["ns/mp-op"] =
      benchmark::Counter(static_cast<double>(st.iterations()) * 32000.0 * 65.0,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Same shape as BM_OracleRow through the fast tier, for the oracle/fast cost ratio.
void BM_CertifiedSmallRow(benchmark::State& st) {
  static const Problem p = make_gaussian_linear(4, 32000, 64, DType::bf16, 4.0, 2);
  certified_rows(st, p);
}

BENCHMARK(BM_CertifiedRow)->Unit(benchmark::kMillisecond)->MinTime(5.0);
BENCHMARK(BM_PlainDoubleRow)->Unit(benchmark::kMillisecond)->MinTime(5.0);
BENCHMARK(BM_CertifiedRows)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(5.0)
    ->UseRealTime();
BENCHMARK(BM_OracleRow)->Unit(benchmark::kMillisecond)->MinTime(5.0);
BENCHMARK(BM_CertifiedSmallRow)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
