#include "numerics/loss_spec.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "numerics/error.hpp"
#include "numerics/recipe.hpp"

namespace xentlab {
namespace {

TEST(LossSpec, DefaultsArePyTorchs) {
  LossSpec s;
  EXPECT_EQ(s.ignore_index, -100);
  EXPECT_EQ(s.reduction, Reduction::mean);
  EXPECT_EQ(s.empty_mean, EmptyMean::nan);
  EXPECT_NO_THROW(s.validate());
}

TEST(LossSpec, RejectsOutOfRangeOptions) {
  auto bad = [](auto edit) {
    LossSpec s;
    edit(s);
    EXPECT_THROW(s.validate(), InputError) << s.describe();
  };
  bad([](LossSpec& s) { s.label_smoothing = -0.1; });
  bad([](LossSpec& s) { s.label_smoothing = 1.5; });
  bad([](LossSpec& s) { s.label_smoothing = std::nan(""); });
  bad([](LossSpec& s) { s.z_loss = -1; });
  bad([](LossSpec& s) { s.softcap = -30; });
  bad([](LossSpec& s) { s.logit_scale = 0; });
  bad([](LossSpec& s) { s.logit_scale = HUGE_VAL; });
  // Finite in fp64 but not a normal fp32 number: 0 or inf in the strategies' arithmetic.
  bad([](LossSpec& s) { s.softcap = 1e-300; });
  bad([](LossSpec& s) { s.logit_scale = 1e300; });
  bad([](LossSpec& s) { s.logit_scale = 1e-39; });  // an fp32 subnormal
  bad([](LossSpec& s) { s.z_loss = 1e39; });
  EXPECT_THROW(parse_reduction("avg"), InputError);
}

TEST(LossSpec, AcceptsTheFp32NormalRange) {
  LossSpec s;
  s.softcap = 1e-37;
  s.logit_scale = 3e38;
  s.z_loss = 1e38;
  EXPECT_NO_THROW(s.validate());
  s.softcap = 0.0;  // off
  s.z_loss = 0.0;   // off
  EXPECT_NO_THROW(s.validate());
}

TEST(Recipe, ParseAndGrid) {
  const Recipe r = parse_recipe("bf16/bf16/fp32/bf16");
  EXPECT_EQ(r.logits, DType::bf16);
  EXPECT_EQ(r.accum, DType::fp32);
  EXPECT_EQ(r.name(), "bf16/bf16/fp32/bf16");
  EXPECT_THROW(parse_recipe("bf16/fp32"), InputError);
  EXPECT_THROW(parse_recipe("bf16/fp32/fp8/bf16"), InputError);
  const auto grid = default_recipe_grid();
  EXPECT_EQ(grid.size(), 19u);  // 2 inputs × 3 logits × 3 accum + all-fp32
}

}  // namespace
}  // namespace xentlab
