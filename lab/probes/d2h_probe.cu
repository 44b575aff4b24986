// Device → host copy rates for the reference's large outputs (a 4 GiB fp64 array, the size of
// the Llama-3-8B head's dW): which way of bringing dW, its bound and its condition to host memory
// is fastest on this machine. Prints one line per way, in GB/s of fp64 output delivered.
//   nvcc -O2 -std=c++17 -Xcompiler -fopenmp lab/probes/d2h_probe.cu -o d2h_probe && ./d2h_probe
//   [GiB]
#include <cuda_runtime.h>
#include <omp.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                              \
  do {                                                     \
    cudaError_t e_ = (x);                                  \
    if (e_ != cudaSuccess) {                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                        \
    }                                                      \
  } while (0)

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void* host_alloc(std::size_t bytes) {
  const std::size_t huge = std::size_t{2} << 20, r = (bytes + huge - 1) / huge * huge;
  void* p = std::aligned_alloc(huge, r);
  madvise(p, r, MADV_HUGEPAGE);
  auto* c = static_cast<unsigned char*>(p);
#pragma omp parallel for schedule(static)
  for (long k = 0; k < long(r / huge); ++k) std::memset(c + k * huge, 0, huge);
  return p;
}

__global__ void to_float_up(const double* x, float* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = __double2float_ru(x[i]);
}

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 4.0;
  const std::size_t n = std::size_t(gib * double(1 << 30)) / 8, bytes = n * 8;
  std::printf("d2h probe: %.2f GiB fp64, %d OpenMP threads\n", gib, omp_get_max_threads());
  double* d = nullptr;
  CK(cudaMalloc(&d, bytes));
  CK(cudaMemset(d, 0x3f, bytes));
  CK(cudaDeviceSynchronize());
  auto rate = [&](const char* what, double t) {
    std::printf("%-52s %8.3f s %8.1f GB/s\n", what, t, bytes / t / 1e9);
  };

  double t = now();
  auto* h = static_cast<unsigned char*>(host_alloc(bytes));
  rate("allocate + zero-fill pageable (first touch)", now() - t);
  t = now();
  auto* h2 = static_cast<unsigned char*>(host_alloc(bytes));
  rate("allocate + zero-fill pageable, second array", now() - t);

  t = now();
  CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
  rate("cudaMemcpy into pageable", now() - t);
  t = now();
  CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
  rate("cudaMemcpy into pageable (again)", now() - t);

  // Two pinned staging pieces, DMA of one overlapping the parallel memcpy of the other.
  const std::size_t piece = std::size_t{128} << 20;
  void* buf[2];
  cudaEvent_t ev[2];
  cudaStream_t s;
  for (int k = 0; k < 2; ++k) {
    CK(cudaMallocHost(&buf[k], piece));
    CK(cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
  }
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto staged = [&](unsigned char* dst, bool as_float) {
    const unsigned char* src = reinterpret_cast<const unsigned char*>(d);
    float* f = nullptr;
    if (as_float) {
      CK(cudaMalloc(&f, n * 4));
      to_float_up<<<4096, 256, 0, s>>>(d, f, n);
      src = reinterpret_cast<const unsigned char*>(f);
    }
    const std::size_t tot = as_float ? n * 4 : bytes, pieces = (tot + piece - 1) / piece;
    auto issue = [&](std::size_t p) {
      const std::size_t off = p * piece, m = std::min(piece, tot - off);
      CK(cudaMemcpyAsync(buf[p % 2], src + off, m, cudaMemcpyDeviceToHost, s));
      CK(cudaEventRecord(ev[p % 2], s));
    };
    issue(0);
    for (std::size_t p = 0; p < pieces; ++p) {
      CK(cudaEventSynchronize(ev[p % 2]));
      if (p + 1 < pieces) issue(p + 1);
      const std::size_t off = p * piece, m = std::min(piece, tot - off);
      const auto* from = static_cast<const unsigned char*>(buf[p % 2]);
      const long lines = long((m + (1 << 20) - 1) >> 20);
#pragma omp parallel for schedule(static)
      for (long l = 0; l < lines; ++l) {
        const std::size_t o = std::size_t(l) << 20, c = std::min<std::size_t>(1 << 20, m - o);
        if (as_float) {
          const float* x = reinterpret_cast<const float*>(from + o);
          double* y = reinterpret_cast<double*>(dst) + (off + o) / 4;
          for (std::size_t i = 0; i < c / 4; ++i) y[i] = x[i];
        } else {
          std::memcpy(dst + off + o, from + o, c);
        }
      }
    }
    if (f) cudaFree(f);
  };
  t = now();
  staged(h, false);
  rate("pinned double buffer + parallel memcpy", now() - t);
  t = now();
  staged(h2, false);
  rate("pinned double buffer + parallel memcpy (2nd array)", now() - t);
  t = now();
  staged(h, true);
  rate("fp32 rounded up, double buffer, parallel widen", now() - t);

  t = now();
  CK(cudaHostRegister(h2, bytes, cudaHostRegisterDefault));
  const double treg = now() - t;
  rate("cudaHostRegister of a touched array", treg);
  t = now();
  CK(cudaMemcpy(h2, d, bytes, cudaMemcpyDeviceToHost));
  const double tcopy = now() - t;
  rate("cudaMemcpy into the registered array", tcopy);
  t = now();
  CK(cudaHostUnregister(h2));
  const double tun = now() - t;
  rate("cudaHostUnregister", tun);
  rate("register + copy + unregister", treg + tcopy + tun);

  t = now();
  void* pinned = nullptr;
  CK(cudaMallocHost(&pinned, bytes));
  rate("cudaMallocHost", now() - t);
  t = now();
  CK(cudaMemcpy(pinned, d, bytes, cudaMemcpyDeviceToHost));
  rate("cudaMemcpy into cudaMallocHost memory", now() - t);
  t = now();
  CK(cudaMemcpy(pinned, d, bytes, cudaMemcpyDeviceToHost));
  rate("cudaMemcpy into cudaMallocHost memory (again)", now() - t);
  t = now();
  CK(cudaMemcpy(d, pinned, bytes, cudaMemcpyHostToDevice));
  rate("cudaMemcpy host → device from pinned", now() - t);
  CK(cudaFreeHost(pinned));
  return 0;
}
