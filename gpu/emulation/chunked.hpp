#pragma once
// CPU emulation of the chunked strategy (gpu/emulation/chunked.cpp), also the base of
// checkpointed's, whose arithmetic is the same.
#include <string>

#include "gpu/emulation/common.hpp"

namespace xentlab::emulation {

/// Token chunks (RunRequest::chunk_tokens, or sized by the memory budget); per chunk logits →
/// loss and dz → dH, and the chunk's fp32 dW and db added into accumulators in the accum dtype.
class ChunkedEmulation : public EmulatedStrategy {
 public:
  std::string name() const override { return "chunked"; }
  DeclaredArithmetic arithmetic(const Recipe& r) const override;

 protected:
  VocabSums vocab_sums(const EngineContext& c, const float* x, std::int64_t n, bool need_sx,
                       float* scratch) const override;
  std::int64_t block_rows(const RunRequest& req, std::int64_t V, std::int64_t S) const override;
  void add_block_grads(const BlockGrads& b) const override;
};

}  // namespace xentlab::emulation
