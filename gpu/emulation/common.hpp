#pragma once
// The CPU emulation backend: every strategy's arithmetic (docs/arithmetic.md) on the host, with
// each rounding of the recipe emulated exactly (numerics/emulate.hpp) and the strategy's declared
// reduction order. One engine, parameterised by what distinguishes the strategies:
//
//   strategy      vocab reduction           dW accumulation
//   naive         blocked, T = 256          one fp32 GEMM over all rows (in row order)
//   chunked       blocked, T = 256          fp32 GEMM per chunk, chunk results added in accum
//   checkpointed  blocked, T = 256          as chunked (backward recomputes logits exactly)
//   fused         the kernel's online       fp32 partial per block of 128 rows, added in fp32
//                 states: 8 columns per     (dH likewise per vocabulary tile of 128; db fp32)
//                 thread and 128-tile,
//                 quad, warps, vocabulary
//                 ranges pairwise (the
//                 ranges depend on the SM
//                 count: gpu/fused_plan.hpp;
//                 declared: online_tree,
//                 as the CUDA kernel)
// Host memory is the emulator's own (a block of rows' logits/dz, the dW accumulator), reported in
// peak_extra_bytes; W is read on demand in panels, never copied whole.
// Results of checkpointed equal chunked's (the recomputation is bit-identical by construction);
// only memory differs. OpenMP over token rows (forward, dz, dH) and over vocabulary rows (dW, db).
#include <string>

#include "gpu/strategy.hpp"

namespace xentlab::emulation {

enum class Kind { naive, chunked, checkpointed, fused };

struct EngineConfig {
  Kind kind = Kind::naive;
  std::string name;
};

class EmulatedStrategy : public Strategy {
 public:
  explicit EmulatedStrategy(EngineConfig c) : cfg_(std::move(c)) {}
  std::string name() const override { return cfg_.name; }
  Backend backend() const override { return Backend::cpu_emulation; }
  Status can_implement(const Problem& p, const LossSpec& s, const Recipe& r) const override;
  std::int64_t workspace_size(const RunRequest& req) const override;
  DeclaredArithmetic arithmetic(const Recipe& r) const override;
  StrategyOutputs run(const RunRequest& req) const override;

 private:
  EngineConfig cfg_;
};

/// Default token chunk of chunked/checkpointed when the request gives neither chunk_tokens nor a
/// memory budget.
inline constexpr std::int64_t kDefaultChunkTokens = 1024;
/// Block size (threads) of the blocked vocabulary reduction.
inline constexpr std::int64_t kBlockThreads = 256;

}  // namespace xentlab::emulation
