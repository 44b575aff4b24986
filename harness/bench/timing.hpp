#pragma once
// The device-level measurement machinery of `xentlab bench` and the lab's CUDA probes (lab/probes),
// behind a host-only header (no CUDA types: device pointers are void*, streams are the default
// stream), so plain C++ files can call it. Built only with the CUDA backend (library xl_bench,
// harness/CMakeLists.txt); the CLI calls it under XENTLAB_HAVE_CUDA.
//
//  - inputs on the device: a counter-based hash generator (splitmix-style mixing of seed and index)
//    gives two uniforms per element, Box–Muller makes a Gaussian, σ·N(0,1) rounded once to the
//    dtype; targets uniform in [0, V). Same seed → same bits on every device.
//  - time: CUDA events around CudaStrategy::forward_backward on a non-blocking stream, warm-up
//    runs excluded, every run's time kept (summarize with summarize_times); the tracker caches
//    same-size blocks between runs, as a framework's caching allocator would, so cudaMalloc is not
//    timed.
//  - memory: the tracker's peak of extra bytes (everything beyond inputs and outputs: logits
//    chunks, temporaries, accumulators, the cuBLAS workspace) over all runs.
//  - the card's cuBLAS bf16 GEMM rate (fp32 compute), the yardstick of the TFLOP/s columns.
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "harness/bench/report.hpp"
#include "numerics/dtype.hpp"

namespace xentlab::gpu {
class CudaStrategy;
struct DeviceRun;
}  // namespace xentlab::gpu

namespace xentlab::bench {

/// Device 0 as the outputs record it. Never throws; !available with the reason when there is none.
struct DeviceDescription {
  bool available = false;
  std::string reason;
  BenchMeta meta;  ///< the device fields (name, versions, clocks, L2, memory)
};
DeviceDescription describe_device();

/// p[i] = rnd_dtype(sigma · N(0,1)_i) for i < n, from (seed, i) only (dtype fp32, fp16 or bf16).
void fill_normal(DType dtype, void* p, std::int64_t n, double sigma, std::uint64_t seed);
/// t[i] uniform in [0, V) from (seed, i).
void fill_targets(std::int64_t* t, std::int64_t n, std::int64_t V, std::uint64_t seed);

/// Times `body` with CUDA events on the default stream: `warmup` + `repeats` calls, `setup(k)`
/// before call k outside the timed region (may be empty); returns the times of the timed calls
/// (ms, in order). Throws DeviceError on a CUDA error.
std::vector<double> time_calls(const std::function<void(int)>& setup,
                               const std::function<void()>& body, int warmup, int repeats);

/// cuBLAS bf16 GEMMs m = n = k = `n` (fp32 compute, bf16 output, N(0,1) operands, one handle):
/// `warmup` + `timed` calls of time_calls, each issuing `per_call` GEMMs back to back; the timed
/// calls' times (ms). Throws InputError for arguments out of range, DeviceError.
std::vector<double> time_cublas_bf16_gemms(std::int64_t n, int per_call, int warmup, int timed);

/// cuBLAS bf16 GEMM m = n = k = `size`, fp32 compute, bf16 output: TFLOP/s of the median of
/// `timed` runs after `warmup`, each timed alone (a burst: the host waits between them, so the
/// card's clock recovers a little under its power cap).
double cublas_bf16_gemm_tflops(std::int64_t size = 8192, int timed = 20, int warmup = 3);

/// The same GEMM sustained: `per_region` GEMMs issued back to back in one timed region, after an
/// untimed region of as many; TFLOP/s of the median of `regions` regions (about 0.1 s each at
/// 8192³ and 60). Under a power cap it is a reference for what a long strategy run gets, not a
/// floor (H200 at 700 W: 650–680 against 783–788 for the burst; docs/benchmarks.md);
/// the bench reports the strategies' 6·N·V·D and 8·N·V·D at this rate. Throws InputError for
/// per_region or regions below 1, DeviceError.
double cublas_bf16_gemm_sustained_tflops(std::int64_t size = 8192, int per_region = 60,
                                         int regions = 3);

/// The inputs of one run: device pointers (H, W in the problem's input dtype; targets int64).
struct InputSet {
  const void* H = nullptr;
  const void* W = nullptr;
  const std::int64_t* targets = nullptr;
};

struct TimedRuns {
  std::vector<double> ms;             ///< the timed runs (warm-up excluded), in order
  std::int64_t peak_extra_bytes = 0;  ///< max over all runs, warm-up included
};

/// Runs `warmup` + `repeats` forward+backward passes of `run` (its prob.H/W/targets replaced by
/// inputs[k mod inputs.size()] for run k). Throws InputError (the strategy does not fit) or
/// DeviceError as forward_backward does.
TimedRuns time_forward_backward(const gpu::CudaStrategy& s, const gpu::DeviceRun& run,
                                const std::vector<InputSet>& inputs, int warmup, int repeats);

/// One strategy of an interleaved measurement and its run (inputs replaced as in
/// time_forward_backward).
struct InterleavedRun {
  const gpu::CudaStrategy* strategy = nullptr;
  const gpu::DeviceRun* run = nullptr;
};
/// What time_interleaved measured of one strategy: its runs, or the exception that stopped it
/// (InputError: it does not fit; DeviceError) with the runs made before it.
struct InterleavedTimes {
  TimedRuns t;
  std::exception_ptr error;
};
/// `warmup` + `repeats` rounds; in round k every strategy not stopped makes one forward+backward
/// pass on inputs[k mod inputs.size()], the round starting at strategy k mod runs.size() (no
/// strategy always follows the same one). The card's clock drifts with its load and temperature
/// under a power cap: strategies timed in turn see the same drift, so the ratios of their
/// medians hold where times taken one strategy after another do not. Each strategy has its own
/// non-blocking stream, cuBLAS handle and caching tracker (its peak extra bytes are its own); a
/// pass that throws is retried once after every strategy's cached blocks are released (the
/// caches of all the strategies are held at once), and a strategy whose retry throws is stopped.
/// A strategy whose cache was released makes an untimed pass before its next timed one (no
/// timed pass allocates, as in time_forward_backward), and every pass reads the next input copy.
/// Throws InputError when inputs is empty.
std::vector<InterleavedTimes> time_interleaved(const std::vector<InterleavedRun>& runs,
                                               const std::vector<InputSet>& inputs, int warmup,
                                               int repeats);

/// The whole `xentlab bench` measurement (harness/bench/run.cpp): every registered CUDA
/// strategy (filtered by options.strategies) × recipe. Throws DeviceError when there is no
/// device; a strategy that does not fit or fails is a row, not an exception. `progress` receives
/// one line per step (may be empty).
BenchReport run_bench(const BenchOptions& options,
                      const std::function<void(const std::string&)>& progress);

}  // namespace xentlab::bench
