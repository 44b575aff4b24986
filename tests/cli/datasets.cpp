// The commands that take a dataset (golden, audit, reference, datasets), run as a user runs
// them: a path that does not exist, the loss spec checked before the dataset is made, the
// normaliser and the upstream gradient (also from a .npy file), the listing's suggestion.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "datasets/catalog.hpp"
#include "harness/verify/golden.hpp"
#include "tests/cli/cli_support.hpp"

namespace xentlab::cli_tests {
namespace {

// ---- golden, audit and datasets --------------------------------------------------------------

TEST_F(DatasetProgram, APathThatDoesNotExistIsNoSuchFile) {
  const std::string missing = path("nowhere/model.safetensors");
  expect_exit_2_naming({
      {"golden --dataset /nonexistent.safetensors -o " + shell_quote(path("g.h5")),
       "no such file: /nonexistent.safetensors"},
      {"golden --dataset " + shell_quote(missing) + " -o " + shell_quote(path("g.h5")),
       "no such file: " + missing},
      {"golden --dataset problem.h5 -o " + shell_quote(path("g.h5")), "no such file: problem.h5"},
      {"audit --backend cpu --dataset " + shell_quote(missing) + " -o " + shell_quote(path("a.h5")),
       "no such file: " + missing},
      // A name (no folder, no extension) is still looked up in the catalog.
      {"golden --dataset stories -o " + shell_quote(path("g.h5")), "unknown dataset 'stories'"},
  });
  EXPECT_FALSE(fs::exists(path("g.h5")));
}

TEST_F(DatasetProgram, LossSpecIsCheckedBeforeTheDatasetIsMade) {
  // The dataset named here could not be made at all: the spec's refusal comes first.
  for (const char* dataset : {"no-such-dataset", "/nonexistent.safetensors"}) {
    const std::string d = std::string(" --dataset ") + dataset;
    expect_exit_2_naming({
        {"golden" + d + " --label-smoothing -1 -o " + shell_quote(path("g.h5")),
         "label_smoothing must be in [0, 1], got -1"},
        {"golden" + d + " --z-loss -2 -o " + shell_quote(path("g.h5")), "z_loss"},
        {"golden" + d + " --logit-scale 0 -o " + shell_quote(path("g.h5")), "logit_scale"},
        {"golden" + d + " --reduction avg -o " + shell_quote(path("g.h5")), "avg"},
        {"golden" + d + " --empty-mean one -o " + shell_quote(path("g.h5")), "--empty-mean"},
        {"audit --backend cpu -q" + d + " --label-smoothing -1 -o " + shell_quote(path("a.h5")),
         "label_smoothing must be in [0, 1], got -1"},
        {"audit --backend cpu -q" + d + " --softcap -1 -o " + shell_quote(path("a.h5")), "softcap"},
        {"golden" + d + " --normalizer 10 --reduction sum -o " + shell_quote(path("g.h5")),
         "normalizer = 10 is given with reduction sum"},
        {"golden" + d + " --normalizer -3 -o " + shell_quote(path("g.h5")), "--normalizer"},
        {"golden" + d + " --upstream ones -o " + shell_quote(path("g.h5")),
         "an upstream gradient is taken with --reduction none only"},
        {"audit --backend cpu -q" + d + " --upstream random -o " + shell_quote(path("a.h5")),
         "--upstream random: an upstream gradient is taken with reduction none only"},
        {"audit --backend cpu -q" + d + " --reduction none --upstream twos -o " +
             shell_quote(path("a.h5")),
         "--upstream 'twos': expected ones or random"},
        {"audit --backend cpu -q" + d + " --chunk-tokens -1 -o " + shell_quote(path("a.h5")),
         "--chunk-tokens"},
        {"audit --backend cpu -q" + d + " --normalizer 8 --reduction none -o " +
             shell_quote(path("a.h5")),
         "normalizer = 8 is given with reduction none"},
    });
  }
}

TEST_F(DatasetProgram, ReferenceTakesTheNormaliserAndTheUpstreamGradient) {
  expect_exit_2_naming({
      {"reference -N 8 -V 100 --upstream random", "--reduction none only"},
      {"reference -N 8 -V 100 --normalizer 5 --reduction sum", "given with reduction sum"},
      {"reference -N 8 -V 100 --reduction none --upstream 2", "expected ones or random"},
  });
  // The oracle (multiple precision, reference/oracle.hpp) agrees with both.
  for (const char* options : {"--normalizer 50", "--reduction none --upstream random"}) {
    const Ran r = xentlab(std::string("reference -N 16 -V 1000 ") + options);
    EXPECT_EQ(r.status, 0) << options << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "reduced     1 checked, 0 over bound")) << r.output;
  }
}

// A .npy file of float64 values (format 1.0, little-endian, C order): the header dict padded with
// spaces and a newline to a multiple of 64 bytes (numpy's layout).
void write_npy(const std::string& file, const std::vector<double>& v) {
  std::string header =
      fmt::format("{{'descr': '<f8', 'fortran_order': False, 'shape': ({},), }}", v.size());
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(file, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char len_le[2] = {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8)};
  out.write(len_le, 2);
  out << header;
  out.write(reinterpret_cast<const char*>(v.data()),
            static_cast<std::streamsize>(v.size() * sizeof(double)));
}

TEST_F(DatasetProgram, GoldenTakesTheUpstreamGradientFromANpyFile) {
  std::vector<double> g(32);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.25 * static_cast<double>(i % 9) - 1.0;
  write_npy(path("g.npy"), g);
  const Ran r = xentlab("golden -N 32 --reduction none --upstream " + shell_quote(path("g.npy")) +
                        " -o " + shell_quote(path("g.h5")));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_golden(path("g.h5")).upstream, g);
  // The default for reduction none: the seeded random g, stored.
  const Ran d = xentlab("golden -N 32 --reduction none -o " + shell_quote(path("d.h5")));
  ASSERT_EQ(d.status, 0) << d.output;
  EXPECT_NE(d.output.find("upstream random, seed 1"), std::string::npos) << d.output;
  EXPECT_EQ(read_golden(path("d.h5")).upstream, random_upstream(32, 1));
  write_npy(path("short.npy"), std::vector<double>(31, 1.0));
  write_npy(path("inf.npy"), {1.0, std::numeric_limits<double>::infinity()});
  expect_exit_2_naming({
      {"golden -N 32 --reduction none --upstream " + shell_quote(path("short.npy")) + " -o " +
           shell_quote(path("s.h5")),
       "expected a float array of shape (32)"},
      {"golden -N 2 --reduction none --upstream " + shell_quote(path("inf.npy")) + " -o " +
           shell_quote(path("s.h5")),
       "entry [1] = inf is not finite"},
  });
}

TEST_F(DatasetProgram, TheListingsSuggestionIsAcceptedByAuditAndGolden) {
  const Ran list = xentlab("datasets");
  ASSERT_EQ(list.status, 0) << list.output;
  // The entry's text is wrapped: join its lines before looking for "try <options>)".
  std::string text = std::regex_replace(list.output, std::regex("\\s+"), " ");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("with audit or golden try ([^)]*)\\)")))
      << list.output;
  const std::string suggested = m[1];
  // Small otherwise (2 tokens, one strategy and recipe): the suggested V is what is exercised.
  const Ran audit = xentlab("audit --backend cpu -q --no-plots --dataset odd-vocab " + suggested +
                            " --tokens 2 --strategies naive --recipes bf16/fp32/fp32/bf16 "
                            "--vocab-rows 8 -o " +
                            shell_quote(path("a.h5")));
  EXPECT_TRUE(audit.status == 0 || audit.status == 1) << suggested << "\n" << audit.output;
  EXPECT_TRUE(fs::exists(path("a.h5"))) << audit.output;
  const Ran golden = xentlab("golden --dataset odd-vocab " + suggested +
                             " -N 2 --vocab-rows 8 -o " + shell_quote(path("g.h5")));
  EXPECT_EQ(golden.status, 0) << suggested << "\n" << golden.output;
  // The short spellings golden has are audit's too.
  const Ran help = xentlab("audit --help");
  for (const char* opt : {"-N,--tokens", "-V,--vocab", "-D,--hidden"})
    EXPECT_TRUE(contains(help.output, opt)) << opt << "\n" << help.output;
}

}  // namespace
}  // namespace xentlab::cli_tests
