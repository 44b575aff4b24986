// CPU emulation of the fused strategy: no logits tensor: the forward's online (max, sum) tree over
// vocabulary tiles of 256, backward recomputes tiles (gpu/fused_plan.hpp). The arithmetic is docs/arithmetic.md; the shared engine is
// gpu/emulation/common.cpp.
#include <memory>

#include "gpu/emulation/common.hpp"

namespace xentlab::emulation {

std::unique_ptr<Strategy> make_fused() {
  return std::make_unique<EmulatedStrategy>(EngineConfig{Kind::fused, "fused"});
}

}  // namespace xentlab::emulation
