// Case C02 of docs/cases.md on the certified reference (method: tests/reference/cases.cpp). Built
// twice: test_reference_c02 checks the case at a quarter of its logits (tests/support/c02_case.hpp:
// the same faults), test_reference_c02_full (XL_C02_FULL_SIZE, labelled slow) at its own size,
// N·V = 2^28 logits through the reference.
#include <gtest/gtest.h>

#include "reference/reference.hpp"
#include "tests/support/c02_case.hpp"
#include "tests/support/case_support.hpp"

namespace xentlab {
namespace {

using testing::C02Size;

LossSpec spec_of(Reduction r) {
  LossSpec s;
  s.reduction = r;
  return s;
}

// Every row ln V, the mean the same, the sum past fp16's range; the mean gradient on sampled rows
// (the scale is 1/n_valid of the whole batch).
void check_reference(const C02Size& c) {
  const std::int64_t N = c.N, V = c.V;
  const Problem pb = testing::c02_problem(c);
  ReferenceOptions no_grad;
  const ReferenceResult mean = compute_reference(pb, spec_of(Reduction::mean), no_grad);
  XL_EXPECT_CASE(mean.reduced_loss, mean.reduced_loss_bound, c.row_loss);
  for (std::int64_t q : {std::int64_t{0}, N / 2 - 1, N - 1})
    XL_EXPECT_CASE(mean.loss[static_cast<std::size_t>(q)],
                   mean.loss_bound[static_cast<std::size_t>(q)], c.row_loss);
  const ReferenceResult sum = compute_reference(pb, spec_of(Reduction::sum), no_grad);
  XL_EXPECT_CASE(sum.reduced_loss, sum.reduced_loss_bound, c.sum);
  ReferenceOptions o;
  o.want_dz = true;
  o.token_rows = {0, 1, N - 1};
  const ReferenceResult g = compute_reference(pb, spec_of(Reduction::mean), o);
  for (std::int64_t q = 0; q < 3; ++q) {
    const std::int64_t tt =
        pb.targets[static_cast<std::size_t>(o.token_rows[static_cast<std::size_t>(q)])];
    const std::int64_t off = (tt + 1) % V;
    XL_EXPECT_CASE(g.dz[static_cast<std::size_t>(q * V + off)],
                   g.dz_bound[static_cast<std::size_t>(q * V + off)], c.off_target);
    XL_EXPECT_CASE(g.dz[static_cast<std::size_t>(q * V + tt)],
                   g.dz_bound[static_cast<std::size_t>(q * V + tt)], c.target);
  }
}

#ifdef XL_C02_FULL_SIZE
TEST(CaseC02, Fp16FlatLogitsTokenReduction) {
  check_reference(testing::kC02Case);
}
#else
TEST(CaseC02, Fp16FlatLogitsTokenReductionQuarterSize) {
  check_reference(testing::kC02Quarter);
}
#endif

}  // namespace
}  // namespace xentlab
