// State behind gpu/cuda/fused.cuh (one definition, outside fused.cu, which the timing experiments
// compile more than once).
#include <atomic>

#include "gpu/cuda/fused.cuh"

namespace xentlab::gpu {
namespace {
std::atomic<int> g_path{0};
std::atomic<int> g_last{-1};
}  // namespace

void set_fused_forward_path(FusedForwardPath p) {
  g_path.store(static_cast<int>(p));
}
FusedForwardPath fused_forward_path() {
  return static_cast<FusedForwardPath>(g_path.load());
}
const char* last_fused_forward_kernel() {
  const int v = g_last.load();
  return v < 0 ? "" : v == 1 ? "wgmma" : "mma.sync";
}
void note_fused_forward_kernel(bool wgmma) {
  g_last.store(wgmma ? 1 : 0);
}

}  // namespace xentlab::gpu
