#pragma once
// The audit of a given-logits problem in blocks of token rows (internal to harness/audit): every
// token row of a logits problem is independent of the others, so a sub-batch whose S×V arrays
// (the reference's dz and its bound, each run's dz and its bounds) exceed the memory budget is
// audited B rows at a time, never holding more than one block of them. The statistics of dz are
// merged over the blocks (judge/stats.hpp, BlockedErrorStats); loss, lse and the reduced loss are
// judged once over all rows.
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/strategy.hpp"
#include "harness/audit/audit.hpp"
#include "judge/bounds_for.hpp"
#include "numerics/error.hpp"
#include "numerics/memory.hpp"

namespace xentlab::audit {

/// The problem has no version in an input dtype (e.g. fp32 values beyond fp16's range): its runs
/// of that dtype are not-supported. Any other InputError (a reference refused over its memory
/// budget, a tier not available) ends the audit with its own message.
struct NoInputVersion : InputError {
  using InputError::InputError;
};

/// What the audit of one problem in one input dtype holds at its peak, in bytes (the estimate
/// of docs/audit.md, "Memory"), for S token rows at once (block_rows = S) or in blocks.
/// `strategies`: the chosen ones, for their workspace; `baseline`: a device audit whose passed
/// runs are held to their CPU emulation (its outputs and assessment beside the run's).
MemoryEstimate problem_memory(const AuditProblem& ap, DType input, std::int64_t S, std::int64_t J,
                              std::int64_t block_rows, const AuditConfig& cfg,
                              const std::vector<const Strategy*>& strategies,
                              const std::vector<const Strategy*>& emulations, bool baseline);

/// The bytes a problem holds as stored (its tensors, targets and bias).
double problem_bytes(const Problem& p);

/// One run of the blocked audit: its merged assessment (and its emulation's, for the baseline).
struct BlockedRun {
  const Strategy* strategy = nullptr;
  Recipe recipe;
  DeclaredArithmetic arith;
  Status can = Status::Ok();  ///< not ok: not run
  std::string error;          ///< the run threw (the first block's message)
  RunAssessment as, emulation_as;
  bool has_emulation = false;
  double seconds = 0;
  std::int64_t peak_extra_bytes = 0;
  std::vector<double> loss_abs_err;  ///< (S)
};
struct BlockedAudit {
  ReferenceResult ref;  ///< per-token outputs of all S rows, no dz
  std::vector<std::int64_t> orig_rows;
  std::vector<BlockedRun> runs;  ///< recipes of this input dtype × strategies, in that order
};

/// Audits the logits problem `ap` in input dtype `input` on its sub-batch `rows`, `block_rows`
/// at a time. `emulation_of` gives a strategy's CPU emulation for the baseline (null: none).
/// Throws InputError (NoInputVersion's message) when the problem has no version in `input`.
BlockedAudit audit_in_blocks(const AuditProblem& ap, DType input,
                             const std::vector<std::int64_t>& rows, std::int64_t block_rows,
                             const AuditConfig& cfg, const std::vector<Recipe>& recipes,
                             const std::vector<const Strategy*>& strategies,
                             const std::vector<const Strategy*>& emulations, const Policy& policy,
                             const std::vector<double>& upstream);

}  // namespace xentlab::audit
