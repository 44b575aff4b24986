// The two ways of forming the bounds' covariates (judge/covariates.hpp): the audit's and the
// bench's bounded ones (no second GEMM) must bound the golden file's exact ones from above —
// max |x|, mean |x| and Σ|h||w| — so that a bound formed from either holds, and both must give the
// same target logit. Problems from the catalog: linear heads (calibrated, confident, and a
// softcapped Gemma-2 head) and given logits (heavy-tailed, a large common offset).
#include "judge/covariates.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "datasets/catalog.hpp"

namespace xentlab {
namespace {

struct Entry {
  std::string name;
  std::int64_t N, V, D;  // D = 0: a logits problem (no hidden size to override)
};

DatasetInstance make(const Entry& e) {
  DatasetParams p;
  p.N = e.N;
  p.V = e.V;
  if (e.D > 0) p.D = e.D;
  p.seed = 7;
  return make_dataset(e.name, p);
}

TEST(Covariates, BoundedCovariatesBoundTheExactOnesFromAbove) {
  const std::vector<Entry> entries = {{"calibrated", 24, 700, 32},
                                      {"confident", 16, 500, 24},
                                      {"gemma2-2b", 8, 900, 16},
                                      {"heavy", 12, 800, 0},
                                      {"offset", 12, 600, 0}};
  for (const Entry& e : entries) {
    SCOPED_TRACE(e.name);
    const DatasetInstance ds = make(e);
    const Problem& pb = ds.problem;
    const LossSpec& sp = ds.spec;
    std::vector<std::int64_t> rows;
    for (std::int64_t i = 0; i < pb.N; i += 2) rows.push_back(i);  // a sample of the rows
    const ExactRowCovariates x = exact_row_covariates(pb, sp, rows);
    const BoundedRowCovariates b = bounded_row_covariates(pb, sp, rows, true);
    ASSERT_EQ(b.max_abs.size(), rows.size());
    ASSERT_EQ(x.max_abs_logit.size(), rows.size());
    for (std::size_t q = 0; q < rows.size(); ++q) {
      SCOPED_TRACE("row " + std::to_string(rows[q]));
      EXPECT_GE(b.max_abs[q], x.max_abs_logit[q]);
      EXPECT_GE(b.mean_abs[q], x.mean_abs_logit[q]);
      if (pb.is_linear()) {
        // The exact Σ|h||w| carries the logit scale; the bounded one is of the raw logits.
        EXPECT_GE(sp.logit_scale * b.gemm_abs[q], x.gemm_abs[q]);
        // Both in double: the dot product against the target row and the fp64 GEMM differ by
        // rounding only, at most D·2^-53·Σ|h||w| (the softcap's tanh contracts differences).
        const double tol = static_cast<double>(pb.D) * 0x1p-53 * b.gemm_abs[q] * 4;
        EXPECT_NEAR(b.target_logit[q], x.target_logit[q], tol);
        EXPECT_GT(b.gemm_abs[q], 0.0);
      } else {
        EXPECT_EQ(b.target_logit[q], x.target_logit[q]);  // the same double transform of one value
      }
    }
    if (!pb.is_linear()) {
      EXPECT_EQ(b.raw_logits.size(), rows.size() * static_cast<std::size_t>(pb.V));
    }
  }
}

}  // namespace
}  // namespace xentlab
