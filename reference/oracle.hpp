#pragma once
// The Boost.Multiprecision oracle: ~100 significant decimal digits (cpp_bin_float_100, header-only
// so one code base builds everywhere). It shares no arithmetic with the fast tier: it evaluates the
// defining formulas directly —
//   z_ij = softcap(scale·(Σ_d H_id·W_jd + b_j)), lse_i = a + log1p(Σ_{j≠k} e^{z_j − a}),
//   loss_i = lse_i − (1−ε)·z_it − (ε/V)·Σ_j z_ij + λ·lse_i²,
//   dL/dr_ij = g_i·(p_ij(1 + 2λ·lse_i) − (1−ε)[j=t] − ε/V)·scale·sech²(scale·r_ij/c),
// with 1 − p_t taken as Σ_{j≠t} p_j (its definition) — and is 100–3000× slower than double, so it
// checks samples; it does not do the bulk.
#include <boost/multiprecision/cpp_bin_float.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "datasets/problem.hpp"
#include "numerics/loss_spec.hpp"
#include "reference/reference.hpp"

namespace xentlab {

using mp_float = boost::multiprecision::cpp_bin_float_100;

class Oracle {
 public:
  /// upstream: per-token dL/dloss_i for reduction none (empty = ones), as ReferenceOptions.
  Oracle(const Problem& problem, const LossSpec& spec, std::vector<double> upstream = {});

  struct Row {
    mp_float lse, ce, z_term, loss;
    std::vector<mp_float> dz;  ///< dL/d(raw logit) including the reduction scale g_i (V)
  };
  /// Forward and gradient of token row i (cached).
  const Row& row(std::int64_t i);
  /// Reduced loss over all rows (mean/sum; Σ g_i·loss_i for none).
  mp_float reduced_loss();
  /// dH[i][d] = Σ_j dz_ij·W_jd.
  mp_float dH(std::int64_t i, std::int64_t d);
  /// dW[j][d] = Σ_{i∈rows} dz_ij·H_id, db[j] = Σ_{i∈rows} dz_ij.
  mp_float dW(std::int64_t j, std::int64_t d, const std::vector<std::int64_t>& rows);
  mp_float db(std::int64_t j, const std::vector<std::int64_t>& rows);

  /// Perturbs one input value by delta (for finite differences); clears the row cache.
  /// which: 'H' (flat index i·D+d), 'W' (j·D+d), 'b' (j) or 'Z' (given logits, i·V+j).
  void perturb(char which, std::int64_t flat_index, const mp_float& delta);

 private:
  mp_float value(char which, std::int64_t flat_index, const Tensor& t) const;
  const Problem& pb_;
  LossSpec sp_;
  std::vector<double> upstream_;
  std::int64_t n_valid_;
  std::map<std::pair<char, std::int64_t>, mp_float> delta_;
  std::map<std::int64_t, Row> cache_;
};

/// One compared value: output name, its index, the fast tier's value and bound, the oracle's value
/// (rounded to double) and the ratio |fast − oracle| / bound (0 when equal, inf when a non-zero
/// difference has a zero bound or the finiteness differs).
struct OracleCheck {
  std::string output;
  std::vector<std::int64_t> index;
  double fast = 0, oracle = 0, bound = 0, ratio = 0;
};

struct OracleReport {
  std::vector<OracleCheck> checks;
  std::vector<std::string> skipped;  ///< what was not checked, and why
  double max_ratio = 0;
  std::int64_t failures = 0;  ///< checks with ratio > 1
  bool passed() const { return failures == 0; }
  std::string summary() const;  ///< one line per output, worst check and failures
};

struct OracleSampleSpec {
  std::int64_t rows = 4;      ///< token rows (of the fast result's rows) to recompute
  std::int64_t entries = 16;  ///< sampled entries per gradient output
  std::uint64_t seed = 1;
  /// Entries whose bound exceeds this fraction of |value| are ill-conditioned: each is added to
  /// the sample (up to `entries` more per output).
  double ill_conditioned = 1e-9;
  /// Budget of multiprecision multiply-adds: dW/db and the reduced loss need every token row of
  /// the fast result; they are skipped (and listed in skipped) past this budget.
  double max_mp_ops = 4e7;
};

/// Checks the fast tier against the oracle on a seeded sample: per-token lse and loss, entries of
/// dz, dH, dW, db, and the reduced loss, each |fast − oracle| ≤ fast bound.
/// options must be those the fast result was computed with (upstream, rows).
OracleReport check_with_oracle(const Problem& problem, const LossSpec& spec,
                               const ReferenceOptions& options, const ReferenceResult& fast,
                               const OracleSampleSpec& sample = {});
/// The same check with a given oracle, which must be of (problem, spec, options.upstream) and
/// unperturbed: its cached rows serve every fast result checked with it (e.g. each tier's), so the
/// multiprecision rows are computed once.
OracleReport check_with_oracle(Oracle& oracle, const Problem& problem, const LossSpec& spec,
                               const ReferenceOptions& options, const ReferenceResult& fast,
                               const OracleSampleSpec& sample = {});

}  // namespace xentlab
