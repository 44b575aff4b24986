// CPU emulation of the chunked strategy: token chunks; per chunk logits → loss and dz → dH, chunk
// dW added into an accum-dtype buffer. The arithmetic is docs/arithmetic.md; the shared engine is
// gpu/emulation/common.cpp.
#include <memory>

#include "gpu/emulation/common.hpp"

namespace xentlab::emulation {

std::unique_ptr<Strategy> make_chunked() {
  return std::make_unique<EmulatedStrategy>(EngineConfig{Kind::chunked, "chunked"});
}

}  // namespace xentlab::emulation
