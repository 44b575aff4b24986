// State behind gpu/cuda/fused.cuh (one definition, outside fused.cu, which the timing experiments
// compile more than once).
#include <atomic>

#include "gpu/cuda/fused.cuh"

namespace xentlab::gpu {
namespace {
std::atomic<int> g_path{0};
std::atomic<int> g_last_forward{-1};
std::atomic<int> g_last_backward{-1};
const char* kernel_name(int v) {
  return v < 0 ? "" : v == 1 ? "wgmma" : "mma.sync";
}
}  // namespace

void set_fused_kernel_path(FusedKernelPath p) {
  g_path.store(static_cast<int>(p));
}
FusedKernelPath fused_kernel_path() {
  return static_cast<FusedKernelPath>(g_path.load());
}
const char* last_fused_forward_kernel() {
  return kernel_name(g_last_forward.load());
}
const char* last_fused_backward_kernel() {
  return kernel_name(g_last_backward.load());
}
void note_fused_forward_kernel(bool wgmma) {
  g_last_forward.store(wgmma ? 1 : 0);
}
void note_fused_backward_kernel(bool wgmma) {
  g_last_backward.store(wgmma ? 1 : 0);
}

}  // namespace xentlab::gpu
