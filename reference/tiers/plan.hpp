#pragma once
// The memory plan of the reference's tiers: the memory available, the budget check and its
// message, and the prologue the BLAS and cuda tiers share (their sizes, the outputs asked for,
// the host outputs' bytes). Internal to reference/: the public interface is reference.hpp.
#include <cstdint>
#include <string>

#include "datasets/problem.hpp"
#include "reference/reference.hpp"

namespace xentlab::detail {

/// The memory available to this process in bytes: MemAvailable of /proc/meminfo, else the
/// physical memory (sysconf).
std::int64_t available_memory_bytes();

/// Throws InputError when `needed` bytes exceed `budget`: "<what> needs N bytes (… GiB) but the
/// memory budget is … (<source>)", with the remedies (sampling, --memory-budget).
void check_memory(double needed, std::int64_t budget, bool budget_given, const std::string& what);

/// The words (8 bytes each) of the host outputs of S token rows that every GEMM tier holds: the
/// per-token outputs (12 a row), and dz (S×V), dH (S×D), dW (J×D) and db (J) with their bounds
/// and conditions where opt asks for them.
double host_output_words(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                         const ReferenceOptions& opt);

/// What the memory messages of a GEMM tier name: "the <tier> reference of S rows × V=… × D=…",
/// and " with dW of J rows" when dW is asked for.
std::string tier_what(const char* tier, std::int64_t S, std::int64_t V, std::int64_t D,
                      std::int64_t J, bool want_dW);

/// The memory plan of the BLAS tier: outputs and accumulators (fixed), one token row of the
/// block buffers (per_row) and the smallest panel of W (min_panel), in bytes.
struct BlasPlanTerms {
  double fixed = 0, per_row = 0, min_panel = 0;
  double minimum() const { return fixed + min_panel + per_row; }
};
BlasPlanTerms blas_plan_terms(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                              const ReferenceOptions& opt, int threads);

/// The prologue of the BLAS and cuda tiers: the sizes of the run (S token rows of res, J of its
/// vocabulary rows), the outputs asked for, the threads (opt.threads, else OpenMP's count) and
/// what the memory messages name (tier_what).
struct TierPlan {
  std::int64_t V = 0, D = 0, S = 0, J = 0;
  bool want_dH = false, want_dW = false, want_db = false;
  bool backward = false;   ///< dH, dW or db asked for
  bool all_vocab = false;  ///< J == V (vocab_rows are sorted and unique)
  int threads = 1;
  std::string what;
};
TierPlan plan_tier(const Problem& pb, const ReferenceOptions& opt, const ReferenceResult& res,
                   const char* tier);

}  // namespace xentlab::detail
