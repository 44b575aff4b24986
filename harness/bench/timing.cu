// Device-level measurement machinery of the benchmarks (see timing.hpp).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/common/device.hpp"
#include "gpu/cuda/steps.cuh"
#include "harness/bench/timing.hpp"
#include "numerics/error.hpp"

namespace xentlab::bench {
namespace {

__device__ __forceinline__ unsigned long long mix(unsigned long long x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

__device__ __forceinline__ void store(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store(__half* p, float v) {
  *p = __float2half_rn(v);
}
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}

/// Gaussian (Box–Muller on two hashed uniforms) times sigma, rounded once to T.
template <class T>
__global__ void fill_normal_kernel(T* p, std::int64_t n, float sigma, unsigned long long seed) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const unsigned long long a = mix(seed * 0x9e3779b97f4a7c15ULL + 2 * i);
    const unsigned long long b = mix(seed * 0x9e3779b97f4a7c15ULL + 2 * i + 1);
    const float u1 = ((a >> 40) + 1.0f) / 16777217.0f, u2 = (b >> 40) / 16777216.0f;
    store(p + i, sigma * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}

__global__ void fill_targets_kernel(std::int64_t* t, std::int64_t n, std::int64_t V,
                                    unsigned long long seed) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    t[i] = static_cast<std::int64_t>(mix(seed + i) % static_cast<unsigned long long>(V));
}

unsigned grid_for(std::int64_t n) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((n + 255) / 256, 1, 8192));
}

/// The kernel driver's version from /proc/driver/nvidia/version ("" where absent): the first
/// word of the first line that is digits and dots with at least one dot ("580.159.04").
std::string kernel_driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string word;
  std::getline(f, word);
  std::istringstream line(word);
  while (line >> word) {
    const bool digits_dots = word.find_first_not_of("0123456789.") == std::string::npos;
    if (digits_dots && word.find('.') != std::string::npos && std::isdigit(word[0])) return word;
  }
  return "";
}

struct Event {
  cudaEvent_t e = nullptr;
  Event() { XL_CUDA_CHECK(cudaEventCreate(&e)); }
  ~Event() { (void)cudaEventDestroy(e); }
};

// A strategy's own stream, cuBLAS handle and caching tracker (destroyed in reverse order: the
// handle's workspace goes back to the tracker before the tracker frees its cache), and its run.
// cold (time_interleaved): its cache was released, so its next pass would allocate inside the
// timed window; it makes an untimed pass first.
struct Lane {
  gpu::DeviceMemoryTracker mem;
  cudaStream_t st = nullptr;
  std::unique_ptr<gpu::Blas> blas;
  gpu::DeviceRun r;
  bool live = true, cold = false;
  explicit Lane(const gpu::DeviceRun& run) : r(run) {
    mem.set_caching(true);
    XL_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    try {
      blas = std::make_unique<gpu::Blas>(mem, st);
    } catch (...) {
      (void)cudaStreamDestroy(st);
      throw;
    }
  }
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  ~Lane() {
    if (st) (void)cudaStreamSynchronize(st);
    blas.reset();
    if (st) (void)cudaStreamDestroy(st);
  }
};

// One forward+backward pass of s on the lane's run with the inputs `in`, between the events on
// the lane's stream (the tracker's peak reset before it): its milliseconds.
float timed_pass(const gpu::CudaStrategy& s, Lane& L, const InputSet& in, const Event& e0,
                 const Event& e1) {
  L.r.prob.H = in.H;
  L.r.prob.W = in.W;
  L.r.prob.targets = in.targets;
  gpu::DeviceContext ctx{L.mem, *L.blas, L.st};
  L.mem.reset_peak();
  XL_CUDA_CHECK(cudaEventRecord(e0.e, L.st));
  s.forward_backward(L.r, ctx);
  XL_CUDA_CHECK(cudaEventRecord(e1.e, L.st));
  XL_CUDA_CHECK(cudaEventSynchronize(e1.e));
  float t = 0;
  XL_CUDA_CHECK(cudaEventElapsedTime(&t, e0.e, e1.e));
  return t;
}

}  // namespace

DeviceDescription describe_device() {
  DeviceDescription d;
  const gpu::DeviceInfo info = gpu::query_device();
  if (!info.available) {
    d.reason = info.reason;
    return d;
  }
  d.available = true;
  BenchMeta& m = d.meta;
  m.gpu_name = info.name;
  m.sm_major = info.sm_major;
  m.sm_minor = info.sm_minor;
  m.multiprocessors = info.multiprocessors;
  m.memory_bytes = std::llround(info.memory_gib * 1073741824.0);  // exact: bytes / 2^30 in double
  m.cuda_driver_api = info.driver_version;
  m.cuda_runtime = info.runtime_version;
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, 0) == cudaSuccess) m.l2_bytes = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, 0) == cudaSuccess) m.sm_clock_mhz = v / 1000;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, 0) == cudaSuccess)
    m.mem_clock_mhz = v / 1000;
  (void)cudaGetLastError();
  m.driver = kernel_driver_version();
  return d;
}

void fill_normal(DType dtype, void* p, std::int64_t n, double sigma, std::uint64_t seed) {
  if (n <= 0) return;
  const float s = static_cast<float>(sigma);
  switch (dtype) {
    case DType::fp32:
      fill_normal_kernel<<<grid_for(n), 256>>>(static_cast<float*>(p), n, s, seed);
      break;
    case DType::fp16:
      fill_normal_kernel<<<grid_for(n), 256>>>(static_cast<__half*>(p), n, s, seed);
      break;
    case DType::bf16:
      fill_normal_kernel<<<grid_for(n), 256>>>(static_cast<__nv_bfloat16*>(p), n, s, seed);
      break;
    default:
      throw InputError("fill_normal: the device generator writes fp32, fp16 or bf16");
  }
  XL_CUDA_CHECK_LAUNCH();
}

void fill_targets(std::int64_t* t, std::int64_t n, std::int64_t V, std::uint64_t seed) {
  if (n <= 0) return;
  fill_targets_kernel<<<grid_for(n), 256>>>(t, n, V, seed);
  XL_CUDA_CHECK_LAUNCH();
}

std::vector<double> time_calls(const std::function<void(int)>& setup,
                               const std::function<void()>& body, int warmup, int repeats) {
  Event e0, e1;
  std::vector<double> ms;
  for (int it = 0; it < warmup + repeats; ++it) {
    if (setup) setup(it);
    XL_CUDA_CHECK(cudaEventRecord(e0.e));
    body();
    XL_CUDA_CHECK(cudaEventRecord(e1.e));
    XL_CUDA_CHECK(cudaEventSynchronize(e1.e));
    float t = 0;
    XL_CUDA_CHECK(cudaEventElapsedTime(&t, e0.e, e1.e));
    if (it >= warmup) ms.push_back(t);
  }
  return ms;
}

std::vector<double> time_cublas_bf16_gemms(std::int64_t n, int per_call, int warmup, int timed) {
  if (n < 1 || n > 0x7fffffff || per_call < 1 || warmup < 0 || timed < 1)
    throw InputError(
        "time_cublas_bf16_gemms: n in [1, 2^31), per_call >= 1, warmup >= 0 and "
        "timed >= 1 are required");
  gpu::DeviceMemoryTracker mem;
  gpu::DeviceBuffer A(mem, n * n * 2, gpu::MemKind::io, "GEMM A"),
      B(mem, n * n * 2, gpu::MemKind::io, "GEMM B"), C(mem, n * n * 2, gpu::MemKind::io, "GEMM C");
  fill_normal(DType::bf16, A.get(), n * n, 1.0, 11);
  fill_normal(DType::bf16, B.get(), n * n, 1.0, 12);
  cublasHandle_t h;
  XL_CUBLAS_CHECK(cublasCreate(&h));
  const float one = 1.0f, zero = 0.0f;
  std::vector<double> ms;
  try {
    ms = time_calls(
        {},
        [&] {
          for (int i = 0; i < per_call; ++i)
            XL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(n), int(n), &one,
                                         A.get(), CUDA_R_16BF, int(n), B.get(), CUDA_R_16BF, int(n),
                                         &zero, C.get(), CUDA_R_16BF, int(n), CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT));
        },
        warmup, timed);
  } catch (...) {
    cublasDestroy(h);
    throw;
  }
  cublasDestroy(h);
  return ms;
}

namespace {

/// TFLOP/s of the median of time_cublas_bf16_gemms(n, per_call, warmup, timed).
double gemm_rate(std::int64_t n, int per_call, int timed, int warmup) {
  const double med = summarize_times(time_cublas_bf16_gemms(n, per_call, warmup, timed)).median;
  return 2.0 * double(n) * double(n) * double(n) * per_call / (med * 1e-3) / 1e12;
}

}  // namespace

double cublas_bf16_gemm_tflops(std::int64_t n, int timed, int warmup) {
  return gemm_rate(n, 1, timed, warmup);
}

double cublas_bf16_gemm_sustained_tflops(std::int64_t n, int per_region, int regions) {
  if (per_region < 1 || regions < 1)
    throw InputError("cublas_bf16_gemm_sustained_tflops: per_region and regions must be >= 1");
  return gemm_rate(n, per_region, regions, 1);
}

TimedRuns time_forward_backward(const gpu::CudaStrategy& s, const gpu::DeviceRun& base,
                                const std::vector<InputSet>& inputs, int warmup, int repeats) {
  if (inputs.empty()) throw InputError("time_forward_backward: no inputs");
  TimedRuns out;
  Lane lane(base);
  Event e0, e1;
  for (int it = 0; it < warmup + repeats; ++it) {
    const float t =
        timed_pass(s, lane, inputs[static_cast<std::size_t>(it) % inputs.size()], e0, e1);
    if (it >= warmup) out.ms.push_back(t);
    out.peak_extra_bytes = std::max(out.peak_extra_bytes, lane.mem.peak_extra());
  }
  return out;
}

std::vector<InterleavedTimes> time_interleaved(const std::vector<InterleavedRun>& runs,
                                               const std::vector<InputSet>& inputs, int warmup,
                                               int repeats) {
  if (inputs.empty()) throw InputError("time_interleaved: no inputs");
  const std::size_t n = runs.size();
  std::vector<InterleavedTimes> out(n);
  std::vector<std::unique_ptr<Lane>> lanes;
  for (const InterleavedRun& x : runs) lanes.push_back(std::make_unique<Lane>(*x.run));
  const auto release_all = [&] {
    for (auto& l : lanes) {
      (void)cudaStreamSynchronize(l->st);
      l->mem.release_cache();
      l->cold = true;
    }
  };
  Event e0, e1;
  for (int it = 0; it < warmup + repeats; ++it) {
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = (j + static_cast<std::size_t>(it)) % n;
      Lane& L = *lanes[i];
      if (!L.live) continue;
      // Every pass on the next input copy: no pass reads what the pass before it left in L2.
      const InputSet& in = inputs[(static_cast<std::size_t>(it) * n + j) % inputs.size()];
      const auto pass = [&](bool timed) {
        const float t = timed_pass(*runs[i].strategy, L, in, e0, e1);
        if (timed && it >= warmup) out[i].t.ms.push_back(t);
        out[i].t.peak_extra_bytes = std::max(out[i].t.peak_extra_bytes, L.mem.peak_extra());
        L.cold = false;
      };
      try {
        try {
          if (L.cold) pass(false);
          pass(true);
        } catch (...) {
          // Perhaps the other strategies' cached blocks took the memory it needs: every cache
          // released, then an untimed pass and the timed one again.
          (void)cudaStreamSynchronize(L.st);
          release_all();
          pass(false);
          pass(true);
        }
      } catch (...) {
        (void)cudaStreamSynchronize(L.st);
        out[i].error = std::current_exception();
        L.live = false;
        L.mem.release_cache();
      }
    }
  }
  return out;
}

}  // namespace xentlab::bench
