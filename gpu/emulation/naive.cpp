// CPU emulation of the naive strategy: full logits (S×V) in the logits dtype, then dz for all rows,
// then dH and one fp32 dW GEMM over all rows. Its reduction orders (docs/arithmetic.md):
//   vocabulary  blocked, T = 256 threads (§3–4);
//   dW          one fp32 sum per entry over all token rows in increasing order, carried across the
//               engine's blocks (the block size bounds the host memory only), rounded to the grad
//               dtype once (§8);
//   db          one running sum per vocabulary row over all token rows, rounded to the accum dtype
//               after every addition.
// The steps every strategy shares are the engine's (gpu/emulation/common.cpp).
#include <fmt/format.h>

#include <cstdint>
#include <memory>

#include "gpu/emulation/common.hpp"

namespace xentlab::emulation {
namespace {

// The naive strategy, and two models of other correct implementations of a recipe that the
// differential baseline includes (make_baseline_models): the same steps with the least accurate
// common summation order, or with the logits GEMM accumulated as tensor cores do.
enum class NaiveVariant : std::uint8_t { naive, sequential, tensor_core };

class NaiveEmulation final : public EmulatedStrategy {
 public:
  explicit NaiveEmulation(NaiveVariant v = NaiveVariant::naive) : v_(v) {}
  std::string name() const override {
    switch (v_) {
      case NaiveVariant::sequential:
        return "sequential-sum model";
      case NaiveVariant::tensor_core:
        return "tensor-core model";
      default:
        return "naive";
    }
  }
  DeclaredArithmetic arithmetic(const Recipe& r) const override {
    DeclaredArithmetic a = blocked_arithmetic(name(), r);
    if (v_ == NaiveVariant::sequential) {
      a.vocab_order = ReductionOrder::sequential;
      a.token_order = ReductionOrder::sequential;
      a.note = fmt::format("cpu-emulation {}: every sum sequential, accum {}", name(),
                           to_string(r.accum));
    }
    if (v_ == NaiveVariant::tensor_core)
      a.note = fmt::format(
          "cpu-emulation {}: logits GEMM in blocks of {} products added exactly, fp32 rounded "
          "toward zero per block; the rest as naive",
          name(), kTensorCoreBlock);
    return a;
  }

 protected:
  std::int64_t logits_gemm_block() const override {
    return v_ == NaiveVariant::tensor_core ? kTensorCoreBlock : 0;
  }
  VocabSums vocab_sums(const EngineContext& c, const float* x, std::int64_t n, bool need_sx,
                       float* scratch) const override {
    return blocked_vocab_sums(c, x, n, need_sx, scratch);  // in c.ar's order (sequential too)
  }
  std::int64_t block_rows(const RunRequest&, std::int64_t V, std::int64_t) const override {
    return host_block_rows(V);
  }
  void add_block_grads(const BlockGrads& b) const override {
    const DType A = b.accum;
    for_each_vocab_row(b, [&](std::int64_t k, std::int64_t j, float*) {
      float* acc = b.dW + k * b.D;  // the fp32 sum over all rows so far
      float dbs = b.db != nullptr ? b.db[k] : 0.0f;
      add_dW_row(b, j, acc, [&](float dzj) {
        if (b.db != nullptr) dbs = emu::rnd(dbs + dzj, A);
      });
      if (b.db != nullptr) b.db[k] = dbs;
    });
  }

 private:
  NaiveVariant v_;
};

}  // namespace

std::unique_ptr<Strategy> make_naive() {
  return std::make_unique<NaiveEmulation>();
}

std::unique_ptr<Strategy> make_sequential_model() {
  return std::make_unique<NaiveEmulation>(NaiveVariant::sequential);
}

std::unique_ptr<Strategy> make_tensor_core_model() {
  return std::make_unique<NaiveEmulation>(NaiveVariant::tensor_core);
}

}  // namespace xentlab::emulation
