// The audit end to end on the CPU emulation backend, on small problems: dispositions, the results
// file (write, read back, append), the verdict's structure, and the regression check.
#include "harness/audit/audit.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "datasets/generators.hpp"
#include "datasets/io/h5.hpp"
#include "numerics/error.hpp"
#include "tests/support/h5_damage.hpp"

namespace xentlab {
namespace {

std::vector<audit::AuditProblem> small_set() {
  LossSpec mean;
  std::vector<audit::AuditProblem> set;
  set.push_back({"calibrated", "test",
                 make_head(6, 507, 23, DType::bf16, 4.0, 3, TargetMode::calibrated, mean, "c"),
                 mean});
  set.push_back(
      {"confident", "test", make_confident_head(6, 507, 23, DType::bf16, 4.0, 3, mean), mean});
  return set;
}

// One head whose vocabulary is wide enough that bf16 accumulation of its sum of exponentials has
// no finite a-priori bound (c·u_accum ≥ 1 at V = 40000), the rest small.
std::vector<audit::AuditProblem> wide_set() {
  LossSpec mean;
  return {{"wide", "test",
           make_head(3, 40000, 8, DType::bf16, 2.0, 5, TargetMode::calibrated, mean, "w"), mean}};
}

audit::AuditConfig small_config() {
  audit::AuditConfig cfg;
  cfg.recipes = {parse_recipe("bf16/fp32/fp32/bf16"), parse_recipe("bf16/bf16/fp32/bf16"),
                 parse_recipe("bf16/fp32/bf16/bf16"), parse_recipe("bf16/bf16/bf16/bf16")};
  cfg.rows = 0;
  cfg.vocab_rows = 64;
  cfg.policy = "audit";
  cfg.device = "cpu-emulation";
  return cfg;
}

std::string temp_path(const char* name) {
  // The process id in the name: two runs of the suite at once (two checkouts) do not share files.
  return (std::filesystem::temp_directory_path() /
          (std::string("xentlab-test-") + std::to_string(::getpid()) + "-" + name))
      .string();
}

TEST(Audit, EmulatedRunsOfTheFp32AccumRecipesPass) {
  const auto res = audit::run_audit(small_set(), small_config());
  ASSERT_FALSE(res.runs.empty());
  for (const auto& r : res.runs) {
    if (r.recipe.name() == "bf16/fp32/fp32/bf16" || r.recipe.name() == "bf16/bf16/fp32/bf16") {
      EXPECT_EQ(r.verdict.disposition, Disposition::passed)
          << r.problem << " " << r.strategy << " " << r.recipe.name() << ": " << r.verdict.reason;
    }
    EXPECT_NE(r.verdict.disposition, Disposition::failed) << r.verdict.reason;
  }
  // One verdict row per problem × output compared, each with both recipe errors measured.
  ASSERT_FALSE(res.verdict.empty());
  for (const auto& v : res.verdict) {
    EXPECT_FALSE(std::isnan(v.err_fp32_logits));
    EXPECT_FALSE(std::isnan(v.err_bf16_logits));
  }
}

// A problem audited in its own input dtype only (a real model's head): its runs of the other
// input dtypes are recorded as not supported, naming why, and nothing of them is run.
TEST(Audit, AProblemAuditedInItsOwnDtypeOnly) {
  std::vector<audit::AuditProblem> set = small_set();
  set[0].inputs = {DType::bf16};
  audit::AuditConfig cfg = small_config();
  cfg.recipes = {parse_recipe("bf16/bf16/fp32/bf16"), parse_recipe("fp16/fp32/fp32/fp16")};
  cfg.strategies = {"naive", "chunked"};
  const auto res = audit::run_audit(set, cfg);
  ASSERT_EQ(res.runs.size(), 8u);  // 2 problems × 2 recipes × 2 strategies
  int own = 0, other = 0;
  for (const auto& r : res.runs) {
    const std::string what = r.problem + " " + r.strategy + " " + r.recipe.name();
    if (r.problem == "calibrated" && r.recipe.input == DType::fp16) {
      ++other;
      EXPECT_EQ(r.verdict.disposition, Disposition::not_supported) << what;
      EXPECT_NE(r.verdict.reason.find("calibrated is audited with bf16 inputs only"),
                std::string::npos)
          << what << ": " << r.verdict.reason;
    } else {
      ++own;
      EXPECT_EQ(r.verdict.disposition, Disposition::passed) << what << ": " << r.verdict.reason;
    }
  }
  EXPECT_EQ(other, 2);
  EXPECT_EQ(own, 6);
  // Only the problems of an audited input dtype have a record of that dtype.
  for (const auto& p : res.problems) EXPECT_FALSE(p.name == "calibrated" && p.input == DType::fp16);
}

TEST(Audit, ResultsFileRoundTripAndAppend) {
  const std::string path = temp_path("results.h5");
  std::filesystem::remove(path);
  const auto cfg = small_config();
  const auto res = audit::run_audit(small_set(), cfg);
  audit::write_results(path, res, cfg, false, false);
  EXPECT_THROW(audit::write_results(path, res, cfg, false, false), InputError);  // no clobbering
  {
    const h5::File f = h5::File::open_read(path);
    EXPECT_EQ(f.attr_string("format"), "xentlab-results");
    const auto ids = f.open_group("runs").children();
    ASSERT_EQ(ids.size(), res.runs.size());
    const h5::Group g = f.open_group("runs/" + ids[0]);
    EXPECT_EQ(g.attr_string("strategy"), res.runs[0].strategy);
    EXPECT_EQ(g.attr_string("recipe"), res.runs[0].recipe.name());
    const h5::Group loss = g.open_group("loss");
    EXPECT_EQ(loss.attr_double("normwise_rel_err"), res.runs[0].outputs[0].stats.normwise_rel_err);
    // Every run is found by (problem, recipe, strategy) in one path:
    // by_key/PROBLEM/RECIPE/STRATEGY.
    for (std::size_t i = 0; i < res.runs.size(); ++i) {
      const auto& r = res.runs[i];
      const std::string key = "by_key/" + r.problem + "/" + r.recipe.name() + "/" + r.strategy;
      ASSERT_TRUE(f.exists(key)) << key;
      const h5::Group k = f.open_group(key);
      const h5::Group run = f.open_group("runs/" + ids[i]);
      EXPECT_EQ(k.attr_string("strategy"), r.strategy);
      EXPECT_EQ(k.attr_string("recipe"), r.recipe.name());
      EXPECT_EQ(k.attr_string("problem"), r.problem);
      EXPECT_EQ(k.attr_double("max_ratio"), run.attr_double("max_ratio"));
    }
    // Each problem records the vocabulary rows its dW/db were compared on, like its token rows:
    // vocab_rows = 64 distinct sorted rows of V = 507, and every run's dW holds J·D = 64·23 values.
    for (const auto& p : res.problems) {
      const h5::Group pg = f.open_group("problems/" + p.name + ".bf16");
      const std::vector<std::int64_t> rows = pg.open_dataset("vocab_rows").read_int64();
      ASSERT_EQ(rows.size(), 64u) << p.name;
      for (std::size_t k = 0; k < rows.size(); ++k) {
        EXPECT_TRUE(rows[k] >= 0 && rows[k] < 507) << rows[k];
        if (k > 0) {
          EXPECT_LT(rows[k - 1], rows[k]);
        }
      }
      EXPECT_EQ(rows, p.vocab_rows);
    }
    for (const auto& r : res.runs)
      for (const auto& o : r.outputs)
        if (o.name == "dW") {
          EXPECT_EQ(o.stats.n, 64 * 23) << r.problem << " " << r.strategy;
        }
  }
  audit::write_results(path, res, cfg, false, true);
  {
    const h5::File f = h5::File::open_read(path);
    EXPECT_EQ(f.open_group("runs").children().size(), 2 * res.runs.size());
    // The appended runs of the same keys: linked with the backend's name.
    const auto& r = res.runs.back();
    const std::string key =
        "by_key/" + r.problem + "/" + r.recipe.name() + "/" + r.strategy + "@" + r.backend;
    ASSERT_TRUE(f.exists(key)) << key;
    EXPECT_EQ(f.open_group(key).attr_string("strategy"), r.strategy);
  }
  // Appending runs of a problem recorded under the same name with another spec: refused, and
  // the file keeps its runs.
  auto other = res;
  ASSERT_FALSE(other.problems.empty());
  other.problems[0].spec += " (edited)";
  try {
    audit::write_results(path, other, cfg, false, true);
    ADD_FAILURE() << "runs of another problem appended under one name";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("as another problem"), std::string::npos) << e.what();
  }
  {
    const h5::File f = h5::File::open_read(path);
    EXPECT_EQ(f.open_group("runs").children().size(), 2 * res.runs.size());
  }
  // Before the work (check_append_problems): the same problems and options pass; a problem of the
  // same name at another N (its description at its audited rows), or compared on other vocabulary
  // rows, is refused by name.
  EXPECT_NO_THROW(audit::check_append_problems(path, small_set(), cfg));
  {
    LossSpec mean;
    std::vector<audit::AuditProblem> longer;
    longer.push_back({"calibrated", "test",
                      make_head(9, 507, 23, DType::bf16, 4.0, 3, TargetMode::calibrated, mean, "c"),
                      mean});
    try {
      audit::check_append_problems(path, longer, cfg);
      ADD_FAILURE() << "a problem of another N appended under one name";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("calibrated.bf16 as another problem ('c: linear N=6 "
                                           "V=507 D=23 bf16', this audit 'c: linear N=9 V=507 "
                                           "D=23 bf16')"),
                std::string::npos)
          << e.what();
    }
    // An audit of other input dtypes records none of the file's problems: nothing to compare.
    auto other_dtype = cfg;
    other_dtype.rows = 3;
    other_dtype.recipes = {parse_recipe("fp16/fp32/fp32/fp16")};
    EXPECT_NO_THROW(audit::check_append_problems(path, small_set(), other_dtype));
    auto fewer = cfg;
    fewer.vocab_rows = 32;
    try {
      audit::check_append_problems(path, small_set(), fewer);
      ADD_FAILURE() << "runs of other vocabulary rows appended under one name";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("with 64 compared vocabulary rows, this audit "
                                           "compares 32"),
                std::string::npos)
          << e.what();
    }
  }
  // A results file whose recorded rows were overwritten after it was written: --append refuses
  // it before the work and when writing, naming the dataset, and leaves it as it was.
  const std::string rows = "/problems/" + res.problems[0].name + ".bf16/token_rows";
  testing::flip_dataset_byte(path, rows, 3);
  const auto size = std::filesystem::file_size(path);
  for (int when = 0; when < 2; ++when) {
    try {
      if (when == 0)
        audit::check_append_problems(path, small_set(), cfg);
      else
        audit::write_results(path, res, cfg, false, true);
      ADD_FAILURE() << "a damaged results file was appended to";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(path + ":" + rows +
                                           ": its data do not match its sha256 digest"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(std::filesystem::file_size(path), size);
  std::filesystem::remove(path);
}

TEST(Audit, SummaryCountsUnboundedRunsApartAndAnswersInPlainLanguage) {
  auto res = audit::run_audit(small_set(), small_config());
  // A recipe without a finite a-priori bound (c·u_accum ≥ 1: bf16 accumulation over V = 128256)
  // is measured, not passed (AnUnboundedRecipeIsMeasuredNotPassed runs one). At V = 507 every
  // recipe here is bounded, so two passed runs are recorded as such a run is: the summary must
  // count them apart, with the largest loss error among them.
  std::vector<double> marked;
  for (auto& r : res.runs)
    if (marked.size() < 2 && r.verdict.disposition == Disposition::passed &&
        r.recipe.name() == "bf16/bf16/bf16/bf16") {
      r.bound_meaningful = false;
      r.verdict.disposition = Disposition::measured;
      --res.passed;
      ++res.measured;
      marked.push_back(r.normwise("loss"));
    }
  ASSERT_EQ(marked.size(), 2u);
  const std::string s = audit::format_summary(res, false);
  EXPECT_NE(s.find(fmt::format(
                "runs: {} passed (within the finite a-priori bound of their recipe's arithmetic), "
                "2 measured (their recipe has no finite bound: errors reported, not judged; "
                "loss errors up to {:.2e})",
                res.passed, std::max(marked[0], marked[1]))),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("not accurate"), std::string::npos);
  // The answers precede the verdict's table; bf16 and fp16 accumulation are answered apart (the
  // grid has no fp16-accumulation recipe: no such line).
  const auto answers = s.find("May the logits be bf16?"), table = s.find("VERDICT:");
  ASSERT_NE(answers, std::string::npos);
  EXPECT_LT(answers, table);
  EXPECT_NE(s.find("bf16 accumulation, loss:"), std::string::npos) << s;
  EXPECT_EQ(s.find("fp16 accumulation"), std::string::npos) << s;
  for (const auto& v : res.verdict) {
    EXPECT_TRUE(v.accum_bf16.tested) << v.regime << " " << v.output;
    EXPECT_FALSE(v.accum_fp16.tested);
    // Only bf16 accumulation ran: "fp32 needed" is exactly "bf16 accumulation harmful".
    EXPECT_EQ(v.accum_bf16.harmless, !v.accum_fp32_needed) << v.regime << " " << v.output;
    // The recipe named for the regime is what makes it harmless where it is (the summary prints
    // its factor): within max(2× its twin's error, the floor); else the least harmful one.
    if (v.accum_bf16.harmless) {
      EXPECT_LE(v.accum_bf16.err, std::max(2.0 * v.accum_bf16.twin_err, v.floor))
          << v.regime << " " << v.output << " " << v.accum_bf16.recipe;
    }
    EXPECT_LE(v.err_reduced_accum_best, v.accum_bf16.err);
  }
}

// bf16 accumulation of the sum of exponentials over a vocabulary this large has no finite
// a-priori bound (c·u_accum ≥ 1): such a run is "measured", never "passed" — counted apart, its
// reason saying why, its letter M — while the bounded recipe of the same problem passes.
TEST(Audit, AnUnboundedRecipeIsMeasuredNotPassed) {
  const std::vector<audit::AuditProblem> set = wide_set();
  audit::AuditConfig cfg = small_config();
  cfg.recipes = {parse_recipe("bf16/fp32/fp32/bf16"), parse_recipe("bf16/fp32/bf16/bf16")};
  cfg.strategies = {"naive"};
  const auto res = audit::run_audit(set, cfg);
  ASSERT_EQ(res.runs.size(), 2u);
  for (const auto& r : res.runs) {
    const bool reduced = r.recipe.accum == DType::bf16;
    ASSERT_EQ(r.bound_meaningful, !reduced) << r.recipe.name() << ": " << r.bound_note;
    EXPECT_EQ(r.verdict.disposition, reduced ? Disposition::measured : Disposition::passed)
        << r.recipe.name() << ": " << r.verdict.reason;
    if (reduced) {
      EXPECT_NE(r.verdict.reason.find("measured, not judged: the recipe has no finite a-priori "
                                      "bound"),
                std::string::npos)
          << r.verdict.reason;
    }
  }
  EXPECT_EQ(res.passed, 1);
  EXPECT_EQ(res.measured, 1);
  const std::string s = audit::format_summary(res, false);
  EXPECT_NE(s.find("runs: 1 passed (within the finite a-priori bound of their recipe's "
                   "arithmetic), 1 measured"),
            std::string::npos)
      << s;
  // An audit of unbounded recipes only is an audit (it was refused as "nothing audited").
  cfg.recipes = {parse_recipe("bf16/fp32/bf16/bf16")};
  const auto only = audit::run_audit(set, cfg);
  EXPECT_EQ(only.measured, 1);
  EXPECT_NO_THROW(audit::require_some_run(only));
}

// The summary opens with the short answer, per output: in how many regimes bf16 logits may be used
// and in how many tested ones fp32 accumulation is needed, counted here from the verdict rows, as
// the verdict's closing lines count them; the Markdown opens with the same table.
TEST(Audit, SummaryOpensWithTheAnswerPerOutput) {
  const auto res = audit::run_audit(small_set(), small_config());
  ASSERT_FALSE(res.verdict.empty());
  const std::string s = audit::format_summary(res, false);
  ASSERT_EQ(s.rfind("ANSWER: \"logits may be bf16 while accumulation must be fp32\"", 0), 0u) << s;
  const std::string md = audit::format_summary(res, true);
  EXPECT_EQ(md.rfind("## Answer: ", 0), 0u) << md;
  const auto words = [](int k, int n) {
    if (n == 0) return std::string("untested");
    if (k == n) return fmt::format("yes (all {})", n);
    if (k == 0) return fmt::format("no (0 of {})", n);
    return fmt::format("in {} of {}", k, n);
  };
  const std::size_t answer_end = s.find("\n\n");
  for (const std::string out : {"loss", "dH", "dW"}) {
    int regimes = 0, ok = 0, tested = 0, needed = 0;
    for (const auto& v : res.verdict) {
      if (v.output != out) continue;
      ++regimes;
      ok += v.logits_bf16_ok;
      tested += v.accum_tested;
      needed += v.accum_fp32_needed;
    }
    ASSERT_GT(regimes, 0) << out;
    const std::string rule = ok != regimes     ? "REFUTED: bf16 logits cost accuracy somewhere"
                             : tested == 0     ? "UNTESTED"
                             : needed < tested ? "REFUTED: reduced accumulation was harmless"
                                               : "HOLDS";
    const std::string row = fmt::format("  {:<6} {:<20} {:<27} {}", out, words(ok, regimes),
                                        words(needed, tested), rule);
    const std::size_t at = s.find(row);
    EXPECT_LT(at, answer_end) << row << "\n" << s;
    // The closing line of the verdict gives the same counts.
    EXPECT_NE(s.find(fmt::format("  {}: logits may be bf16 in {}/{} regimes; accumulation must be "
                                 "fp32 in {}/{} tested",
                                 out, ok, regimes, needed, tested)),
              std::string::npos)
        << s;
    EXPECT_NE(md.find(fmt::format("| {} | {} | {} | {}", out, words(ok, regimes),
                                  words(needed, tested), rule)),
              std::string::npos)
        << md;
  }
  // The answer comes before the runs' table and the verdict's criteria.
  EXPECT_LT(answer_end, s.find("\nproblem "));
  EXPECT_LT(answer_end, s.find("VERDICT:"));
}

// An audit without both recipes the verdict compares (--recipes bf16/fp32/fp32/bf16 alone) says so
// in the answer and in the verdict, instead of printing the verdict's table header over no rows.
TEST(Audit, AVerdictWithoutRegimesSaysWhyInsteadOfAnEmptyTable) {
  audit::AuditConfig cfg = small_config();
  cfg.recipes = {parse_recipe("bf16/fp32/fp32/bf16")};
  cfg.strategies = {"naive"};
  const auto res = audit::run_audit(small_set(), cfg);
  ASSERT_TRUE(res.verdict.empty());
  for (const bool md : {false, true}) {
    const std::string s = audit::format_summary(res, md);
    const std::size_t verdict = s.find(md ? "## Verdict: " : "VERDICT: ");
    ASSERT_NE(verdict, std::string::npos) << s;
    EXPECT_NE(s.find("no regime: no problem ran both X/fp32/fp32/X and X/bf16/fp32/X", verdict),
              std::string::npos)
        << s;
    EXPECT_EQ(s.find(md ? "| regime | input |" : "fp32-lgt", verdict), std::string::npos) << s;
  }
}

// vocab_parallel runs only when named: the default audit leaves it out and records no ranks;
// named with 8 ranks over V = 507 (shards of 64 ×3 and 63 ×5) its runs pass, record the ranks and
// the shards' first rows, also in the results file; 0 ranks and more ranks than rows are refused.
TEST(Audit, VocabParallelRunsWhenNamedAndRecordsItsShards) {
  auto cfg = small_config();
  cfg.recipes = {parse_recipe("bf16/fp32/fp32/bf16")};
  const auto def = audit::run_audit(small_set(), cfg);
  ASSERT_FALSE(def.runs.empty());
  for (const auto& r : def.runs) {
    EXPECT_NE(r.strategy, "vocab_parallel");
    EXPECT_EQ(r.ranks, 0) << r.strategy;
    EXPECT_TRUE(r.shard_begins.empty()) << r.strategy;
  }
  cfg.strategies = {"vocab_parallel"};
  cfg.ranks = 8;
  const auto res = audit::run_audit(small_set(), cfg);
  ASSERT_EQ(res.runs.size(), 2u);
  const std::vector<std::int64_t> begins{0, 64, 128, 192, 255, 318, 381, 444};
  for (const auto& r : res.runs) {
    EXPECT_EQ(r.strategy, "vocab_parallel");
    EXPECT_EQ(r.verdict.disposition, Disposition::passed) << r.problem << ": " << r.verdict.reason;
    EXPECT_EQ(r.ranks, 8);
    EXPECT_EQ(r.shard_begins, begins);
    EXPECT_EQ(r.arith.vocab_ranks, 8);
  }
  const std::string path = temp_path("vocab-parallel.h5");
  std::filesystem::remove(path);
  audit::write_results(path, res, cfg, false, false);
  {
    const h5::File f = h5::File::open_read(path);
    for (const auto& id : f.open_group("runs").children()) {
      const h5::Group g = f.open_group("runs/" + id);
      EXPECT_EQ(g.attr_int("ranks"), 8);
      EXPECT_EQ(g.open_dataset("shard_begins").read_int64(), begins);
    }
  }
  std::filesystem::remove(path);
  for (const auto& [ranks, why] : std::vector<std::pair<std::int64_t, std::string>>{
           {0, "ranks must be at least 1 (got 0)"},
           {508, "ranks (508) exceed the vocabulary (507 rows)"}}) {
    cfg.ranks = ranks;
    try {
      (void)audit::run_audit(small_set(), cfg);
      ADD_FAILURE() << "ranks " << ranks << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

// vocab_chunked runs only when named: the default audit leaves it out and records no splits;
// named with 5 splits over V = 507 its runs pass, record the splits (run and declaration, with the
// rescaled cross-split sums), also in the results file; without --vocab-splits the audit's
// sub-batch takes one split; splits past the vocabulary are refused naming the problem.
TEST(Audit, VocabChunkedRunsWhenNamedAndRecordsItsSplits) {
  auto cfg = small_config();
  cfg.recipes = {parse_recipe("bf16/fp32/fp32/bf16"), parse_recipe("bf16/bf16/bf16/bf16")};
  const auto def = audit::run_audit(small_set(), cfg);
  for (const auto& r : def.runs) {
    EXPECT_NE(r.strategy, "vocab_chunked");
    EXPECT_EQ(r.vocab_splits, 0) << r.strategy;
  }
  cfg.strategies = {"vocab_chunked"};
  const auto one = audit::run_audit(small_set(), cfg);
  ASSERT_FALSE(one.runs.empty());
  for (const auto& r : one.runs) {
    EXPECT_EQ(r.vocab_splits, 1) << r.problem;
    EXPECT_FALSE(r.arith.rescaled_ranks) << r.problem;
  }
  cfg.vocab_splits = 5;
  const auto res = audit::run_audit(small_set(), cfg);
  ASSERT_EQ(res.runs.size(), 4u);
  for (const auto& r : res.runs) {
    EXPECT_EQ(r.strategy, "vocab_chunked");
    EXPECT_NE(r.verdict.disposition, Disposition::incorrect)
        << r.problem << ": " << r.verdict.reason;
    EXPECT_NE(r.verdict.disposition, Disposition::failed) << r.problem << ": " << r.verdict.reason;
    if (r.recipe.accum == DType::fp32) {
      EXPECT_EQ(r.verdict.disposition, Disposition::passed)
          << r.problem << ": " << r.verdict.reason;
    }
    EXPECT_EQ(r.vocab_splits, 5);
    EXPECT_EQ(r.arith.vocab_ranks, 5);
    EXPECT_TRUE(r.arith.rescaled_ranks);
    EXPECT_EQ(r.ranks, 0);
  }
  const std::string path = temp_path("vocab-chunked.h5");
  std::filesystem::remove(path);
  audit::write_results(path, res, cfg, false, false);
  {
    const h5::File f = h5::File::open_read(path);
    for (const auto& id : f.open_group("runs").children())
      EXPECT_EQ(f.open_group("runs/" + id).attr_int("vocab_splits"), 5);
  }
  std::filesystem::remove(path);
  cfg.vocab_splits = 508;
  try {
    (void)audit::run_audit(small_set(), cfg);
    ADD_FAILURE() << "508 splits of 507 rows accepted";
  } catch (const InputError& e) {
    EXPECT_NE(
        std::string(e.what()).find("vocabulary splits (508) exceed the vocabulary (507 rows)"),
        std::string::npos)
        << e.what();
  }
}

TEST(Audit, UnknownStrategyIsNamed) {
  auto cfg = small_config();
  cfg.strategies = {"warp-speed"};
  try {
    audit::run_audit(small_set(), cfg);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("warp-speed"), std::string::npos);
  }
}

}  // namespace
}  // namespace xentlab

namespace xentlab {
namespace {

TEST(Audit, RegressFindsADispositionThatGotWorse) {
  const std::string base = temp_path("base.h5"), cur = temp_path("cur.h5");
  std::filesystem::remove(base);
  std::filesystem::remove(cur);
  const auto cfg = small_config();
  const auto res = audit::run_audit(small_set(), cfg);
  audit::write_results(base, res, cfg, true, false);
  const auto same = audit::regress(base, base);
  EXPECT_EQ(same.regressions, 0);
  EXPECT_EQ(same.baseline_runs, static_cast<std::int64_t>(res.runs.size()));
  // A copy in which one passed run is marked incorrect, and one output moved beyond its bound.
  std::filesystem::copy_file(base, cur);
  {
    h5::File f = h5::File::open_rw(cur);
    const auto ids = f.open_group("runs").children();
    int changed = 0;
    for (const auto& id : ids) {
      h5::Group g = f.open_group("runs/" + id);
      if (g.attr_string("disposition") != "passed") continue;
      if (changed == 0) g.set_attr("disposition", "incorrect");
      if (changed == 1) {
        h5::Group loss = g.open_group("loss");
        if (loss.attr_double("max_ratio") <= 1.0) loss.set_attr("max_ratio", 3.0);
      }
      if (++changed == 2) break;
    }
    ASSERT_EQ(changed, 2);
    f.close();
  }
  const auto worse = audit::regress(base, cur);
  EXPECT_EQ(worse.regressions, 2);
  std::filesystem::remove(base);
  std::filesystem::remove(cur);
}

/// A copy of `src` at `dst` whose runs all claim `backend`; `edit` may change the copy's runs.
void copy_as_backend(const std::string& src, const std::string& dst, const std::string& backend,
                     const std::function<void(h5::File&)>& edit = {}) {
  std::filesystem::remove(dst);
  std::filesystem::copy_file(src, dst);
  h5::File f = h5::File::open_rw(dst);
  for (const auto& id : f.open_group("runs").children())
    f.open_group("runs/" + id).set_attr("backend", backend);
  if (edit) edit(f);
  f.close();
}

TEST(Audit, FidelityComparesTheEmulationWithADeviceRunByRun) {
  const std::string model = temp_path("model.h5"), dev = temp_path("device.h5");
  std::filesystem::remove(model);
  const auto cfg = small_config();
  const auto res = audit::run_audit(small_set(), cfg);
  audit::write_results(model, res, cfg, true, false);
  std::int64_t passed = 0;
  for (const auto& r : res.runs) passed += r.verdict.disposition == Disposition::passed ? 1 : 0;
  ASSERT_GT(passed, 0);

  // The same errors under another backend's name: every ratio is 1, nothing disagrees.
  copy_as_backend(model, dev, "cuda");
  const auto same = audit::compare_backends(model, dev);
  EXPECT_EQ(same.model_backend, "cpu-emulation");
  EXPECT_EQ(same.device_backend, "cuda");
  EXPECT_EQ(same.matched, passed);
  EXPECT_EQ(same.device_only, 0);
  EXPECT_EQ(same.model_only, 0);
  EXPECT_TRUE(same.disagreements.empty());
  ASSERT_FALSE(same.rows.empty());
  for (const auto& row : same.rows) {
    EXPECT_EQ(row.min, 1.0) << row.strategy << " " << row.output;
    EXPECT_EQ(row.max, 1.0) << row.strategy << " " << row.output;
  }

  // One device output 10× less accurate than modelled (above the floor), one 10× more accurate
  // but below the floor (8 units of its dtype): only the first disagrees.
  std::string changed;
  copy_as_backend(model, dev, "cuda", [&](h5::File& f) {
    int done = 0;
    for (const auto& id : f.open_group("runs").children()) {
      h5::Group g = f.open_group("runs/" + id);
      if (g.attr_string("disposition") != "passed") continue;
      h5::Group loss = g.open_group("loss");
      const double e = loss.attr_double("normwise_rel_err");
      const double floor = 8.0 * unit_roundoff(parse_dtype(loss.attr_string("out_dtype")));
      if (done == 0 && e > floor) {
        loss.set_attr("normwise_rel_err", 10.0 * e);
        changed = g.attr_string("problem") + " " + g.attr_string("input_dtype") + " " +
                  g.attr_string("strategy") + " " + g.attr_string("recipe");
        ++done;
      } else if (done == 1 && e > 0 && e < floor / 10.0) {
        loss.set_attr("normwise_rel_err", e / 10.0);
        ++done;
      }
      if (done == 2) break;
    }
    ASSERT_GE(done, 1);
  });
  const auto worse = audit::compare_backends(model, dev);
  ASSERT_EQ(worse.disagreements.size(), 1u);
  EXPECT_NE(worse.disagreements[0].find(changed + " loss"), std::string::npos)
      << worse.disagreements[0];
  EXPECT_NE(worse.disagreements[0].find("ratio 10"), std::string::npos) << worse.disagreements[0];
  // A wider factor accepts it.
  EXPECT_TRUE(audit::compare_backends(model, dev, 20.0).disagreements.empty());

  // A device run that is incorrect where the emulation passed disagrees too.
  copy_as_backend(model, dev, "cuda", [&](h5::File& f) {
    for (const auto& id : f.open_group("runs").children()) {
      h5::Group g = f.open_group("runs/" + id);
      if (g.attr_string("disposition") != "passed") continue;
      g.set_attr("disposition", std::string("incorrect"));
      break;
    }
  });
  const auto status = audit::compare_backends(model, dev);
  ASSERT_EQ(status.disagreements.size(), 1u);
  EXPECT_NE(status.disagreements[0].find("emulation passed, device incorrect"), std::string::npos)
      << status.disagreements[0];
  EXPECT_EQ(status.matched, passed - 1);

  auto expect_error = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "accepted; expected an error containing: " << what;
    } catch (const std::exception& e) {  // InputError or FormatError
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  // Both files of one backend, the files swapped, a factor below 1.
  expect_error([&] { (void)audit::compare_backends(model, model); },
               "both files hold CPU-emulation runs");
  copy_as_backend(model, dev, "cuda");
  expect_error([&] { (void)audit::compare_backends(dev, model); }, "wrong way round");
  EXPECT_THROW((void)audit::compare_backends(model, dev, 0.5), InputError);
  // A passed run whose error is not a number: a damaged file, named.
  copy_as_backend(model, dev, "cuda", [&](h5::File& f) {
    for (const auto& id : f.open_group("runs").children()) {
      h5::Group g = f.open_group("runs/" + id);
      if (g.attr_string("disposition") != "passed") continue;
      g.open_group("loss").set_attr("normwise_rel_err", std::nan(""));
      break;
    }
  });
  expect_error([&] { (void)audit::compare_backends(model, dev); }, "normwise_rel_err = nan");
  // The same names over different problems (another seed): refused, not compared.
  copy_as_backend(model, dev, "cuda", [&](h5::File& f) {
    for (const auto& id : f.open_group("runs").children())
      f.open_group("runs/" + id).set_attr("seed", std::int64_t{99});
  });
  expect_error([&] { (void)audit::compare_backends(model, dev); }, "seed 1 against 99");
  // No run in common: nothing compared is an error, not "nothing disagrees".
  copy_as_backend(model, dev, "cuda", [&](h5::File& f) {
    for (const auto& id : f.open_group("runs").children())
      f.open_group("runs/" + id).set_attr("problem", std::string("elsewhere"));
  });
  expect_error([&] { (void)audit::compare_backends(model, dev); }, "nothing to compare");
  // A file that mixes backends.
  copy_as_backend(model, dev, "cuda", [&](h5::File& f) {
    f.open_group("runs/" + f.open_group("runs").children().front())
        .set_attr("backend", std::string("cpu-emulation"));
  });
  try {
    (void)audit::compare_backends(model, dev);
    ADD_FAILURE() << "a file of two backends accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("two backends"), std::string::npos) << e.what();
  }
  // A disposition this xentlab never writes: a damaged or foreign file, named.
  copy_as_backend(model, dev, "cuda", [&](h5::File& f) {
    f.open_group("runs/" + f.open_group("runs").children().front())
        .set_attr("disposition", std::string("bogus"));
  });
  expect_error([&] { (void)audit::compare_backends(model, dev); }, "disposition 'bogus'");
  // A passed device run stripped of its outputs: not "passed on both, nothing disagrees".
  auto strip = [&](bool all) {
    copy_as_backend(model, dev, "cuda", [&](h5::File& f) {
      for (const auto& id : f.open_group("runs").children()) {
        h5::Group g = f.open_group("runs/" + id);
        if (g.attr_string("disposition") != "passed") continue;
        for (const auto& child : g.children()) {
          if (child != "loss_abs_err" && (all || child == "lse")) {
            ASSERT_GE(H5Ldelete(g.id(), child.c_str(), H5P_DEFAULT), 0);
          }
        }
        break;
      }
    });
  };
  strip(true);
  expect_error([&] { (void)audit::compare_backends(model, dev); },
               "a passed run without any output");
  // One output missing on the device side: a disagreement naming it.
  strip(false);
  const auto missing = audit::compare_backends(model, dev);
  ASSERT_EQ(missing.disagreements.size(), 1u);
  EXPECT_NE(missing.disagreements[0].find("lse: in the emulation's run only"), std::string::npos)
      << missing.disagreements[0];
  std::filesystem::remove(model);
  std::filesystem::remove(dev);
}

// A measured run has no bound to stay within: its error grown beyond 2× the baseline's is a
// regression (passed runs: a note, while within their bound).
TEST(Audit, RegressFlagsAMeasuredRunWhoseErrorGrew) {
  const std::vector<audit::AuditProblem> set = wide_set();
  audit::AuditConfig cfg = small_config();
  cfg.recipes = {parse_recipe("bf16/fp32/bf16/bf16")};
  cfg.strategies = {"naive"};
  const auto res = audit::run_audit(set, cfg);
  ASSERT_EQ(res.measured, 1);
  const std::string base = temp_path("mbase.h5"), cur = temp_path("mcur.h5");
  std::filesystem::remove(base);
  std::filesystem::remove(cur);
  audit::write_results(base, res, cfg, true, false);
  EXPECT_EQ(audit::regress(base, base).regressions, 0);
  std::filesystem::copy_file(base, cur);
  {
    h5::File f = h5::File::open_rw(cur);
    h5::Group loss = f.open_group("runs/" + f.open_group("runs").children().at(0) + "/loss");
    loss.set_attr("normwise_rel_err", 10.0 * loss.attr_double("normwise_rel_err"));
    f.close();
  }
  const auto r = audit::regress(base, cur);
  EXPECT_EQ(r.regressions, 1);
  bool named = false;
  for (const auto& l : r.lines) named = named || l.find("a measured run") != std::string::npos;
  EXPECT_TRUE(named);
  std::filesystem::remove(base);
  std::filesystem::remove(cur);
}

// regress compares two audits of one set on one backend: other problems under the same names, or
// two backends (no run in common), are refused instead of reported as "0 regressions" or as every
// run "missing now".
TEST(Audit, RegressRefusesDifferentProblemsAndBackends) {
  const std::string base = temp_path("rbase.h5"), other = temp_path("rother.h5");
  std::filesystem::remove(base);
  const auto cfg = small_config();
  audit::write_results(base, audit::run_audit(small_set(), cfg), cfg, true, false);
  copy_as_backend(base, other, "cpu-emulation", [&](h5::File& f) {
    for (const auto& id : f.open_group("runs").children())
      f.open_group("runs/" + id).set_attr("seed", std::int64_t{7});
  });
  try {
    (void)audit::regress(base, other);
    ADD_FAILURE() << "runs of another seed compared";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("seed 1 against 7"), std::string::npos) << e.what();
  }
  copy_as_backend(base, other, "cuda");
  try {
    (void)audit::regress(base, other);
    ADD_FAILURE() << "files of two backends compared";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("share no run"), std::string::npos) << e.what();
  }
  std::filesystem::remove(base);
  std::filesystem::remove(other);
}

// vocab_chunked runs of another number of splits are another arithmetic: regress refuses to
// compare them, naming both numbers.
TEST(Audit, RegressRefusesVocabChunkedRunsOfOtherSplits) {
  const std::string base = temp_path("rvc.h5"), other = temp_path("rvc-other.h5");
  std::filesystem::remove(base);
  auto cfg = small_config();
  cfg.recipes = {parse_recipe("bf16/fp32/fp32/bf16")};
  cfg.strategies = {"vocab_chunked"};
  cfg.vocab_splits = 2;
  audit::write_results(base, audit::run_audit(small_set(), cfg), cfg, true, false);
  EXPECT_EQ(audit::regress(base, base).regressions, 0);
  copy_as_backend(base, other, "cpu-emulation", [&](h5::File& f) {
    for (const auto& id : f.open_group("runs").children())
      f.open_group("runs/" + id).set_attr("vocab_splits", std::int64_t{3});
  });
  try {
    (void)audit::regress(base, other);
    ADD_FAILURE() << "runs of another number of splits compared";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary splits 2 against 3 (--vocab-splits)"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(base);
  std::filesystem::remove(other);
}

// --append of vocab_chunked runs in another number of splits than the file's runs of the same key
// is refused before the work (check_append_problems, from the splits the audit will take) and when
// writing, naming both numbers, and the file keeps its runs; the same splits, given or taken by
// default (one split at these sub-batches), are appended.
TEST(Audit, AppendRefusesVocabChunkedRunsOfOtherSplits) {
  const std::string path = temp_path("append-vc.h5");
  std::filesystem::remove(path);
  auto cfg = small_config();
  cfg.recipes = {parse_recipe("bf16/fp32/fp32/bf16")};
  cfg.strategies = {"vocab_chunked"};
  cfg.vocab_splits = 3;
  const auto three = audit::run_audit(small_set(), cfg);
  audit::write_results(path, three, cfg, false, false);
  EXPECT_NO_THROW(audit::check_append_problems(path, small_set(), cfg));
  auto other = cfg;
  other.vocab_splits = 5;
  for (std::int64_t given : {std::int64_t{5}, std::int64_t{0}}) {
    other.vocab_splits = given;
    const std::string want = fmt::format(
        "--append: the file holds vocab_chunked runs of problem calibrated.bf16 "
        "(bf16/fp32/fp32/bf16) in 3 vocabulary splits, this audit's take {} (--vocab-splits {})",
        given == 0 ? 1 : given, given);
    try {
      audit::check_append_problems(path, small_set(), other);
      ADD_FAILURE() << "runs of another number of splits accepted before the work: " << given;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    try {
      audit::write_results(path, audit::run_audit(small_set(), other), other, false, true);
      ADD_FAILURE() << "runs of another number of splits appended: " << given;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  {
    const h5::File f = h5::File::open_read(path);
    EXPECT_EQ(f.open_group("runs").children().size(), three.runs.size());
  }
  // Runs of a strategy that does not split the vocabulary, and the same splits again, append.
  auto plain = cfg;
  plain.strategies = {"naive"};
  plain.vocab_splits = 0;
  EXPECT_NO_THROW(audit::check_append_problems(path, small_set(), plain));
  EXPECT_NO_THROW(
      audit::write_results(path, audit::run_audit(small_set(), plain), plain, false, true));
  EXPECT_NO_THROW(audit::write_results(path, three, cfg, false, true));
  std::filesystem::remove(path);
  // One split by default at these sub-batches: --vocab-splits 1 is the same arithmetic.
  auto def = cfg;
  def.vocab_splits = 0;
  audit::write_results(path, audit::run_audit(small_set(), def), def, false, false);
  auto one = cfg;
  one.vocab_splits = 1;
  EXPECT_NO_THROW(audit::check_append_problems(path, small_set(), one));
  EXPECT_NO_THROW(audit::write_results(path, audit::run_audit(small_set(), one), one, false, true));
  std::filesystem::remove(path);
}

// vocab_parallel runs of another number of ranks are another arithmetic: regress refuses to
// compare them, naming both numbers.
TEST(Audit, RegressRefusesVocabParallelRunsOfOtherRanks) {
  const std::string base = temp_path("rvp.h5"), other = temp_path("rvp-other.h5");
  std::filesystem::remove(base);
  auto cfg = small_config();
  cfg.recipes = {parse_recipe("bf16/fp32/fp32/bf16")};
  cfg.strategies = {"vocab_parallel"};
  cfg.ranks = 2;
  audit::write_results(base, audit::run_audit(small_set(), cfg), cfg, true, false);
  EXPECT_EQ(audit::regress(base, base).regressions, 0);
  copy_as_backend(base, other, "cpu-emulation", [&](h5::File& f) {
    for (const auto& id : f.open_group("runs").children())
      f.open_group("runs/" + id).set_attr("ranks", std::int64_t{3});
  });
  try {
    (void)audit::regress(base, other);
    ADD_FAILURE() << "runs of another number of ranks compared";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 2 against 3 (--ranks)"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(base);
  std::filesystem::remove(other);
}

}  // namespace
}  // namespace xentlab
