#pragma once
// Shared by the CPU benchmarks (bench_reference, bench_emulation): the rows/s counter, and one
// certified reference row of a linear problem (loss + dH, 1 thread) per iteration, rotating over
// the problem's rows.
#include <benchmark/benchmark.h>

#include "reference/reference.hpp"

namespace xentlab::benchmarks {

inline void rows_per_second(benchmark::State& st) {
  st.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}

inline void certified_rows(benchmark::State& st, const Problem& p) {
  ReferenceOptions o;
  o.want_dW = o.want_db = false;
  o.threads = 1;
  std::int64_t i = 0;
  for (auto _ : st) {
    o.token_rows = {i++ % p.N};
    benchmark::DoNotOptimize(compute_reference(p, LossSpec{}, o).dH.data());
  }
  rows_per_second(st);
}

}  // namespace xentlab::benchmarks
