#pragma once
// Precision recipe: the dtype of every place where a strategy rounds (see shared DESIGN.md).
//   input  — storage of H and W (and given logits)
//   logits — where the GEMM result z is held
//   accum  — sum-exp, lse, token reduction, cross-chunk gradient sums
//   grad   — dtype of the output gradients
// Written "input/logits/accum/grad", e.g. "bf16/bf16/fp32/bf16".
#include <string>
#include <string_view>
#include <vector>

#include "numerics/dtype.hpp"

namespace xentlab {

struct Recipe {
  DType input = DType::bf16;
  DType logits = DType::fp32;
  DType accum = DType::fp32;
  DType grad = DType::bf16;

  std::string name() const;  ///< "in/logits/accum/grad"
  bool operator==(const Recipe& o) const {
    return input == o.input && logits == o.logits && accum == o.accum && grad == o.grad;
  }
};

/// Parses "in/logits/accum/grad" (four dtypes, see parse_dtype) or the alias "fp32" for all-fp32.
/// Throws InputError naming the text.
Recipe parse_recipe(std::string_view s);

/// The audit's default grid: logits ∈ {fp32, bf16, fp16} × accum ∈ {fp32, bf16, fp16} for bf16 and
/// fp16 inputs (grad = input dtype), plus all-fp32.
std::vector<Recipe> default_recipe_grid();

}  // namespace xentlab
