// CPU emulation of the checkpointed strategy: forward keeps the per-token lse only; backward
// recomputes each chunk's logits in the forward's precision, bit-identical to the forward's by
// construction. Its arithmetic — every reduction order — is therefore chunked's
// (gpu/emulation/chunked.cpp); only the device memory differs, which the emulation does not model.
#include <memory>

#include "gpu/emulation/chunked.hpp"

namespace xentlab::emulation {
namespace {

class CheckpointedEmulation final : public ChunkedEmulation {
 public:
  std::string name() const override { return "checkpointed"; }
};

}  // namespace

std::unique_ptr<Strategy> make_checkpointed() {
  return std::make_unique<CheckpointedEmulation>();
}

}  // namespace xentlab::emulation
