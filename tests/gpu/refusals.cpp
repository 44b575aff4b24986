// Clean refusals of every CUDA strategy: a recipe of another input dtype, a memory budget below
// one token's needs (InputError naming the bytes), invalid targets (case C12).
#include <gtest/gtest.h>

#include <string>

#include "tests/gpu/gpu_fixture.hpp"

namespace xentlab::gpu_tests {
namespace {

// ---- refusals --------------------------------------------------------------------------------

TEST(GpuStrategies, CleanRefusals) {
  XL_REQUIRE_DEVICE();
  const Problem p = gaussian(64, 4096, 64, DType::bf16, 1.0, 23, false, false);
  for (const auto& s : make_strategies(Backend::cuda)) {
    // Recipe whose input dtype is not the problem's.
    EXPECT_EQ(s->can_implement(p, {}, parse_recipe("fp16/fp16/fp32/fp16")).code,
              Status::Code::not_supported)
        << s->name();
    // A memory budget below what one token needs: InputError with the byte count.
    RunRequest req;
    req.problem = &p;
    req.recipe = parse_recipe("bf16/bf16/fp32/bf16");
    req.memory_budget = 1024;
    try {
      (void)s->run(req);
      ADD_FAILURE() << s->name() << " ran with a 1024-byte budget";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
    }
  }
  // C12: invalid targets name the row and the value; never a finite loss.
  Problem bad;
  bad.N = 5;
  bad.V = 5;
  bad.logits = Tensor(DType::fp32, {5, 5}, "logits");
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) bad.logits.set(i * 5 + j, j);
  bad.targets = {1, 5, -4, -100, 4};
  for (const auto& s : make_strategies(Backend::cuda)) {
    RunRequest req;
    req.problem = &bad;
    req.recipe = parse_recipe("fp32");
    EXPECT_THROW((void)s->run(req), InputError) << s->name();
  }
}

}  // namespace
}  // namespace xentlab::gpu_tests
