// fused_breakdown: where the fused strategy's time goes (docs/fused.md, "What limits it").
// Times CudaStrategy::forward_backward of
//   fused                 forward only, and forward + backward (the registry's strategy: the
//                         staged backward), each also with the mma.sync kernels forced
//                         (FusedKernelPath::mma_sync, gpu/cuda/fused/fused.hpp);
//   fused on-chip         forward + backward with the on-chip backward (FusedBackward::on_chip:
//                         ordered additions), the baseline of the variants below, also with the
//                         mma.sync kernels forced;
//   fused-atomic          the backward FusedBackwardAtomic: the fp32 additions as atomics in a
//                         scheduling-dependent order (the strategy's before they took turns);
//   fused-consumer-handover  the backward FusedBackwardConsumerHandOver: the same ordered
//                         additions with the turns taken and passed on by the consumer warpgroups
//                         (the strategy's before its helper warps);
//   fused-overlapped      the backward FusedBackwardOverlapped: helper warps, and each GEMM's
//                         additions while the other GEMM runs;
//   fused-red-in-turn     the backward FusedBackwardReductionInTurn: the same turns, each
//                         addition an fp32 reduction (red.global.add) instead of load/add/store;
//   fused-red-no-wait     the backward FusedBackwardReductionNoWait: fused-red-in-turn whose
//                         helper warps do not wait for the turns (timing only);
//   fused-red-no-wait-rotated  FusedBackwardReductionNoWaitRotated: fused-red-no-wait with each
//                         tile's D slices from the atomic kernel's rotated start (timing only);
//   fused-split-handover  the backward FusedBackwardSplitHandOver: one warp polls the turns,
//                         one per consumer warpgroup fences and hands them on;
//   fused-turns-4, fused-turns-8  the backward with one turn of the helper-warp hand-over per
//                         4 or 8 D slices (FusedBackwardTurns4, …; the strategy's: one a slice);
//   fused-diagonal-raster the backward FusedBackwardDiagonalRaster: tiles by anti-diagonals
//                         within a raster group instead of token block fastest;
//   fused-noatomics       the backward FusedBackwardNoReductions: the gradient GEMMs run, their
//                         fp32 reductions into dH/dW are dropped;
//   fused-nograd          the backward FusedBackwardDzOnly: it recomputes the logits and forms
//                         dz, then stops;
//   fused-group4, -16, -32  the backward rastered in groups of 4, 16 or 32 token blocks
//                         (FusedBackwardGroup4 …; the strategy's wgmma backward takes 8);
// and chunked for comparison. The variants (fused_variants/fused_variants.cuh) are template
// parameters of a lab copy of the on-chip backward's kernels (fused_variants/
// backward_variants.cuh; the shipped gpu/cuda/fused/backward.cuh keeps the strategy's
// configuration alone), plugged into the strategy through make_cuda_fused_variant; their gradients
// are wrong by construction or differ in reduction order: timing only.
// Inputs as xentlab bench (harness/bench/timing.hpp): H ~ N(0,1), W ~ N(0, 1/64²) in bf16,
// uniform targets, reduction mean, recipe bf16/bf16/fp32/bf16; median of `repeats` after one
// warm-up, the entries interleaved round by round (bench::time_interleaved).
//   build: cmake -S . -B build-gpu -DXENTLAB_BUILD_LAB=ON && cmake --build build-gpu
//          --target fused_breakdown
//   run:   build-gpu/lab/fused_breakdown [repeats=3] [N ...]   (default N = 8192)
//          XL_BREAKDOWN_ONLY=label,label,... runs only the entries with those labels.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gpu/cuda/fused/fused.hpp"
#include "gpu/cuda/fused/launch.cuh"
#include "gpu/cuda/steps.cuh"
#include "gpu/registry.hpp"
#include "harness/bench/timing.hpp"
#include "lab/probes/fused_variants/fused_variants.cuh"

using namespace xentlab;

namespace {
/// The fused strategy (automatic kernel path) with the lab copy's backward in variant V,
/// instantiated in fused_variants/.
template <class V>
std::unique_ptr<Strategy> fused_with_backward() {
  return gpu::fused::make_cuda_fused_variant(gpu::FusedKernelPath::automatic,
                                             &gpu::fused::variants::launch_fused_backward<V>);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::printf(
        "usage: fused_breakdown [REPEATS=3] [N ...=8192]  (V = 128256, D = 4096; "
        "XL_BREAKDOWN_ONLY=label,label picks rows; docs/fused.md)\n");
    return 0;
  }
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  std::vector<std::int64_t> Ns;
  for (int i = 2; i < argc; ++i) Ns.push_back(std::atoll(argv[i]));
  if (Ns.empty()) Ns.push_back(8192);
  const std::int64_t V = 128256, D = 4096;
  const bench::DeviceDescription dev = bench::describe_device();
  if (!dev.available) {
    std::fprintf(stderr, "fused_breakdown: %s\n", dev.reason.c_str());
    return 4;  // nothing measurable here, as `xentlab bench`
  }
  struct Entry {
    std::string label;
    std::unique_ptr<Strategy> s;
    bool forward_only;
  };
  auto registered = [](const std::string& name) {
    for (auto& s : make_strategies(Backend::cuda))
      if (s->name() == name) return std::move(s);
    return std::unique_ptr<Strategy>{};
  };
  std::vector<Entry> entries;
  namespace fv = gpu::fused::variants;
  // A timing variant of the backward (fused_variants.cuh) under its label.
  const auto variant_entry = [&](const char* label, std::unique_ptr<Strategy> s) {
    entries.push_back({label, std::move(s), false});
  };
  entries.push_back({"fused forward only", registered("fused"), true});
  entries.push_back({"fused", registered("fused"), false});
  entries.push_back(
      {"fused on-chip",
       gpu::make_cuda_fused(gpu::FusedKernelPath::automatic, gpu::FusedBackward::on_chip), false});
  variant_entry("fused-atomic", fused_with_backward<fv::FusedBackwardAtomic>());
  variant_entry("fused-consumer-handover",
                fused_with_backward<fv::FusedBackwardConsumerHandOver>());
  variant_entry("fused-overlapped", fused_with_backward<fv::FusedBackwardOverlapped>());
  variant_entry("fused-red-in-turn", fused_with_backward<fv::FusedBackwardReductionInTurn>());
  variant_entry("fused-red-no-wait", fused_with_backward<fv::FusedBackwardReductionNoWait>());
  variant_entry("fused-red-no-wait-rotated",
                fused_with_backward<fv::FusedBackwardReductionNoWaitRotated>());
  variant_entry("fused-split-handover", fused_with_backward<fv::FusedBackwardSplitHandOver>());
  variant_entry("fused-turns-4", fused_with_backward<fv::FusedBackwardTurns4>());
  variant_entry("fused-turns-8", fused_with_backward<fv::FusedBackwardTurns8>());
  variant_entry("fused-diagonal-raster", fused_with_backward<fv::FusedBackwardDiagonalRaster>());
  variant_entry("fused-noatomics", fused_with_backward<fv::FusedBackwardNoReductions>());
  variant_entry("fused-nograd", fused_with_backward<fv::FusedBackwardDzOnly>());
  variant_entry("fused-group4", fused_with_backward<fv::FusedBackwardGroup4>());
  variant_entry("fused-group16", fused_with_backward<fv::FusedBackwardGroup16>());
  variant_entry("fused-group32", fused_with_backward<fv::FusedBackwardGroup32>());
  entries.push_back(
      {"fused, mma.sync", gpu::make_cuda_fused(gpu::FusedKernelPath::mma_sync), false});
  entries.push_back(
      {"fused forward, mma.sync", gpu::make_cuda_fused(gpu::FusedKernelPath::mma_sync), true});
  entries.push_back(
      {"fused on-chip, mma.sync",
       gpu::make_cuda_fused(gpu::FusedKernelPath::mma_sync, gpu::FusedBackward::on_chip), false});
  entries.push_back({"chunked", registered("chunked"), false});
  if (const char* only = std::getenv("XL_BREAKDOWN_ONLY"); only != nullptr && *only != '\0') {
    const std::string list = "," + std::string(only) + ",";
    entries.erase(std::remove_if(entries.begin(), entries.end(),
                                 [&](const Entry& e) {
                                   return list.find("," + e.label + ",") == std::string::npos;
                                 }),
                  entries.end());
  }
  try {
    for (const std::int64_t N : Ns) {
      gpu::DeviceMemoryTracker io;
      gpu::DeviceBuffer H(io, N * D * 2, gpu::MemKind::io, "H"),
          W(io, V * D * 2, gpu::MemKind::io, "W"), T(io, N * 8, gpu::MemKind::io, "targets"),
          L(io, N * 4, gpu::MemKind::io, "loss"), E(io, N * 4, gpu::MemKind::io, "lse"),
          dH(io, N * D * 2, gpu::MemKind::io, "dH"), dW(io, V * D * 2, gpu::MemKind::io, "dW");
      bench::fill_normal(DType::bf16, H.get(), N * D, 1.0, 1);
      bench::fill_normal(DType::bf16, W.get(), V * D, 1.0 / 64.0, 2);
      bench::fill_targets(T.as<std::int64_t>(), N, V, 3);
      // Every entry in turn, round after round (bench::time_interleaved): their ratios hold
      // under the card's power cap.
      std::vector<gpu::DeviceRun> runs(entries.size());
      std::vector<bench::InterleavedRun> order;
      for (std::size_t i = 0; i < entries.size(); ++i) {
        const auto* cs = dynamic_cast<const gpu::CudaStrategy*>(entries[i].s.get());
        if (cs == nullptr) continue;
        gpu::DeviceRun& r = runs[i];
        r.prob = gpu::DeviceProblem{N,       V,       D,       DType::bf16,          H.get(),
                                    W.get(), nullptr, nullptr, T.as<std::int64_t>(), N};
        r.recipe = parse_recipe("bf16/bf16/fp32/bf16");
        r.want_grads = !entries[i].forward_only;
        r.g.g_scalar = 1.0f / static_cast<float>(N);
        r.out.loss = L.as<float>();
        r.out.lse = E.as<float>();
        r.out.dH = dH.get();
        r.out.dW = dW.get();
        order.push_back({cs, &r});
      }
      const std::vector<bench::InterleavedTimes> times =
          bench::time_interleaved(order, {{H.get(), W.get(), T.as<std::int64_t>()}}, 1, repeats);
      std::size_t k = 0;
      for (const Entry& e : entries) {
        if (dynamic_cast<const gpu::CudaStrategy*>(e.s.get()) == nullptr) continue;
        const bench::InterleavedTimes& it = times[k++];
        if (it.error || it.t.ms.empty()) {
          std::string why = "no timed run";
          try {
            if (it.error) std::rethrow_exception(it.error);
          } catch (const std::exception& ex) {
            why = ex.what();
          }
          std::printf("N=%lld %-20s failed: %s\n", static_cast<long long>(N), e.label.c_str(),
                      why.c_str());
          continue;
        }
        const bool fused = e.label.rfind("fused", 0) == 0;
        const gpu::FusedKernels kernels =
            fused ? gpu::last_fused_kernels(*e.s) : gpu::FusedKernels{};
        std::vector<double> ms = it.t.ms;
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        const double flops = (e.forward_only ? 2.0 : 8.0) * N * V * D;
        std::printf(
            "N=%lld %-20s median %9.2f ms (min %.2f, max %.2f)  %6.1f TFLOP/s (%s)  "
            "peak extra %lld B%s%s%s%s\n",
            static_cast<long long>(N), e.label.c_str(), med, ms.front(), ms.back(),
            flops / (med * 1e-3) / 1e12, e.forward_only ? "2NVD" : "8NVD",
            static_cast<long long>(it.t.peak_extra_bytes), fused ? ", forward kernel " : "",
            fused ? kernels.forward : "", fused && !e.forward_only ? ", backward " : "",
            fused && !e.forward_only ? kernels.backward : "");
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "fused_breakdown: %s\n", ex.what());
    return 1;
  }
  return 0;
}
