// gpu_bench: forward+backward time and peak extra device memory of every CUDA strategy in the
// registry, on device-resident random inputs, plus the card's bf16 GEMM rate for reference.
//
//   build:  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DXENTLAB_BUILD_BENCH=ON
//           cmake --build build-gpu --target gpu_bench -j16
//   run:    build-gpu/tools/gpu_bench [--sizes 8192x128256x4096,131072x128256x4096] [--repeats 5]
//           [--recipes bf16/bf16/fp32/fp32,bf16/bf16/fp32/bf16] [--json out.jsonl]
//           [--strategies naive,chunked] (default: all)
//           [--chunk-sweep 8192,16384] (chunked at the last size with these chunk sizes)
//           [--ab-tiles R] (chunked at the last size, first recipe, R rounds with gemm.cuh's
//           preferred tiles on and off alternated run by run: isolated GEMM timings on this card
//           depend on the order they run in, since it runs at its 700 W power cap)
//
// Inputs: H (N, D) ~ N(0, 1) and W (V, D) ~ N(0, 4/D) in bf16 (a counter-based hash generator on
// the device, seeded), targets uniform in [0, V), reduction mean. Time: CUDA events around
// forward_backward (the device-level entry point the host wrapper also uses), one warm-up run
// excluded, median of the repeats; the device memory tracker caches same-size blocks between
// repeats as a framework allocator would. Memory: the tracker's peak of extra bytes (everything
// beyond inputs and outputs: logits chunks, temporaries, accumulators, cuBLAS workspace).
// The machinery (generator, timing, GEMM rate) is tools/bench/bench_lib.hpp, shared with
// `xentlab bench`, which adds the reference checks, L2 rotation and the output formats.
// TFLOP/s on the 6·N·V·D basis (logits GEMM + two backward GEMMs), against cuBLAS bf16 8192³
// (fp32 compute) measured in the same process. Chunked gets a 2 GiB budget at N ≤ 8192 and 4 GiB
// above; checkpointed 2 GiB; naive runs unbudgeted where it fits and reports its refusal where not.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "datasets/atomic_file.hpp"
#include "gpu/cuda/cuda_check.hpp"
#include "gpu/cuda/cuda_strategy.cuh"
#include "gpu/cuda/device.hpp"
#include "gpu/registry.hpp"
#include "tools/bench/bench_lib.hpp"
#include "tools/cli/commands.hpp"
#include "tools/text.hpp"

using namespace xentlab;
using namespace xentlab::gpu;

namespace {

struct Size {
  std::int64_t N, V, D;
};

double median(const std::vector<double>& v) {
  return v.empty() ? 0.0 : bench::summarize_times(v).median;
}

}  // namespace

int main(int argc, char** argv) {
  std::string sizes_arg = "8192x128256x4096,131072x128256x4096";
  std::string recipes_arg = "bf16/bf16/fp32/fp32,bf16/bf16/fp32/bf16";
  std::string json_path;
  std::string chunk_sweep;  // chunked at the last size with these chunk_tokens (comma-separated)
  int repeats = 5;
  std::string only;   // --strategies: comma-separated names (default: every CUDA strategy)
  int ab_rounds = 0;  // --ab-tiles: rounds of chunked with preferred tiles on/off, alternated
  CLI::App app{
      "gpu_bench: forward+backward time and peak extra device memory of every CUDA "
      "strategy (docs/benchmarks.md)"};
  app.add_option("--sizes", sizes_arg, "comma-separated NxVxD sizes")->capture_default_str();
  app.add_option("--recipes", recipes_arg, "comma-separated recipes input/logits/accum/grad")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs per strategy (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--json", json_path, "also write one JSON object per line to this file");
  app.add_option("--chunk-sweep", chunk_sweep,
                 "chunked at the last size with these chunk sizes (comma-separated tokens)");
  app.add_option("--strategies", only, "only these strategies (comma-separated; default all)");
  app.add_option("--ab-tiles", ab_rounds,
                 "rounds of chunked at the last size with the preferred cuBLASLt tiles on and "
                 "off, alternated run by run")
      ->check(CLI::Range(0, 1000));
  xentlab::cli::require_decimal_integers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : 2;      // invalid options: 2, as every other check below
  }
  // Sizes NxVxD and chunk sizes: positive decimal integers, checked before any device work.
  auto positive = [](const std::string& t, std::int64_t& v) {
    if (t.empty() || t.size() > 12 || t[0] == '0' ||
        t.find_first_not_of("0123456789") != std::string::npos)
      return false;
    v = std::stoll(t);
    return true;
  };
  std::vector<Size> sizes;
  for (const auto& s : split(sizes_arg, ',')) {
    const auto f = split(s, 'x');
    Size z{};
    if (f.size() != 3 || !positive(f[0], z.N) || !positive(f[1], z.V) || !positive(f[2], z.D)) {
      std::fprintf(stderr, "gpu_bench: --sizes: '%s' is not NxVxD with positive decimal integers\n",
                   s.c_str());
      return 2;
    }
    sizes.push_back(z);
  }
  if (sizes.empty()) {
    std::fprintf(stderr, "gpu_bench: --sizes: no size given\n");
    return 2;
  }
  std::vector<std::pair<std::string, Recipe>> recipes;  // (as given, parsed)
  try {
    for (const auto& rname : split(recipes_arg, ','))
      recipes.emplace_back(rname, parse_recipe(rname));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: --recipes: %s\n", e.what());
    return 2;
  }
  if (recipes.empty()) {
    std::fprintf(stderr, "gpu_bench: --recipes: no recipe given\n");
    return 2;
  }
  std::vector<std::int64_t> chunks;
  if (!chunk_sweep.empty())
    for (const auto& c : split(chunk_sweep, ',')) {
      std::int64_t v = 0;
      if (!positive(c, v)) {
        std::fprintf(stderr, "gpu_bench: --chunk-sweep: '%s' is not a positive decimal integer\n",
                     c.c_str());
        return 2;
      }
      chunks.push_back(v);
    }
  // --strategies: names of the CUDA registry (its objects need no device).
  {
    const std::vector<std::string> known = strategy_names(Backend::cuda);
    for (const auto& name : split(only, ','))
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ",") + k;
        std::fprintf(stderr,
                     "gpu_bench: --strategies: unknown strategy '%s' (this build has: %s)\n",
                     name.c_str(), list.empty() ? "none" : list.c_str());
        return 2;
      }
  }
  // --json: its folder must take the file before any measurement (it is then rewritten).
  if (!json_path.empty()) {
    try {
      xentlab::AtomicOutput(json_path, true).check_writable();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpu_bench: --json: %s\n", e.what());
      return 2;
    }
  }
  const DeviceInfo dev = query_device();
  if (!dev.available) {
    // The options are valid; nothing can be measured here (exit 4, as `xentlab bench`).
    std::fprintf(stderr, "gpu_bench: %s\n", dev.reason.c_str());
    return 4;
  }
  try {
    std::printf("device: %s, %d SMs, %.1f GiB, driver %d, runtime %d\n", dev.name.c_str(),
                dev.multiprocessors, dev.memory_gib, dev.driver_version, dev.runtime_version);
    const double peak = bench::cublas_bf16_gemm_tflops();
    std::printf("cuBLAS bf16 GEMM 8192^3 (fp32 compute): %.1f TFLOP/s (median of 20)\n", peak);
    std::ofstream json;
    if (!json_path.empty()) {
      json.open(json_path);
      if (!json) throw std::runtime_error("--json: cannot open " + json_path + " for writing");
    }
    if (json) json << "{\"kind\":\"gemm\",\"tflops\":" << peak << "}\n";

    {
      // The CE kernel alone: 8192 rows of V = 128256 bf16 logits, fp32 accumulator, dz in place.
      const std::int64_t rows = 8192, V = 128256;
      DeviceMemoryTracker m;
      DeviceBuffer z(m, rows * V * 2, MemKind::io, "logits"),
          t(m, rows * 8, MemKind::io, "targets");
      DeviceBuffer l(m, rows * 4, MemKind::io, "loss"), e(m, rows * 4, MemKind::io, "lse");
      bench::fill_targets(t.as<std::int64_t>(), rows, V, 5);
      const RowLossParams plain = make_row_params(LossSpec{}, V, DType::fp32);
      RowLossParams general = plain;
      general.general_path = true;
      for (int variant = 0; variant < 6; ++variant) {
        // The plain path (default) at five grids, then the general per-element path (same bits).
        const std::int64_t grids[] = {0, 132, 264, 528, 1056, 0};
        const std::int64_t grid = grids[variant];
        const RowLossParams& rp = variant < 5 ? plain : general;
        const double med = median(bench::time_calls(
            [&](int it) { bench::fill_normal(DType::bf16, z.get(), rows * V, 3.0, 7 + it); },
            [&] {
              launch_ce_rows(DType::bf16, z.get(), rows, t.as<std::int64_t>(), l.as<float>(),
                             e.as<float>(), rp, true, RowGradScale{nullptr, 1.0f / rows}, nullptr,
                             grid);
            },
            1, 5));
        std::printf(
            "CE kernel (8192 x 128256 bf16, fp32 accum, dz in place, %s path, grid %lld%s): "
            "%.3f ms, %.0f GB/s counting 3 reads + 1 write\n",
            variant < 5 ? "plain" : "general", (long long)grid, grid == 0 ? " = default" : "", med,
            4.0 * rows * V * 2 / (med * 1e-3) / 1e9);
        if (json)
          json << "{\"kind\":\"ce_kernel\",\"path\":\"" << (variant < 5 ? "plain" : "general")
               << "\",\"grid\":" << grid << ",\"median_ms\":" << med << "}\n";
      }
    }

    {
      // The backward GEMMs of one 8192-token chunk at the preset's V and D through the
      // strategies' wrappers (gemm.cuh): which algorithm they chose, and their time.
      const std::int64_t rows = 8192, V = 128256, D = 4096;
      DeviceMemoryTracker m;
      DeviceBuffer dz(m, rows * V * 2, MemKind::io, "dz"), Wb(m, V * D * 2, MemKind::io, "W"),
          Hb(m, rows * D * 2, MemKind::io, "H"), dH(m, rows * D * 2, MemKind::io, "dH"),
          dW(m, V * D * 4, MemKind::io, "dW");
      bench::fill_normal(DType::bf16, dz.get(), rows * V, 1e-5, 11);
      bench::fill_normal(DType::bf16, Wb.get(), V * D, 0.03, 12);
      bench::fill_normal(DType::bf16, Hb.get(), rows * D, 1.0, 13);
      XL_CUDA_CHECK(cudaMemset(dW.get(), 0, V * D * 4));
      Blas blas(m, nullptr);
      auto time_it = [&](const char* what, const std::function<void()>& f) {
        const double med = median(bench::time_calls({}, f, 1, 5));
        std::printf("%s (8192-token chunk): %.3f ms, %.1f TFLOP/s\n", what, med,
                    2.0 * rows * V * D / (med * 1e-3) / 1e12);
        if (json)
          json << "{\"kind\":\"gemm_chunk\",\"what\":\"" << what << "\",\"median_ms\":" << med
               << "}\n";
      };
      DeviceBuffer Z(m, rows * V * 2, MemKind::io, "logits");
      time_it("logits GEMM (bf16 out)", [&] {
        gemm_logits(blas, DType::bf16, Hb.get(), Wb.get(), rows, V, D, DType::bf16, Z.get());
      });
      time_it("logits GEMM (bf16 out), cublasGemmEx default", [&] {
        const float one = 1.0f, zero = 0.0f;
        XL_CUBLAS_CHECK(cublasGemmEx_64(blas.handle(), CUBLAS_OP_T, CUBLAS_OP_N, V, rows, D, &one,
                                        Wb.get(), CUDA_R_16BF, D, Hb.get(), CUDA_R_16BF, D, &zero,
                                        Z.get(), CUDA_R_16BF, V, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
      });
      time_it("dH GEMM (bf16 out)", [&] {
        gemm_dH(blas, DType::bf16, dz.get(), Wb.get(), rows, V, D, DType::bf16, dH.get());
      });
      time_it("dW GEMM (fp32, beta 1)", [&] {
        gemm_dW(blas, DType::bf16, dz.get(), Hb.get(), rows, V, D, DType::fp32, dW.get(), 1.0f);
      });
      int found = 0;
      for (const auto& kv : blas.choices) found += kv.second.found ? 1 : 0;
      std::printf("GEMMs through a preferred cuBLASLt tile: %d of %zu (sm_90: %s)\n", found,
                  blas.choices.size(), blas.sm90() ? "yes" : "no");
    }

    auto strategies = make_strategies(Backend::cuda);
    std::printf("\n%-8s %-7s %-5s %-22s %-13s %10s %9s %12s %10s %8s  %s\n", "N", "V", "D",
                "recipe", "strategy", "median_ms", "TFLOP/s", "extra_GiB", "budget_GiB", "chunk",
                "note");
    for (const Size& sz : sizes) {
      DeviceMemoryTracker io;
      DeviceBuffer H(io, sz.N * sz.D * 2, MemKind::io, "H"),
          W(io, sz.V * sz.D * 2, MemKind::io, "W");
      DeviceBuffer T(io, sz.N * 8, MemKind::io, "targets");
      DeviceBuffer loss(io, sz.N * 4, MemKind::io, "loss"), lse(io, sz.N * 4, MemKind::io, "lse");
      bench::fill_normal(DType::bf16, H.get(), sz.N * sz.D, 1.0, 1);
      bench::fill_normal(DType::bf16, W.get(), sz.V * sz.D, 2.0 / std::sqrt(double(sz.D)), 2);
      bench::fill_targets(T.as<std::int64_t>(), sz.N, sz.V, 3);
      XL_CUDA_CHECK(cudaDeviceSynchronize());
      for (const auto& given : recipes) {
        const std::string& rname = given.first;
        const Recipe& recipe = given.second;
        DeviceBuffer dH(io, sz.N * sz.D * size_of(recipe.grad), MemKind::io, "dH");
        DeviceBuffer dW(io, sz.V * sz.D * size_of(recipe.grad), MemKind::io, "dW");
        std::vector<std::pair<const CudaStrategy*, std::int64_t>> runs;
        for (const auto& s : strategies)
          if (auto* cs = dynamic_cast<const CudaStrategy*>(s.get()))
            if (only.empty() ||
                ("," + only + ",").find("," + cs->name() + ",") != std::string::npos)
              runs.push_back({cs, 0});
        if (&sz == &sizes.back())
          for (std::int64_t c : chunks)
            for (const auto& s : strategies)
              if (s->name() == "chunked")
                runs.push_back({dynamic_cast<const CudaStrategy*>(s.get()), c});
        // A forward+backward run of this size and recipe, reduction mean, every output written.
        auto base_run = [&] {
          DeviceRun r;
          r.prob = DeviceProblem{sz.N,    sz.V,    sz.D,    DType::bf16,          H.get(),
                                 W.get(), nullptr, nullptr, T.as<std::int64_t>(), sz.N};
          r.recipe = recipe;
          r.spec.reduction = Reduction::mean;
          r.g.g_scalar = static_cast<float>(1.0 / double(sz.N));
          r.want_grads = true;
          r.out = DeviceOutputs{loss.as<float>(), lse.as<float>(), dH.get(),
                                dW.get(),         nullptr,         nullptr};
          return r;
        };
        for (const auto& [cs, forced_chunk] : runs) {
          DeviceRun r = base_run();
          const std::string nm = cs->name();
          if (nm == "chunked")
            r.memory_budget = sz.N <= 8192 ? (std::int64_t{2} << 30) : (std::int64_t{4} << 30);
          // checkpointed: 2 GiB; with 16-bit gradients the fp32 dW accumulator alone is V·D·4 bytes
          // (1.96 GiB at V=128256, D=4096), so it gets 4 GiB there.
          if (nm == "checkpointed")
            r.memory_budget =
                recipe.grad == DType::fp32 ? (std::int64_t{2} << 30) : (std::int64_t{4} << 30);
          r.chunk_tokens = forced_chunk;
          // The sweep's chunk size decides alone: an explicit budget would bound it (plan_chunks).
          if (forced_chunk > 0) r.memory_budget = 0;
          const WorkspaceQuery q{sz.N, sz.V, sz.D, DType::bf16, false, recipe, true};
          std::string note = forced_chunk > 0 ? "chunk_tokens forced" : "";
          std::vector<double> ms;
          std::int64_t peak_extra = 0, chunk = 0;
          try {
            chunk = cs->plan(q, r.memory_budget, r.chunk_tokens).rows;
            const bench::TimedRuns t = bench::time_forward_backward(
                *cs, r, {{H.get(), W.get(), T.as<std::int64_t>()}}, 1, repeats);
            ms = t.ms;
            peak_extra = t.peak_extra_bytes;
            // Sanity: the loss of token 0 is finite.
            float l0 = 0;
            XL_CUDA_CHECK(cudaMemcpy(&l0, loss.get(), 4, cudaMemcpyDeviceToHost));
            if (!std::isfinite(l0)) note = "NON-FINITE LOSS";
          } catch (const std::exception& e) {
            note = std::string("refused: ") + e.what();
          }
          const double med = median(ms);
          const double tflops = med > 0 ? 6.0 * sz.N * sz.V * sz.D / (med * 1e-3) / 1e12 : 0.0;
          std::printf("%-8lld %-7lld %-5lld %-22s %-13s %10.2f %9.1f %12.3f %10.2f %8lld  %s\n",
                      (long long)sz.N, (long long)sz.V, (long long)sz.D, rname.c_str(), nm.c_str(),
                      med, tflops, peak_extra / 1073741824.0, r.memory_budget / 1073741824.0,
                      (long long)chunk, note.c_str());
          std::fflush(stdout);
          if (json)
            json << "{\"kind\":\"strategy\",\"N\":" << sz.N << ",\"V\":" << sz.V
                 << ",\"D\":" << sz.D << ",\"recipe\":\"" << rname << "\",\"strategy\":\"" << nm
                 << "\",\"median_ms\":" << med << ",\"tflops\":" << tflops
                 << ",\"peak_extra_bytes\":" << peak_extra << ",\"chunk\":" << chunk
                 << ",\"budget\":" << r.memory_budget << ",\"repeats\":" << ms.size()
                 << ",\"gemm_tflops\":" << peak << ",\"note\":\"" << (note.empty() ? "" : "see log")
                 << "\"}\n";
        }
        if (ab_rounds > 0 && &sz == &sizes.back() && rname == recipes.front().first) {
          // Preferred cuBLASLt tiles on and off, alternated run by run (the order flips every
          // round) so that the card's power and thermal state is shared evenly by the two.
          for (const auto& s : strategies) {
            auto* cs = dynamic_cast<const CudaStrategy*>(s.get());
            if (cs == nullptr || cs->name() != "chunked") continue;
            DeviceRun r = base_run();
            r.memory_budget = std::int64_t{4} << 30;
            std::vector<double> on, off;
            for (int round = 0; round < ab_rounds; ++round)
              for (int k = 0; k < 2; ++k) {
                const bool pref = (round + k) % 2 == 0;
                set_preferred_tiles(pref);
                const bench::TimedRuns t = bench::time_forward_backward(
                    *cs, r, {{H.get(), W.get(), T.as<std::int64_t>()}}, 1, 1);
                (pref ? on : off).push_back(t.ms.front());
              }
            set_preferred_tiles(true);
            auto list = [](const std::vector<double>& v) {
              std::string o;
              for (double x : v) o += " " + std::to_string(x).substr(0, 6);
              return o;
            };
            std::printf(
                "A/B chunked N=%lld %s, preferred tiles on: median %.2f ms (%s), off: "
                "median %.2f ms (%s)\n",
                (long long)sz.N, rname.c_str(), median(on), list(on).c_str(), median(off),
                list(off).c_str());
            if (json)
              json << "{\"kind\":\"ab_tiles\",\"N\":" << sz.N << ",\"recipe\":\"" << rname
                   << "\",\"on_median_ms\":" << median(on) << ",\"off_median_ms\":" << median(off)
                   << "}\n";
          }
        }
      }
      // Clean refusal of a naive run that does not fit its budget.
      for (const auto& s : strategies) {
        auto* cs = dynamic_cast<const CudaStrategy*>(s.get());
        if (cs == nullptr || cs->name() != "naive") continue;
        DeviceRun r;
        r.prob = DeviceProblem{sz.N,    sz.V,    sz.D,    DType::bf16,          H.get(),
                               W.get(), nullptr, nullptr, T.as<std::int64_t>(), sz.N};
        r.recipe = parse_recipe("bf16/bf16/fp32/bf16");
        r.want_grads = false;
        r.out.loss = loss.as<float>();
        r.out.lse = lse.as<float>();
        r.memory_budget = std::int64_t{1} << 30;
        DeviceMemoryTracker mem;
        cudaStream_t st;
        XL_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        try {
          Blas blas(mem, st);
          DeviceContext ctx{mem, blas, st};
          cs->forward_backward(r, ctx);
          std::printf("naive with a 1 GiB budget at N=%lld: ran (fits)\n", (long long)sz.N);
        } catch (const InputError& e) {
          std::printf("naive with a 1 GiB budget at N=%lld: refused: %s\n", (long long)sz.N,
                      e.what());
        }
        cudaStreamDestroy(st);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
