// Bad input: each a clear InputError naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "datasets/synthetic.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"

namespace xentlab {
namespace {

// Expects InputError whose message contains `needle`.
template <class F>
void expect_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no InputError; expected one mentioning '" << needle << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << needle << "'";
  }
}

TEST(ReferenceInput, MismatchedShapes) {
  expect_error(
      [] {
        Problem::linear(Tensor(DType::bf16, {4, 8}), Tensor(DType::bf16, {10, 7}), std::nullopt,
                        {0, 1, 2, 3});
      },
      "hidden sizes differ");
  expect_error(
      [] {
        Problem::linear(Tensor(DType::bf16, {4, 8}), Tensor(DType::bf16, {10, 8}), std::nullopt,
                        {0, 1, 2});
      },
      "targets has 3 entries but there are N=4");
  expect_error(
      [] {
        Problem::linear(Tensor(DType::bf16, {4, 8}), Tensor(DType::fp16, {10, 8}), std::nullopt,
                        {0, 1, 2, 3});
      },
      "one input dtype");
  expect_error(
      [] {
        Problem::linear(Tensor(DType::bf16, {2, 8}), Tensor(DType::bf16, {10, 8}),
                        Tensor(DType::fp32, {9}), {0, 1});
      },
      "bias must have shape (V=10)");
  expect_error([] { Problem::from_logits(Tensor(DType::fp32, {2, 3, 4}), {0, 1}); }, "2-D");
}

TEST(ReferenceInput, ZeroAndNegativeSizes) {
  expect_error([] { Tensor(DType::fp32, {-1, 4}); }, "negative extent");
  expect_error(
      [] {
        Problem::from_logits(Tensor(DType::fp32, {0, 4}), {});
      },
      "N (tokens) must be >= 1");
  expect_error(
      [] {
        Problem::from_logits(Tensor(DType::fp32, {2, 0}), {0, 0});
      },
      "V (vocabulary) must be >= 1");
  expect_error(
      [] {
        Problem::linear(Tensor(DType::fp32, {2, 0}), Tensor(DType::fp32, {3, 0}), std::nullopt,
                        {0, 0});
      },
      "D >= 1");
}

// The scan for non-finite values runs over chunks in parallel; it must still name the first
// offending element, whichever chunk finishes first.
TEST(ReferenceInput, NonFiniteScanNamesTheFirstElement) {
  for (DType dt : {DType::fp32, DType::bf16}) {
    Tensor W(dt, {1000, 300});  // 300000 elements: several scan chunks
    W.set(250001, std::nan(""));
    W.set(70003, HUGE_VAL);
    W.set(299999, -HUGE_VAL);
    Tensor H(dt, {2, 300});
    expect_error([&] { Problem::linear(H, W, std::nullopt, {0, 1}); }, "flat index 70003");
  }
}

TEST(ReferenceInput, NonFiniteInputs) {
  for (DType dt : {DType::fp32, DType::bf16, DType::fp16}) {
    Tensor H(dt, {2, 4}), W(dt, {3, 4});
    H.set(5, std::nan(""));
    expect_error(
        [&] {
          Problem::linear(H, W, std::nullopt, {0, 1});
        },
        "H holds a non-finite value");
    Tensor H2(dt, {2, 4});
    W.set(7, -HUGE_VAL);
    expect_error([&] { Problem::linear(H2, W, std::nullopt, {0, 1}); }, "flat index 7");
    Tensor Z(dt, {2, 3});
    Z.set(4, HUGE_VAL);
    expect_error([&] { Problem::from_logits(Z, {0, 1}); }, "only -inf is allowed");
    Z.set(4, -HUGE_VAL);  // a mask is fine
    EXPECT_NO_THROW(Problem::from_logits(Z, {0, 1}));
  }
}

TEST(ReferenceInput, BadOptions) {
  const Problem p = make_gaussian_linear(4, 10, 3, DType::bf16, 1.0, 1);
  LossSpec s;
  ReferenceOptions o;
  o.token_rows = {2, 1};
  expect_error([&] { compute_reference(p, s, o); }, "sorted and unique");
  o.token_rows = {0, 4};
  expect_error([&] { compute_reference(p, s, o); }, "token_rows [1] = 4 is outside [0, 4)");
  o = {};
  o.vocab_rows = {10};
  expect_error([&] { compute_reference(p, s, o); }, "vocab_rows [0] = 10");
  o = {};
  o.upstream = {1, 1, 1, 1};
  expect_error([&] { compute_reference(p, s, o); }, "only taken with reduction none");
  s.reduction = Reduction::none;
  o.upstream = {1, 1};
  expect_error([&] { compute_reference(p, s, o); },
               "upstream gradient has 2 entries, expected N=4");
  o.upstream = {1, std::nan(""), 1, 1};
  expect_error([&] { compute_reference(p, s, o); }, "upstream gradient [1]");
  s = {};
  s.label_smoothing = 2;
  expect_error([&] { compute_reference(p, s); }, "label_smoothing");
  s = {};
  o = {};
  o.max_bytes = 100;
  for (ReferenceTier tier : {ReferenceTier::compensated, ReferenceTier::blas}) {
    o.tier = tier;
    expect_error([&] { compute_reference(p, s, o); }, "of memory but the budget is 100 bytes");
  }
  o = {};
  o.max_bytes = -1;
  expect_error([&] { compute_reference(p, s, o); }, "memory budget must be >= 0");
}

}  // namespace
}  // namespace xentlab
