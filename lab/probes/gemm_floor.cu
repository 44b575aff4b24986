// gemm_floor: what the card's own GEMMs take for the work of the chunked and checkpointed
// strategies, under its power cap, beside the strategies themselves, in one process. Timing only:
// no result is checked.
//
//   build:  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DXENTLAB_BUILD_LAB=ON
//           cmake --build build-gpu --target gemm_floor -j16
//   run:    build-gpu/lab/gemm_floor [rounds=3] [N...=8192 131072]  (V = 128256, D = 4096)
//           exit 2: bad arguments; 4: no CUDA device; 1: a device error.
//
// The GEMM limits of the strategy table are 6·N·V·D (chunked, naive) and 8·N·V·D (checkpointed)
// at the rate of one cuBLAS bf16 GEMM 8192³, the median of 20 timed one by one with the host
// waiting between them (about 30 ms of load, bench::cublas_bf16_gemm_tflops). A 131072-token pass
// lasts about 20 times longer, and the card runs at its 700 W cap: its clock falls under sustained
// load. Entries, each timed once per round with CUDA events, the round's order rotated so that no
// entry always follows the same one:
//   - "cuBLAS 8192^3 x k": k GEMMs 8192³ in one timed region (bench::time_cublas_bf16_gemms, the
//     bench's own GEMM yardstick), k = the 6·N·V·D of the size in 2·8192³ units: the square
//     GEMM's rate sustained for as long as the strategies run;
//   - "chunked GEMMs only": the three GEMMs of chunked (8192-token chunks: logits in bf16, dH in
//     fp32, dW += in fp32 with beta 1 after the first chunk) through the strategies' wrappers
//     (gpu/cuda/common/gemm.cuh, preferred tiles), no CE kernel: chunked without its non-GEMM work;
//   - "checkpointed GEMMs only": the same with the logits GEMM twice per chunk;
//   - the naive, chunked and checkpointed strategies (forward+backward, bf16/bf16/fp32/fp32,
//     reduction mean, budgets as xentlab bench gives them), each pass preceded by an untimed one.
// Operands: H ~ N(0, 1), W ~ N(0, 4/D) in bf16; the GEMMs-only entries take the logits chunk as
// their dz (finite bf16 values of larger magnitude than a real dz: the GEMM's work is the same,
// its power draw under the cap may differ a little). The chunk sizes the strategies' plans take
// are printed (8192 tokens at V = 128256, as the GEMMs-only entries).
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/common/device.hpp"
#include "gpu/cuda/common/gemm.cuh"
#include "gpu/cuda/steps.cuh"
#include "gpu/registry.hpp"
#include "harness/bench/timing.hpp"

using namespace xentlab;
using namespace xentlab::gpu;

namespace {

struct Entry {
  std::string name;
  double flops = 0;  // the work the entry stands for (6·N·V·D or 8·N·V·D)
  std::function<double()> time_ms;
  std::vector<double> ms;
};

/// A positive decimal integer of at most `max`, the whole argument; 0 where it is not one.
std::int64_t positive(const char* s, std::int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v <= 0 || v > max) return 0;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  // rounds ≤ 100; N ≤ 2^31 − 1 tokens (the strategies' row kernels take one block per row).
  const std::int64_t rounds = argc > 1 ? positive(argv[1], 100) : 3;
  std::vector<std::int64_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(positive(argv[i], 0x7fffffff));
  if (sizes.empty()) sizes = {8192, 131072};
  if (rounds < 1 || std::any_of(sizes.begin(), sizes.end(), [](auto n) { return n <= 0; })) {
    std::fprintf(stderr,
                 "gemm_floor: usage: gemm_floor [rounds 1-100] [N ...] with every N a positive "
                 "decimal integer below 2^31 (given:");
    for (int i = 1; i < argc; ++i) std::fprintf(stderr, " '%s'", argv[i]);
    std::fprintf(stderr, ")\n");
    return 2;
  }
  const DeviceInfo dev = query_device();
  if (!dev.available) {  // the arguments are valid; nothing can be measured here
    std::fprintf(stderr, "gemm_floor: %s\n", dev.reason.c_str());
    return 4;
  }
  const std::int64_t V = 128256, D = 4096, S = 8192, chunk = 8192;
  try {
    const double burst = bench::cublas_bf16_gemm_tflops();
    std::printf(
        "cuBLAS bf16 GEMM 8192^3 (fp32 compute), each timed alone, median of 20: %.1f TFLOP/s\n",
        burst);
    const auto strategies = make_strategies(Backend::cuda);
    auto find = [&](const std::string& n) -> const CudaStrategy* {
      for (const auto& s : strategies)
        if (s->name() == n) return dynamic_cast<const CudaStrategy*>(s.get());
      throw std::runtime_error("no CUDA strategy " + n);
    };
    for (const std::int64_t N : sizes) {
      DeviceMemoryTracker mem;
      DeviceBuffer H(mem, N * D * 2, MemKind::io, "H"), W(mem, V * D * 2, MemKind::io, "W"),
          T(mem, N * 8, MemKind::io, "targets"), loss(mem, N * 4, MemKind::io, "loss"),
          lse(mem, N * 4, MemKind::io, "lse"), dH(mem, N * D * 4, MemKind::io, "dH"),
          dW(mem, V * D * 4, MemKind::io, "dW");
      DeviceBuffer Z(mem, std::min(N, chunk) * V * 2, MemKind::io, "logits chunk");
      bench::fill_normal(DType::bf16, H.get(), N * D, 1.0, 1);
      bench::fill_normal(DType::bf16, W.get(), V * D, 2.0 / std::sqrt(double(D)), 2);
      bench::fill_targets(T.as<std::int64_t>(), N, V, 3);
      XL_CUDA_CHECK(cudaDeviceSynchronize());
      Blas blas(mem, nullptr);
      const double nvd = double(N) * double(V) * double(D);
      const int k = static_cast<int>(std::lround(6.0 * nvd / (2.0 * double(S) * S * S)));
      std::vector<Entry> entries;
      auto timed = [](const std::function<void()>& f) {
        return bench::time_calls({}, f, 0, 1).front();
      };
      entries.push_back({"cuBLAS 8192^3 x " + std::to_string(k), 2.0 * k * double(S) * S * S,
                         [&] { return bench::time_cublas_bf16_gemms(S, k, 0, 1).front(); }});
      auto gemms_only = [&](int logits_gemms) {
        return timed([&] {
          for (std::int64_t r0 = 0; r0 < N; r0 += chunk) {
            const std::int64_t rows = std::min(chunk, N - r0);
            const void* Hc = static_cast<const char*>(H.get()) + r0 * D * 2;
            for (int i = 0; i < logits_gemms; ++i)
              gemm_logits(blas, DType::bf16, Hc, W.get(), rows, V, D, DType::bf16, Z.get());
            gemm_dH(blas, DType::bf16, Z.get(), W.get(), rows, V, D, DType::fp32,
                    static_cast<char*>(dH.get()) + r0 * D * 4);
            gemm_dW(blas, DType::bf16, Z.get(), Hc, rows, V, D, DType::fp32, dW.get(),
                    r0 == 0 ? 0.0f : 1.0f);
          }
        });
      };
      entries.push_back({"chunked GEMMs only", 6 * nvd, [&] { return gemms_only(1); }});
      entries.push_back({"checkpointed GEMMs only", 8 * nvd, [&] { return gemms_only(2); }});
      DeviceRun base;
      base.prob = DeviceProblem{N,       V,       D,       DType::bf16,          H.get(),
                                W.get(), nullptr, nullptr, T.as<std::int64_t>(), N};
      base.recipe = parse_recipe("bf16/bf16/fp32/fp32");
      base.spec.reduction = Reduction::mean;
      base.g.g_scalar = static_cast<float>(1.0 / double(N));
      base.want_grads = true;
      base.out =
          DeviceOutputs{loss.as<float>(), lse.as<float>(), dH.get(), dW.get(), nullptr, nullptr};
      std::vector<DeviceRun> runs(3, base);
      const char* names[3] = {"naive", "chunked", "checkpointed"};
      runs[1].memory_budget = N <= 8192 ? (std::int64_t{2} << 30) : (std::int64_t{4} << 30);
      runs[2].memory_budget = std::int64_t{2} << 30;
      for (int i = 0; i < 3; ++i)
        entries.push_back({names[i], (i == 2 ? 8 : 6) * nvd, [&, i] {
                             const CudaStrategy* s = find(names[i]);
                             return bench::time_forward_backward(
                                        *s, runs[i], {{H.get(), W.get(), T.as<std::int64_t>()}}, 1,
                                        1)
                                 .ms.front();
                           }});
      for (int i = 1; i < 3; ++i) {
        const WorkspaceQuery q{N, V, D, DType::bf16, false, base.recipe, true};
        std::printf("%s: chunks of %lld tokens\n", names[i],
                    (long long)find(names[i])->plan(q, runs[i].memory_budget, 0).rows);
      }
      std::printf("\nN = %lld, V = %lld, D = %lld (%d rounds, one untimed round first)\n",
                  (long long)N, (long long)V, (long long)D, static_cast<int>(rounds));
      for (int round = 0; round <= rounds; ++round)
        for (std::size_t j = 0; j < entries.size(); ++j) {
          Entry& e = entries[(j + static_cast<std::size_t>(round)) % entries.size()];
          const double t = e.time_ms();
          if (round > 0) e.ms.push_back(t);
        }
      std::printf("%-26s %10s %10s %10s %14s\n", "entry", "median ms", "min ms", "max ms",
                  "TFLOP/s (own)");
      for (const Entry& e : entries) {
        const auto s = bench::summarize_times(e.ms);
        std::printf("%-26s %10.2f %10.2f %10.2f %14.1f\n", e.name.c_str(), s.median, s.min, s.max,
                    e.flops / (s.median * 1e-3) / 1e12);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_floor: %s\n", e.what());
    return 1;
  }
  return 0;
}
