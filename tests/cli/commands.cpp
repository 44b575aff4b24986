// What every command shares, run as a user runs it: exit status 4 and "no CUDA device" for every
// option that needs one where there is none; 3 for an output a folder cannot take; a problem no
// machine here can hold refused before it is generated (2, as the reference's memory budget);
// number options that say what is wrong with the value; and help whose columns line up.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "gpu/registry.hpp"
#include "tests/cli/cli_support.hpp"

namespace xentlab::cli_tests {
namespace {

// Every option that needs a CUDA device, without one (or in a build without the CUDA backend):
// exit 4 and "no CUDA device: why" (on a machine without an NVIDIA driver the why says so, not the
// runtime's "driver version is insufficient"), never exit 2.
TEST_F(DatasetProgram, EveryCommandWithoutACudaDeviceExits4) {
  std::string why;
  if (cuda_device_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  const Ran g = xentlab("golden -N 8 -o " + shell_quote(path("g.h5")));
  ASSERT_EQ(g.status, 0) << g.output;
  const Ran c =
      xentlab("candidate " + shell_quote(path("g.h5")) + " --out " + shell_quote(path("c.h5")) +
              " --strategy naive --recipe fp32/fp32/fp32/fp32");
  ASSERT_EQ(c.status, 0) << c.output;
  const std::string golden = shell_quote(path("g.h5"));
  for (const auto& [args, option] : std::vector<std::pair<std::string, std::string>>{
           {"audit --backend cuda -q --no-plots -o " + shell_quote(path("a.h5")), "--backend cuda"},
           {"audit --reference cuda --backend cpu -q --no-plots -o " + shell_quote(path("a.h5")),
            "--reference cuda"},
           {"reference -N 4 --reference cuda", "--reference cuda"},
           {"golden -N 4 --reference cuda -o " + shell_quote(path("g2.h5")), "--reference cuda"},
           {"candidate " + golden + " --out " + shell_quote(path("c2.h5")) +
                " --strategy naive --recipe fp32/fp32/fp32/fp32 --backend cuda",
            "--backend cuda"},
           {"verify " + golden + " " + shell_quote(path("c.h5")) +
                " --policy fp32 --baseline-backend cuda",
            "--baseline-backend cuda"},
           {"bench -N 8 -V 10 -D 4", "xentlab bench"}}) {
    const Ran r = xentlab(args);
    EXPECT_EQ(r.status, 4) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, option)) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "no CUDA device: ")) << args << "\n" << r.output;
  }
  for (const char* f : {"a.h5", "g2.h5", "c2.h5"}) EXPECT_FALSE(fs::exists(path(f))) << f;
}

// A folder that cannot take the output (here: a name whose temporary name is past the file
// system's 255 bytes) is exit 3, "cannot write the output", for each command that writes one.
TEST_F(DatasetProgram, AnOutputTheFolderCannotTakeIsExit3) {
  const std::string name = shell_quote(path(std::string(246, 'b') + ".h5"));
  for (const std::string& args :
       {"golden -N 8 -o " + name,
        "audit --backend cpu -q --no-plots --problems stories260k -o " + name}) {
    const Ran r = xentlab(args);
    EXPECT_EQ(r.status, 3) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "cannot create the temporary file")) << args << "\n" << r.output;
    // Refused before the work: no problem was generated or described.
    EXPECT_FALSE(contains(r.output, "problem ")) << args << "\n" << r.output;
  }
}

// -N past what this machine can hold: every command refuses it before generating (exit 2), the
// audit and datasets by the inputs' size, reference and golden by the reference's budget; no
// command ends in an allocation failure (exit 3).
TEST(CommandsProgram, AProblemPastTheMachinesMemoryIsRefusedBeforeTheWork) {
  const std::string never = shell_quote(::testing::TempDir() + "xl-never-n.h5");
  testing::expect_exit_2_naming({
      {"audit --backend cpu -q --no-plots -N 3000000000 --problems calibrated -o " + never,
       "more than this machine's memory"},
      {"audit --backend cpu -q --no-plots -N 3000000000 --dataset gaussian -o " + never,
       "more than this machine's memory"},
      {"datasets --make gaussian -N 3000000000", "more than this machine's memory"},
      {"reference -N 3000000000", "of memory but the budget is"},
      {"golden -N 3000000000 -o " + never, "but the memory budget is"},
  });
}

// A value that is no number is named as such (CLI11's Range said "not in range"); one out of
// range gives the range.
TEST(CommandsProgram, NumberOptionsSayWhatIsWrong) {
  testing::expect_exit_2_naming({
      {"reference --threads abc", "--threads: 'abc' is not a plain decimal integer"},
      {"golden --threads abc -o x.h5", "--threads: 'abc' is not a plain decimal integer"},
      {"reference --threads 5000", "--threads: must be between 0 and 4096, got 5000"},
      {"reference --threads -1", "--threads: must be between 0 and 4096, got -1"},
  });
}

// A misspelt option (a newcomer's --polcy) is named with the option it is closest to, as well as
// CLI11's list of what it did not expect; an option nothing is close to is named alone.
TEST(CommandsProgram, AMisspeltOptionIsNamedWithTheOneMeant) {
  testing::expect_exit_2_naming({
      {"verify g.h5 c.h5 --polcy bf16",
       "xentlab verify: unknown option '--polcy'; did you mean "
       "--policy? (xentlab verify --help)"},
      {"golden --dataset stories260k --ouput g.h5",
       "xentlab golden: unknown option '--ouput'; did you mean --out?"},
      {"audit --no-plot", "xentlab audit: unknown option '--no-plot'; did you mean --no-plots?"},
      {"verify g.h5 c.h5 --xyzzy=1", "xentlab verify: unknown option '--xyzzy' (xentlab verify"},
  });
  const Ran r = xentlab("verify g.h5 c.h5 --xyzzy");
  EXPECT_FALSE(contains(r.output, "did you mean")) << r.output;
}

// Display width in columns: UTF-8 continuation bytes take none.
std::size_t columns(const std::string& s) {
  std::size_t n = 0;
  for (const unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Every command's --help: each option's description starts in the same column (CLI11's 30),
// on the option's line or, for a long option, on the next; nothing pushes it by a byte count.
TEST(CommandsProgram, HelpColumnsLineUp) {
  for (const char* command : {"", "audit", "reference", "datasets", "golden", "verify", "candidate",
                              "regress", "fidelity", "bench"}) {
    const Ran r = xentlab(std::string(command) + " --help");
    ASSERT_EQ(r.status, 0) << command << "\n" << r.output;
    std::size_t lines = 0;
    bool in_list = false;
    for (std::size_t at = 0; at < r.output.size();) {
      const std::size_t end = r.output.find('\n', at);
      const std::string line = r.output.substr(at, end - at);
      at = end == std::string::npos ? r.output.size() : end + 1;
      if (line == "Options:" || line == "Positionals:" || line == "Subcommands:") {
        in_list = true;
        continue;
      }
      if (!in_list || line.empty() || line.rfind("  ", 0) != 0) continue;
      ++lines;
      // The description: after the first run of two or more spaces past the name.
      const std::size_t gap = line.find("  ", 2);
      if (gap == std::string::npos) continue;  // a long name: its description on the next line
      const std::size_t desc = line.find_first_not_of(' ', gap);
      if (desc == std::string::npos) continue;
      EXPECT_EQ(columns(line.substr(0, desc)), 30u) << command << ": '" << line << "'";
    }
    EXPECT_GT(lines, 0u) << command << "\n" << r.output;
  }
}

}  // namespace
}  // namespace xentlab::cli_tests
