// GPU tests of the sequential-sum model's two kernels (label "gpu"; skip without a device): the
// sequential GEMM is the CPU emulation's GEMM order — one fp32 sum per element in increasing k,
// one fma per product, one rounding to the output — bit for bit against a host loop of std::fma
// in the three layouts the model uses (logits, dH, dW), with tails in every dimension and a
// continued sum; the row kernel's sequential sums are one pass in index order, shown where the
// order decides the value: V = 4096 logits 0 summed in bf16 stall at 256 (256 + 1 rounds to 256),
// where the 256 per-thread partials of 16 and their tree reach 4096 exactly.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/cuda/common/ce_kernels.cuh"
#include "gpu/cuda/common/device.hpp"
#include "gpu/cuda/common/sequential_gemm.cuh"
#include "numerics/dtype.hpp"

namespace xentlab {
namespace {

const gpu::DeviceInfo& device() {
  static const gpu::DeviceInfo d = gpu::query_device();
  return d;
}

/// n values of dtype t (fp32 or bf16) as stored bytes and as their exact floats.
struct Operand {
  std::vector<unsigned char> bytes;
  std::vector<float> values;
};
Operand make_operand(DType t, std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  Operand o;
  o.bytes.resize(static_cast<std::size_t>(n * size_of(t)));
  o.values.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = nd(rng);
    if (t == DType::fp32) {
      const float f = static_cast<float>(x);
      std::memcpy(&o.bytes[i * 4], &f, 4);
      o.values[i] = f;
    } else {
      const std::uint16_t b = bf16_bits_from_double(x);
      std::memcpy(&o.bytes[i * 2], &b, 2);
      o.values[i] = static_cast<float>(bf16_bits_to_double(b));
    }
  }
  return o;
}

void* to_device(const void* p, std::size_t bytes) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, p, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

TEST(GpuSequentialModel, GemmIsOneFmaSumPerElementInIncreasingK) {
  if (!device().available) GTEST_SKIP() << device().reason;
  // M, N, K off every tile size (64, 64, 16); the three layouts of gemm.cu's sequential path.
  const std::int64_t M = 67, N = 130, K = 37;
  struct Layout {
    const char* name;
    std::int64_t a_i, a_k, b_k, b_n;  // strides of A (M, K) and B (K, N)
  };
  const Layout layouts[] = {
      {"logits = H·Wᵀ", K, 1, 1, K},  // A row-major (M, K), B = Wᵀ with W (N, K) row-major
      {"dH = dz·W", K, 1, N, 1},      // both row-major
      {"dW = dzᵀ·H", 1, M, N, 1},     // A = dzᵀ with dz (K, M) row-major
  };
  for (DType op : {DType::fp32, DType::bf16})
    for (const Layout& L : layouts)
      for (DType out : {DType::fp32, DType::bf16})
        for (bool accumulate : {false, true}) {
          if (accumulate && out != DType::fp32) continue;
          SCOPED_TRACE(std::string(L.name) + ", operands " + std::string(to_string(op)) + ", out " +
                       std::string(to_string(out)) + (accumulate ? ", continued" : ""));
          const Operand A = make_operand(op, M * K, 11), B = make_operand(op, K * N, 12);
          const Operand C0 = make_operand(DType::fp32, M * N, 13);
          void* dA = to_device(A.bytes.data(), A.bytes.size());
          void* dB = to_device(B.bytes.data(), B.bytes.size());
          std::vector<unsigned char> c(static_cast<std::size_t>(M * N * size_of(out)));
          if (accumulate) c = C0.bytes;
          void* dC = to_device(c.data(), c.size());
          gpu::sequential_gemm(op, {dA, L.a_i, L.a_k}, {dB, L.b_k, L.b_n}, M, N, K, out, dC, N,
                               accumulate, nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(c.data(), dC, c.size(), cudaMemcpyDeviceToHost), cudaSuccess);
          for (void* p : {dA, dB, dC}) cudaFree(p);
          int mismatches = 0;
          for (std::int64_t m = 0; m < M; ++m)
            for (std::int64_t n = 0; n < N; ++n) {
              float acc = accumulate ? C0.values[m * N + n] : 0.0f;
              for (std::int64_t k = 0; k < K; ++k)
                acc =
                    std::fma(A.values[m * L.a_i + k * L.a_k], B.values[k * L.b_k + n * L.b_n], acc);
              std::uint32_t want = 0, got = 0;
              if (out == DType::fp32) {
                std::memcpy(&want, &acc, 4);
                std::memcpy(&got, &c[(m * N + n) * 4], 4);
              } else {
                want = bf16_bits_from_double(acc);
                std::uint16_t g16 = 0;
                std::memcpy(&g16, &c[(m * N + n) * 2], 2);
                got = g16;
              }
              mismatches += want != got;
            }
          EXPECT_EQ(mismatches, 0) << "of " << M * N << " elements";
        }
}

TEST(GpuSequentialModel, RowSumsRunInIndexOrder) {
  if (!device().available) GTEST_SKIP() << device().reason;
  const std::int64_t V = 4096;
  std::vector<std::uint16_t> z(V, bf16_bits_from_double(0.0));
  const std::vector<std::int64_t> target{0};
  void* dz = to_device(z.data(), z.size() * 2);
  void* dt = to_device(target.data(), 8);
  float *loss = nullptr, *lse = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&loss), 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&lse), 4), cudaSuccess);
  const auto lse_of = [&](bool sequential) {
    gpu::RowLossParams p;
    p.V = V;
    p.accum = DType::bf16;
    p.sequential_sums = sequential;
    gpu::launch_ce_rows(DType::bf16, dz, 1, static_cast<const std::int64_t*>(dt), loss, lse, p,
                        false, gpu::RowGradScale{}, nullptr);
    float v = NAN;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&v, lse, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  };
  // lse = rnd_bf16(0 + logf(s)): s = 256 in index order, 4096 by the tree (ce_kernels.cuh).
  // log 256 = 5.5452 and log 4096 = 8.3178 are far from a bf16 rounding boundary (spacings
  // 2^-5 and 2^-4), so logf's last bit cannot move them.
  EXPECT_EQ(lse_of(true), bf16_bits_to_double(bf16_bits_from_double(std::log(256.0))));
  EXPECT_EQ(lse_of(false), bf16_bits_to_double(bf16_bits_from_double(std::log(4096.0))));
  for (void* p : {dz, dt, static_cast<void*>(loss), static_cast<void*>(lse)}) cudaFree(p);
}

}  // namespace
}  // namespace xentlab
