// The loss options that reference, golden and audit share (cli/options/loss.hpp), run as a user
// runs them: the same spelling and the same refusals in every command, given options over the
// dataset's spec, and reference's refusals of the upstream gradient, normaliser and threads.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "datasets/catalog.hpp"
#include "harness/verify/golden.hpp"
#include "tests/cli/cli_support.hpp"

namespace xentlab::cli_tests {
namespace {

// ---- the loss options of every command -------------------------------------------------------

// The loss options are declared once (cli/options/loss.hpp) for reference, golden and audit:
// each command takes the same spelling of an option, and the same bad value is refused by each
// naming the same fault, before any problem is generated (the dataset named here cannot be made).
TEST_F(DatasetProgram, TheLossOptionsAreTheSameInEveryCommand) {
  const std::string golden = "golden --dataset no-such-dataset -o " + shell_quote(path("g.h5"));
  const std::string audit =
      "audit --backend cpu -q --dataset no-such-dataset -o " + shell_quote(path("a.h5"));
  const std::string reference = "reference -N 8 -V 100 -D 8 --oracle-rows 0";
  for (const std::string& cmd : {golden, audit, reference}) {
    expect_exit_2_naming({
        {cmd + " --reduction avg", "unknown reduction 'avg' (expected none, mean or sum)"},
        {cmd + " --label-smoothing 1.5", "label_smoothing must be in [0, 1], got 1.5"},
        {cmd + " --z-loss -1", "z_loss must be finite and >= 0, got -1"},
        {cmd + " --softcap 1e-300", "softcap = 1e-300 is not a normal fp32 number"},
        {cmd + " --logit-scale 0", "logit_scale must be finite and > 0, got 0"},
        // 2^24 + 1: the strategies hold the count in fp32.
        {cmd + " --normalizer 16777217", "normalizer = 16777217 is above 2^24"},
        {cmd + " --normalizer 010", "a leading zero would make it octal"},
        // An empty number is not 0 (CLI11 would read it so).
        {cmd + " --label-smoothing ''", "--label-smoothing: '' is not a number"},
        {cmd + " --z-loss ''", "--z-loss: '' is not a number"},
        {cmd + " --softcap ' '", "--softcap: ' ' is not a number"},
        {cmd + " --logit-scale ''", "--logit-scale: '' is not a number"},
        {cmd + " --normalizer 4 --reduction sum", "normalizer = 4 is given with reduction sum"},
        {cmd + " --normalizer -1", "--normalizer: must be ≥ 0, got -1"},
    });
    const Ran help = xentlab(cmd.substr(0, cmd.find(' ')) + " --help");
    for (const char* opt : {"--reduction", "--label-smoothing", "--z-loss", "--softcap",
                            "--logit-scale", "--normalizer", "--upstream"})
      EXPECT_TRUE(contains(help.output, opt)) << opt << "\n" << help.output;
  }
  // ignore_index and the mean of an empty batch: the commands that take them.
  expect_exit_2_naming({
      {golden + " --ignore-index x", "--ignore-index"},
      {reference + " --ignore-index 0x10", "not a plain decimal integer"},
      {golden + " --empty-mean one", "--empty-mean 'one': expected nan or zero"},
  });
  EXPECT_FALSE(fs::exists(path("g.h5")));
  EXPECT_FALSE(fs::exists(path("a.h5")));
}

// A given option overrides the dataset's spec in golden (the spec line and the file's spec say
// so), and a left-out option keeps the dataset's.
TEST_F(DatasetProgram, GivenLossOptionsOverrideTheDatasetsSpec) {
  const Ran r = xentlab(
      "golden -N 8 --label-smoothing 0.25 --z-loss 0.001 --logit-scale 0.5 --ignore-index 3 "
      "--reduction sum --no-grad -o " +
      shell_quote(path("g.h5")));
  ASSERT_EQ(r.status, 0) << r.output;
  const Golden g = read_golden(path("g.h5"));
  EXPECT_EQ(g.spec.label_smoothing, 0.25);
  EXPECT_EQ(g.spec.z_loss, 0.001);
  EXPECT_EQ(g.spec.logit_scale, 0.5);
  EXPECT_EQ(g.spec.ignore_index, 3);
  EXPECT_EQ(g.spec.reduction, Reduction::sum);
  DatasetParams p;
  p.N = 8;
  EXPECT_EQ(g.spec.softcap, make_dataset("stories260k", p).spec.softcap);  // not given: its own
  EXPECT_TRUE(contains(r.output, g.spec.describe())) << r.output;
}

// `xentlab reference`: the upstream gradient and normaliser beside the wrong reduction, and the
// thread count, are refused before the problem is generated.
TEST(ReferenceProgram, LossAndThreadOptionsAreRefused) {
  testing::expect_exit_2_naming({
      {"reference -N 8 -V 100 --normalizer 5 --reduction none",
       "normalizer = 5 is given with reduction none"},
      {"reference -N 8 -V 100 --upstream random",
       "--upstream random: an upstream gradient is taken with --reduction none only"},
      {"reference -N 8 -V 100 --reduction none --upstream file.npy",
       "--upstream 'file.npy': expected ones or random"},
      {"reference -N 8 -V 100 --threads 5000", "--threads"},
  });
}

}  // namespace
}  // namespace xentlab::cli_tests
