// Host side of gpu/cuda/common/hopper.cuh: tensor maps through the driver's cuTensorMapEncodeTiled
// (fetched with cudaGetDriverEntryPointByVersion, so no link against libcuda) and the check that
// the running device executes sm_90a code.
#include <map>
#include <mutex>
#include <string>

#include "gpu/cuda/common/cuda_check.hpp"
#include "gpu/cuda/common/hopper.cuh"

namespace xentlab::gpu::hopper {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    XL_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                   cudaEnableDefault, &q));
    if (p == nullptr || q != cudaDriverEntryPointSuccess)
      throw DeviceError("cuTensorMapEncodeTiled is not available from the CUDA driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

__global__ void has_sm90a_kernel(int* out) {
#if XL_HOPPER_DEVICE
  *out = 1;
#else
  *out = 0;
#endif
}

}  // namespace

CUtensorMap make_tensor_map_2d(const void* base, bool fp16, std::int64_t rows, std::int64_t cols,
                               int box_cols, int box_rows) {
  CUtensorMap m{};
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  const CUresult r =
      encode_fn()(&m, fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                  const_cast<void*>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw DeviceError("cuTensorMapEncodeTiled refused a " + std::to_string(rows) + "×" +
                      std::to_string(cols) + " map (CUresult " + std::to_string(int(r)) + ")");
  return m;
}

bool hopper_forward_available() {
  static std::mutex mu;
  static std::map<int, bool> known;
  int dev = 0;
  XL_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  const auto it = known.find(dev);
  if (it != known.end()) return it->second;
  int major = 0, minor = 0;
  XL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  XL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  bool ok = false;
  if (major == 9 && minor == 0) {
    int* d = nullptr;
    XL_CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
    has_sm90a_kernel<<<1, 1>>>(d);
    int h = 0;
    const cudaError_t e1 = cudaGetLastError();
    const cudaError_t e2 =
        e1 == cudaSuccess ? cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) : e1;
    cudaFree(d);
    XL_CUDA_CHECK(e2);
    ok = h == 1;
  }
  known[dev] = ok;
  return ok;
}

}  // namespace xentlab::gpu::hopper
