#pragma once
// Transformations of a Problem used by the audit: a sub-batch of token rows, and the same problem
// with its inputs stored in another dtype.
#include <cstdint>
#include <vector>

#include "datasets/problem.hpp"

namespace xentlab {

/// The problem restricted to the given token rows (sorted, unique, in [0, N)): H rows (or logits
/// rows) and targets; W and bias unchanged. Throws InputError for a bad row list.
Problem select_rows(const Problem& p, const std::vector<std::int64_t>& rows,
                    std::int64_t ignore_index);

/// The problem with H and W (or the given logits) rounded once, to nearest even, into dtype; the
/// bias stays as it is. Values that overflow the dtype become ±inf and are reported as InputError
/// (naming the tensor and index) by the validation, never silently clamped.
Problem with_input_dtype(const Problem& p, DType dtype, std::int64_t ignore_index);

}  // namespace xentlab
