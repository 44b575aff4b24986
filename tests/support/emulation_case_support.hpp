#pragma once
// Helpers of the emulated-strategy case tests (tests/gpu/emulation/cases.cpp,
// tests/gpu/emulation/c02.cpp): run every emulated strategy × recipe on a case problem with the
// a-priori bounds of each run (vocab_parallel on several rank counts: the cases sharded).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "gpu/registry.hpp"
#include "judge/bounds_for.hpp"
#include "numerics/error.hpp"
#include "numerics/ulp.hpp"
#include "reference/reference.hpp"
#include "tests/support/case_support.hpp"

namespace xentlab {
namespace testing {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline LossSpec spec_of(Reduction r) {
  LossSpec s;
  s.reduction = r;
  return s;
}

/// Every recipe the emulation accepts for inputs of dtype `in`: logits and accum in
/// {fp32, bf16, fp16}, grad fp32 (the logits-dtype dz is returned unrounded further).
inline std::vector<Recipe> recipes_for(DType in) {
  std::vector<Recipe> out;
  for (DType l : {DType::fp32, DType::bf16, DType::fp16})
    for (DType a : {DType::fp32, DType::bf16, DType::fp16})
      out.push_back(Recipe{in, l, a, DType::fp32});
  return out;
}

struct RunCtx {
  std::string what;
  const Recipe& recipe;
  const StrategyOutputs& out;
  const Bounds& b;  // a-priori bounds of this run (on the reference's rows)
  const ReferenceResult& ref;
  bool linear;
};

/// Vocabulary-parallel rank counts each case also runs on (those ≤ V): the cases sharded.
inline constexpr int kCaseRanks[] = {2, 3, 8};

/// Runs every emulated strategy × recipe on pb and calls check for each; every strategy of the
/// registry, those that shard the vocabulary (vocab_parallel) once per rank count of kCaseRanks
/// that V allows, each judged by the bound of its run's declaration (Strategy::run_arithmetic).
inline void each_run(const Problem& pb, const LossSpec& spec,
                     const std::function<void(const RunCtx&)>& check,
                     std::vector<Recipe> recipes = {}, std::vector<std::int64_t> rows = {},
                     std::int64_t chunk = 2) {
  if (recipes.empty()) recipes = recipes_for(pb.input_dtype());
  ReferenceOptions ro;
  ro.want_dz = !pb.is_linear();
  ro.token_rows = rows;
  const ReferenceResult ref = compute_reference(pb, spec, ro);
  for (const Recipe& rc : recipes)
    for (const auto& s : make_strategies(Backend::cpu_emulation, StrategySet::all)) {
      std::vector<int> ranks{0};
      if (strategy_traits(s->name()).shards_vocabulary) {
        ranks.clear();
        for (const int P : kCaseRanks)
          if (P <= pb.V) ranks.push_back(P);
      }
      for (const int P : ranks) {
        RunRequest req;
        req.problem = &pb;
        req.spec = spec;
        req.recipe = rc;
        req.token_rows = rows;
        req.chunk_tokens = chunk;
        req.ranks = P;
        const StrategyOutputs out = s->run(req);
        const Bounds b = bounds_for_reference(pb, spec, rc, s->run_arithmetic(req), ref);
        check(RunCtx{s->name() + (P > 0 ? " P=" + std::to_string(P) : std::string()) + " " +
                         rc.name() + (pb.is_linear() ? " linear" : " logits"),
                     rc, out, b, ref, pb.is_linear()});
      }
    }
}

// Gradient entry (row q, vocabulary j) of a run and its bound: dz of a logits problem, or dW[j, q]
// of the linear twin (H = I, so dW = dzᵀ).
inline double grad_of(const RunCtx& c, std::int64_t q, std::int64_t j) {
  return c.linear ? c.out.dW[static_cast<std::size_t>(j * c.ref.D + q)]
                  : c.out.dz[static_cast<std::size_t>(q * c.ref.V + j)];
}
inline double grad_bound(const RunCtx& c, std::int64_t q, std::int64_t j) {
  const auto k = static_cast<std::size_t>(c.linear ? j * c.ref.D + q : q * c.ref.V + j);
  return c.linear ? c.b.dW[k] + c.ref.dW_bound[k] : c.b.dz[k] + c.ref.dz_bound[k];
}
inline double loss_bound(const RunCtx& c, std::size_t q) {
  return c.b.loss[q] + c.ref.loss_bound[q];
}
inline double reduced_bound(const RunCtx& c) {
  return c.b.reduced_loss + c.ref.reduced_loss_bound;
}

inline void both_paths(const Problem& lp, const LossSpec& spec,
                       const std::function<void(const RunCtx&)>& check,
                       std::vector<Recipe> recipes = {}) {
  each_run(lp, spec, check, recipes);
  each_run(linear_from_logits(lp, spec.ignore_index), spec, check, recipes);
}

inline Recipe R(const char* s) {
  return parse_recipe(s);
}

// The case value within the run's a-priori bound (+ the reference's bound + half a printed unit).
// A run whose bound is +Inf has no guarantee at all (c·u_accum ≥ 1, or a possible overflow): the
// value is then not checkable against the case, and the bounds must say so (meaningful = false).
inline ::testing::AssertionResult within(const RunCtx& c, double value, double bound,
                                         const char* lit) {
  if (std::isinf(bound)) {
    if (c.b.meaningful)
      return ::testing::AssertionFailure() << "infinite bound but meaningful = true";
    return ::testing::AssertionSuccess();
  }
  return ::xentlab::testing::matches_case(value, bound, lit);
}

}  // namespace testing
}  // namespace xentlab
