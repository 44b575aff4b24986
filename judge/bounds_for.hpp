#pragma once
// The judge's adapter between the certified reference and the a-priori bounds / statistics /
// policy of numerics/: given a Problem, the reference's result for it and a strategy's outputs,
// forms the covariates that numerics/bounds.hpp needs and judges the outputs. judge/ sits above
// both reference/ (the oracle) and gpu/ (the code under test): the strategies never link the
// reference, and the reference never links the strategies (docs/design.md, "Layers").
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/strategy.hpp"
#include "numerics/bounds.hpp"
#include "numerics/stats.hpp"
#include "reference/reference.hpp"

namespace xentlab {

/// Per-element a-priori bounds (numerics/bounds.hpp, docs/bounds.md) for a strategy that declares
/// `arith` running `recipe` on `pb` with `spec`, on the rows of `ref` (its token_rows and
/// vocab_rows). ref must come from compute_reference(pb, spec, …) with want_dz for dz bounds.
/// n_chunks: number of token chunks whose dW are added in the accum dtype; 0 = assume one chunk
/// per row (the worst case). db bounds are not formed (the reference records no Σ_i|dz_ij|).
/// Cost O(S·(V + D) + V·D) for linear problems, O(S·V) for logits problems.
Bounds bounds_for_reference(const Problem& pb, const LossSpec& spec, const Recipe& recipe,
                            const DeclaredArithmetic& arith, const ReferenceResult& ref,
                            std::int64_t n_chunks = 0);

/// Statistics of every output of a run against the reference, the bounds, and the verdict.
struct RunAssessment {
  Bounds bounds;
  ErrorStats loss, lse, reduced_loss, dz, dH, dW, db;
  bool has_dz = false, has_dH = false, has_dW = false, has_db = false;
  Verdict verdict;
  double bounds_seconds = 0.0;  ///< wall time of the a-priori bounds (the rest: error statistics)
};

/// Compares `out` (from strategy.run of a request on pb/spec/recipe) with `ref`: per-token loss and
/// lse (dtype out.loss_dtype), reduced loss, dz/dH (rows of ref.token_rows, which must equal
/// out.token_rows or cover all rows), dW/db (rows ref.vocab_rows of out's V×D), each with its
/// a-priori bound, then judges them with `policy` (numerics/bounds.hpp judge). Throws InputError
/// when the token rows of out and ref differ or sizes do not match.
RunAssessment assess_run(const Problem& pb, const LossSpec& spec, const Recipe& recipe,
                         const DeclaredArithmetic& arith, const StrategyOutputs& out,
                         const ReferenceResult& ref, const Policy& policy,
                         std::int64_t n_chunks = 0);

}  // namespace xentlab
