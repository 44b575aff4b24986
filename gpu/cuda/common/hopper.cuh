#pragma once
// Hopper (sm_90a) building blocks of the fused strategy (gpu/cuda/fused/): mbarriers, TMA tensor
// loads into 128-byte-swizzled shared memory, the wgmma shared-memory descriptors (K-major and
// MN-major) and wgmma.mma_async m64n256k16 / m64n64k16 with fp32 accumulators. First written and
// measured in lab/probes/wgmma_probe.cu (docs/fused.md). Sources: PTX ISA 8.x, sections
// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" (the matrix-descriptor format, the
// canonical shared-memory layouts and the register fragment layout) and "Tensor Copy"
// (cp.async.bulk.tensor); CUDA Driver API cuTensorMapEncodeTiled.
//
// Every wgmma/TMA instruction is compiled only where the target has them
// (__CUDA_ARCH_FEAT_SM90_ALL: sm_90a machine code); elsewhere (the portable compute_90 PTX) the
// wrappers compile to a trap, and the host must not launch them: hopper_forward_available() says
// whether the running device executes sm_90a code.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define XL_HOPPER_DEVICE 1
#else
#define XL_HOPPER_DEVICE 0
#endif

namespace xentlab::gpu::hopper {

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
/// p rounded up to a multiple of 1024 bytes (the 128-byte swizzle's atom; dynamic shared memory
/// is allocated with 1024 bytes of slack for it).
__device__ __forceinline__ std::uint8_t* align_1024(std::uint8_t* p) {
  return reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(p) + 1023) &
                                         ~std::uintptr_t{1023});
}
__device__ __forceinline__ void mbar_init(std::uint64_t* b, int count) {
#if XL_HOPPER_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count));
#endif
}
__device__ __forceinline__ void fence_mbar_init() {
#if XL_HOPPER_DEVICE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_expect_tx(std::uint64_t* b, std::uint32_t bytes) {
#if XL_HOPPER_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)),
               "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(std::uint64_t* b) {
#if XL_HOPPER_DEVICE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
#endif
}
/// Waits until the barrier's phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(std::uint64_t* b, std::uint32_t parity) {
#if XL_HOPPER_DEVICE
  std::uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(b)), "r"(parity)
        : "memory");
#else
  __trap();
#endif
}
/// TMA: the box of `map` at (c_inner, c_outer) into dst; completes `bytes` on bar. Elements
/// outside the tensor are written as zeros (and counted in the transaction bytes).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, std::uint64_t* bar,
                                            int c_inner, int c_outer) {
#if XL_HOPPER_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%3, %4}], [%2];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(smem_u32(bar)), "r"(c_inner), "r"(c_outer)
      : "memory");
#endif
}
/// Shared-memory matrix descriptor of a K-major operand with 128-byte swizzle: start address,
/// leading-dimension byte offset 1 (unused for swizzled K-major), stride byte offset 1024 (8 rows
/// of 128 bytes), swizzle mode 1 (128 B) in bits 62–63.
__device__ __forceinline__ std::uint64_t smem_desc(const void* p) {
  const std::uint64_t addr = smem_u32(p);
  return ((addr & 0x3FFFF) >> 4) | (std::uint64_t{1} << 16) | (std::uint64_t{1024 >> 4} << 32) |
         (std::uint64_t{1} << 62);
}
/// Shared-memory matrix descriptor of an MN-major operand with 128-byte swizzle (the wgmma
/// operand is transposed: imm-trans 1): each 128-byte row holds 64 consecutive M (or N) elements
/// of one k, 8 rows of k form a 1024-byte swizzle atom. PTX ISA "Canonical Layouts", 128B MN-major:
/// ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) — SBO is the stride between groups of 8 k rows (1024 bytes
/// here) and LBO between blocks of 64 M/N elements. This library's MN-major operands are one block
/// wide (64 elements), so LBO is never used; it is set to 1024 too, so that the descriptor is right
/// whichever of the two fields the hardware takes for the k-group stride.
__device__ __forceinline__ std::uint64_t smem_desc_mn(const void* p) {
  const std::uint64_t addr = smem_u32(p);
  return ((addr & 0x3FFFF) >> 4) | (std::uint64_t{1024 >> 4} << 16) |
         (std::uint64_t{1024 >> 4} << 32) | (std::uint64_t{1} << 62);
}
/// Orders this thread's earlier generic-proxy writes to shared memory before later async-proxy
/// reads (wgmma operands, TMA stores); then a barrier makes them visible to the other threads.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if XL_HOPPER_DEVICE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/// Named barrier `id` (1–15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/// Arrival at named barrier `id` without waiting (the producer side of a named barrier whose
/// consumers sync on it): this thread's earlier memory accesses are performed relative to the
/// participating threads when the barrier completes (PTX ISA, barrier{.cta}).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void wgmma_fence() {
#if XL_HOPPER_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if XL_HOPPER_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if XL_HOPPER_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/// Warpgroup register reallocation (warp-specialised kernels; the block is whole warpgroups).
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#if XL_HOPPER_DEVICE
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#if XL_HOPPER_DEVICE
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

/// d (+)= A·B for a warpgroup: A 64×16 and B 256×16 (both K-major in shared memory, descriptors
/// desc_a, desc_b), fp32 accumulators; scale_d = 0 overwrites d. T = __nv_bfloat16 or __half.
/// Fragment layout (PTX ISA, wgmma .m64nNk16 D): warp w of the warpgroup holds rows 16w + lane/4
/// and 16w + lane/4 + 8; d[4j + 2h + e] is row 16w + lane/4 + 8h, column 8j + 2(lane % 4) + e.
template <class T>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], std::uint64_t desc_a,
                                                 std::uint64_t desc_b, int scale_d) {
#if XL_HOPPER_DEVICE
  // The one instruction for AB = "bf16" or "f16" (operand types of A and B).
#define XL_WGMMA_M64N256K16(AB)                                                                    \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." AB "." AB                                     \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "    \
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, " \
      "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, " \
      "%55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, " \
      "%73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, " \
      "%91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, "    \
      "%107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, " \
      "%122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"                       \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), \
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), \
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), \
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), \
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),          \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),        \
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),        \
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),        \
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])         \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    XL_WGMMA_M64N256K16("bf16");
  else
    XL_WGMMA_M64N256K16("f16");
#undef XL_WGMMA_M64N256K16
#else
  (void)d;
  (void)desc_a;
  (void)desc_b;
  (void)scale_d;
  __trap();
#endif
}

/// d (+)= A·B for a warpgroup, m64n64k16: A 64×16 and B 16×64 in shared memory (descriptors;
/// kTransA/kTransB 0 = K-major (smem_desc), 1 = MN-major (smem_desc_mn)), fp32 accumulators;
/// scale_d = 0 overwrites d. Fragment layout as wgmma_m64n256k16's with j < 8.
template <class T, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], std::uint64_t desc_a,
                                                std::uint64_t desc_b, int scale_d) {
#if XL_HOPPER_DEVICE
  // The one instruction for AB = "bf16" or "f16" (operand types of A and B).
#define XL_WGMMA_M64N64K16(AB)                                                                     \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." AB "." AB                                      \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "    \
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, " \
      "%36;\n}\n"                                                                                  \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                         \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    XL_WGMMA_M64N64K16("bf16");
  else
    XL_WGMMA_M64N64K16("f16");
#undef XL_WGMMA_M64N64K16
#else
  (void)d;
  (void)desc_a;
  (void)desc_b;
  (void)scale_d;
  __trap();
#endif
}

/// The shared-memory pipeline of a 128 × 256 output tile over K blocks of 64 (the fused forward,
/// lab/probes/wgmma_probe): kStages stages, each the A box (128 rows × 64 elements, 128-byte
/// swizzle) then the B box (256 rows); a TMA producer thread fills stage it % kStages for iteration
/// it (one K block of one tile), consumer warpgroups c (rows 64c … 64c + 63) drain it with four
/// wgmma m64n256k16 each, keep one wgmma group in flight, and release a stage one K block later.
/// smem must be 1024-byte aligned (the swizzle); full and empty are kStages mbarriers each. The
/// fused forward and the staged backward's dz kernel take 4 stages (WgmmaRing); the on-chip
/// backward 3, to leave room for its dz tile.
template <int kStagesT>
struct WgmmaRingT {
  static constexpr int kBK = 64, kStages = kStagesT;
  static constexpr int kABytes = 128 * kBK * 2, kBBytes = 256 * kBK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + slack for the alignment
  std::uint8_t* smem;
  std::uint64_t* full;
  std::uint64_t* empty;

  /// One thread, before a __syncthreads: the barriers (full: 1 arrival + bytes; empty: one
  /// arrival per consumer warpgroup).
  __device__ __forceinline__ void init(int consumers) const {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], consumers);
    }
    fence_mbar_init();
  }
  /// Producer thread, iteration it: waits for the stage to be free, then loads the A box at
  /// (k0, a_row) and the B box at (k0, b_row).
  __device__ __forceinline__ void produce(int it, const CUtensorMap* ta, const CUtensorMap* tb,
                                          int k0, int a_row, int b_row) const {
    const int s = it % kStages;
    if (it >= kStages) mbar_wait(&empty[s], ((it / kStages) - 1) & 1);
    std::uint8_t* sa = smem + s * kStageBytes;
    mbar_expect_tx(&full[s], kStageBytes);
    tma_load_2d(sa, ta, &full[s], k0, a_row);
    tma_load_2d(sa + kABytes, tb, &full[s], k0, b_row);
  }
  /// Consumer warpgroup c (thread t of it): d = A[64c:64c+64, :] · B[0:256, :]ᵀ over kblocks K
  /// blocks starting at iteration it (advanced past them), fp32, increasing k; scale_d 0 on the
  /// tile's first product. All of the tile's wgmmas are complete on return.
  template <class T>
  __device__ __forceinline__ void consume_tile(float (&d)[128], int& it, int kblocks, int c,
                                               int t) const {
    for (int kb = 0; kb < kblocks; ++kb, ++it) {
      const int s = it % kStages;
      mbar_wait(&full[s], (it / kStages) & 1);
      const std::uint8_t* sa = smem + s * kStageBytes + c * (64 * 128);
      const std::uint8_t* sb = smem + s * kStageBytes + kABytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk)  // 16 elements = 32 bytes along the swizzled row
        wgmma_m64n256k16<T>(d, smem_desc(sa + kk * 32), smem_desc(sb + kk * 32),
                            kb > 0 || kk > 0 ? 1 : 0);
      wgmma_commit();
      // One group in flight: the previous K block's wgmmas are done, so its stage is free.
      wgmma_wait<1>();
      if (kb > 0 && t == 0) mbar_arrive(&empty[(it - 1) % kStages]);
    }
    wgmma_wait<0>();
    if (t == 0) mbar_arrive(&empty[(it - 1) % kStages]);
  }
  /// Consumer: waits until iteration it's stage is full and returns it (A box, then B box at
  /// + kABytes).
  __device__ __forceinline__ const std::uint8_t* wait_full(int it) const {
    mbar_wait(&full[it % kStages], (it / kStages) & 1);
    return smem + (it % kStages) * kStageBytes;
  }
  /// Consumer warpgroup, one thread, after all its reads of iteration it's stage are complete.
  __device__ __forceinline__ void release(int it) const {
    mbar_arrive(&empty[it % kStages]);
  }
};
using WgmmaRing = WgmmaRingT<4>;

/// A 2-D tensor map of a row-major (rows × cols) 16-bit matrix at base (row stride cols·2 bytes,
/// which must be a multiple of 16; base 16-byte aligned), boxes of box_cols × box_rows, 128-byte
/// swizzle, zero fill outside. Throws DeviceError (cuda_check.hpp) when the driver refuses.
CUtensorMap make_tensor_map_2d(const void* base, bool fp16, std::int64_t rows, std::int64_t cols,
                               int box_cols, int box_rows);

/// Whether the current device runs this library's sm_90a code (wgmma, TMA): an H100/H200 with the
/// sm_90a cubin present. Checked once per device by a one-thread kernel.
bool hopper_forward_available();

}  // namespace xentlab::gpu::hopper
