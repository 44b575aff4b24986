// CPU emulation of the naive strategy: full logits (S×V) in the logits dtype, then dz for all rows,
// then dH and one fp32 dW GEMM. The arithmetic is docs/arithmetic.md; the shared engine is
// gpu/emulation/common.cpp.
#include <memory>

#include "gpu/emulation/common.hpp"

namespace xentlab::emulation {

std::unique_ptr<Strategy> make_naive() {
  return std::make_unique<EmulatedStrategy>(EngineConfig{Kind::naive, "naive"});
}

}  // namespace xentlab::emulation
