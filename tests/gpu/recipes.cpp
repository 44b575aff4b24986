// Every strategy of the registry × the recipes of each storage dtype on small problems (unaligned
// V = 507, D = 123), × every LossSpec option, and on a medium problem: within the a-priori bound
// and against the CPU emulation (check_run, tests/gpu/gpu_fixture.hpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/gpu/gpu_fixture.hpp"

namespace xentlab::gpu_tests {
namespace {

// ---- recipes × strategies on small problems (unaligned V = 507, D = 123) ---------------------

TEST(GpuStrategies, RecipeGridSmallLinear) {
  XL_REQUIRE_DEVICE();
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32}) {
    Case c{"V507-D123", gaussian(67, 507, 123, dt, 4.0, 5, false, false), {}, {}};
    check_all_strategies(c, grid_for(dt), 16);
  }
}

TEST(GpuStrategies, RecipeGridLogits) {
  XL_REQUIRE_DEVICE();
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32}) {
    Case c{"logits-V3001", make_gaussian_logits(45, 3001, dt, 3.0, 7), {}, {}};
    check_all_strategies(c, grid_for(dt), 16);
  }
}

// ---- every LossSpec option on every strategy --------------------------------------------------

TEST(GpuStrategies, LossOptions) {
  XL_REQUIRE_DEVICE();
  const std::vector<LossSpec> specs = loss_option_specs();
  const std::vector<Recipe> recipes = {parse_recipe("bf16/fp32/fp32/bf16"),
                                       parse_recipe("bf16/bf16/fp32/bf16"),
                                       parse_recipe("bf16/bf16/bf16/bf16")};
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const LossSpec& sp = specs[k];
    for (bool bias : {false, true}) {
      Problem p = ignoring_as(gaussian(61, 507, 123, DType::bf16, 4.0, 11 + k, bias, true), sp);
      Case c{"options-" + std::to_string(k) + (bias ? "-bias" : ""), std::move(p), sp,
             sp.reduction == Reduction::none ? random_upstream(61, 99 + k) : std::vector<double>{}};
      check_all_strategies(c, recipes, 16);
    }
    Problem lp = make_gaussian_logits(37, 1001, DType::bf16, 3.0, 21 + k);
    for (std::int64_t i = 2; i < lp.N; i += 5)
      lp.targets[static_cast<std::size_t>(i)] = sp.ignore_index;
    Case lc{"options-logits-" + std::to_string(k), std::move(lp), sp,
            sp.reduction == Reduction::none ? random_upstream(37, 7 + k) : std::vector<double>{}};
    check_all_strategies(lc, recipes, 16);
  }
}

// ---- medium problem -----------------------------------------------------------------------------

TEST(GpuStrategies, MediumLinear) {
  XL_REQUIRE_DEVICE();
  Case c{"medium", gaussian(512, 8192, 256, DType::bf16, 6.0, 3, true, true), {}, {}};
  check_all_strategies(c,
                       {parse_recipe("bf16/fp32/fp32/bf16"), parse_recipe("bf16/bf16/fp32/fp32"),
                        parse_recipe("bf16/bf16/fp32/bf16")},
                       128);
}

}  // namespace
}  // namespace xentlab::gpu_tests
