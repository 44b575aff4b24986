// CPU emulation of the chunked strategy: token chunks; per chunk logits → loss and dz → dH, chunk
// dW added into an accum-dtype buffer. Its reduction orders (docs/arithmetic.md):
//   vocabulary  blocked, T = 256 threads (§3–4);
//   dW          per chunk, one fp32 sum per entry over the chunk's rows in increasing order; the
//               chunk's sum added into the accumulator with one rounding to the accum dtype (§8);
//   db          per chunk, a running sum over its rows rounded to the accum dtype after every
//               addition, then added into the accumulator in the accum dtype.
// The steps every strategy shares are the engine's (gpu/emulation/common.cpp).
#include "gpu/emulation/chunked.hpp"

#include <algorithm>
#include <memory>

namespace xentlab::emulation {

DeclaredArithmetic ChunkedEmulation::arithmetic(const Recipe& r) const {
  return blocked_arithmetic(name(), r);
}

VocabSums ChunkedEmulation::vocab_sums(const EngineContext& c, const float* x, std::int64_t n,
                                       bool need_sx, float* scratch) const {
  return blocked_vocab_sums(c, x, n, need_sx, scratch);
}

std::int64_t ChunkedEmulation::block_rows(const RunRequest& req, std::int64_t V,
                                          std::int64_t S) const {
  return chunk_rows(req, V, S);
}

void ChunkedEmulation::add_block_grads(const BlockGrads& b) const {
  const DType A = b.accum;
  for_each_vocab_row(b, [&](std::int64_t k, std::int64_t j, float* part) {
    std::fill(part, part + b.D, 0.0f);  // the chunk's fp32 sum
    float dbs = 0.0f;
    add_dW_row(b, j, part, [&](float dzj) {
      if (b.db != nullptr) dbs = emu::rnd(dbs + dzj, A);
    });
    float* acc = b.dW + k * b.D;
    for (std::int64_t d = 0; d < b.D; ++d) acc[d] = emu::rnd(acc[d] + part[d], A);
    if (b.db != nullptr) b.db[k] = emu::rnd(b.db[k] + dbs, A);
  });
}

std::unique_ptr<Strategy> make_chunked() {
  return std::make_unique<ChunkedEmulation>();
}

}  // namespace xentlab::emulation
