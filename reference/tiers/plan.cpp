// The memory plan of the reference's tiers (plan.hpp).
#include "reference/tiers/plan.hpp"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "numerics/error.hpp"
#include "numerics/memory.hpp"

namespace xentlab::detail {

std::int64_t available_memory_bytes() {
  return xentlab::available_memory_bytes();
}

void check_memory(double needed, std::int64_t budget, bool budget_given, const std::string& what) {
  if (needed <= static_cast<double>(budget)) return;
  throw InputError(fmt::format(
      "{} needs {:.0f} bytes ({:.2f} GiB) of memory but the budget is {} bytes ({:.2f} GiB, {}): "
      "compute fewer token or vocabulary rows (--rows, --vocab-rows of golden and audit; a "
      "smaller problem), or give a larger --memory-budget on a machine that has it",
      what, needed, needed / double(1 << 30), budget, budget / double(1 << 30),
      budget_given ? "as given" : "90 % of the memory available now"));
}

double host_output_words(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                         const ReferenceOptions& opt) {
  return 12.0 * S + (opt.want_dz ? 2.0 * S * V : 0.0) + (opt.want_dH ? 3.0 * S * D : 0.0) +
         (opt.want_dW ? 3.0 * J * D : 0.0) + (opt.want_db ? 4.0 * J : 0.0);
}

std::string tier_what(const char* tier, std::int64_t S, std::int64_t V, std::int64_t D,
                      std::int64_t J, bool want_dW) {
  return fmt::format("the {} reference of {} rows × V={} × D={}{}", tier, S, V, D,
                     want_dW ? fmt::format(" with dW of {} rows", J) : "");
}

BlasPlanTerms blas_plan_terms(std::int64_t S, std::int64_t V, std::int64_t D, std::int64_t J,
                              const ReferenceOptions& opt, int threads) {
  const bool want_dH = opt.want_dH, want_dW = opt.want_dW, want_db = opt.want_db;
  const bool backward = want_dH || want_dW || want_db;
  BlasPlanTerms t;
  t.fixed = 8.0 * (host_output_words(S, V, D, J, opt) + 2.0 * J + V + 6.0 * D +
                   threads * (6.0 * V + 3.0 * D));
  t.per_row = 8.0 * (static_cast<double>(V) * (backward ? 3 : 1) + 2.0 * D + 2.0 +
                     (want_dW && J < V ? 2.0 * J : 0.0));
  t.min_panel = 16.0 * static_cast<double>(std::min<std::int64_t>(64, V)) * D;
  return t;
}

TierPlan plan_tier(const Problem& pb, const ReferenceOptions& opt, const ReferenceResult& res,
                   const char* tier) {
  TierPlan t;
  t.V = pb.V;
  t.D = pb.D;
  t.want_dH = opt.want_dH;
  t.want_dW = opt.want_dW;
  t.want_db = opt.want_db;
  t.backward = t.want_dH || t.want_dW || t.want_db;
  t.S = static_cast<std::int64_t>(res.token_rows.size());
  t.J = static_cast<std::int64_t>(res.vocab_rows.size());
  t.all_vocab = t.J == t.V;
  t.threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  t.what = tier_what(tier, t.S, t.V, t.D, t.J, t.want_dW);
  return t;
}

}  // namespace xentlab::detail
