// CPU emulation of the checkpointed strategy: forward keeps the per-token lse only; backward
// recomputes each chunk's logits in the forward's precision. The arithmetic is docs/arithmetic.md;
// the shared engine is gpu/emulation/common.cpp.
#include <memory>

#include "gpu/emulation/common.hpp"

namespace xentlab::emulation {

std::unique_ptr<Strategy> make_checkpointed() {
  return std::make_unique<EmulatedStrategy>(EngineConfig{Kind::checkpointed, "checkpointed"});
}

}  // namespace xentlab::emulation
