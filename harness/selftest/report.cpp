// The selftest's report (harness/selftest/selftest.hpp): the confusion matrix and the table as
// text, and the JSON file.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "datasets/io/atomic_file.hpp"
#include "harness/selftest/selftest.hpp"
#include "numerics/error.hpp"

namespace xentlab::selftest {

std::string format_result(const SelftestResult& r) {
  std::string s;
  for (const std::string& g : r.goldens) s += fmt::format("golden     {}\n", g);
  for (const std::string& n : r.notes) s += fmt::format("note       {}\n", n);
  s += fmt::format("\n{:<42} {:<18} {:<20} {:<8} {:<7} {:<30} {}\n", "candidate", "golden",
                   "policy", "expected", "verdict", "deciding output", "reason");
  for (const SelftestEntry& e : r.entries)
    s += fmt::format("{:<42} {:<18} {:<20} {:<8} {:<7} {:<30} {}{}\n",
                     (e.fault ? "fault: " : "") + e.name, e.golden, e.policy,
                     e.expect_pass ? "pass" : "fail", e.verdict,
                     e.deciding.empty() ? "-" : e.deciding,
                     e.as_expected()              ? ""
                     : e.below_resolution.empty() ? "UNEXPECTED: "
                                                  : "NOT RESOLVED: " + e.below_resolution + "; ",
                     e.reason);
  const SelftestMatrix m = r.matrix();
  const int correct = m.correct_passed + m.correct_inconclusive + m.correct_failed;
  const int faults =
      m.faults_caught + m.faults_inconclusive + m.faults_missed + m.faults_below_resolution;
  s += fmt::format(
      "\nconfusion matrix          verdict passed   verdict failed   inconclusive\n"
      "  correct candidates      {:>14}   {:>14}   {:>12}\n"
      "  faulty candidates       {:>14}   {:>14}   {:>12}\n"
      "correct candidates passed {} of {}{}; faults caught {} of {}{}\n",
      m.correct_passed, m.correct_failed, m.correct_inconclusive,
      m.faults_missed + m.faults_below_resolution, m.faults_caught, m.faults_inconclusive,
      m.correct_passed, correct,
      m.correct_inconclusive > 0
          ? fmt::format(" ({} inconclusive: their golden problem cannot tell the output from a "
                        "wrong one, not a rejection)",
                        m.correct_inconclusive)
          : "",
      m.faults_caught, faults,
      m.faults_below_resolution > 0
          ? fmt::format(" ({} below this problem's resolution)", m.faults_below_resolution)
          : "");
  if (m.faults_missed + m.faults_inconclusive > 0) {
    s += "missed faults:";
    for (const SelftestEntry& e : r.entries)
      if (e.fault && !e.as_expected() && e.below_resolution.empty())
        s += fmt::format(" [{}]", e.name);
    s += "\n";
  }
  if (m.faults_below_resolution > 0) {
    s += "faults below this problem's resolution (within the recipe's own error here):";
    for (const SelftestEntry& e : r.entries)
      if (!e.below_resolution.empty()) s += fmt::format(" [{}]", e.name);
    s += "\n";
  }
  if (m.correct_failed > 0) {
    s += "correct candidates failed:";
    for (const SelftestEntry& e : r.entries)
      if (!e.fault && !e.as_expected() && e.verdict != "inconclusive")
        s += fmt::format(" [{} on {}]", e.name, e.golden);
    s += "\n";
  }
  s += fmt::format("selftest   {}\n",
                   r.ok()                ? "PASSED: every fault caught, no correct candidate failed"
                   : r.unresolved_only() ? "INCONCLUSIVE: every fault this problem resolves was "
                                           "caught and no correct candidate failed; the others "
                                           "need a larger problem (more tokens)"
                                         : "FAILED");
  return s;
}

void write_result_json(const std::string& path, bool force, const SelftestResult& r) {
  AtomicOutput out(path, force);
  const SelftestMatrix m = r.matrix();
  nlohmann::json j;
  j["format"] = "xentlab-selftest";
  j["goldens"] = r.goldens;
  j["notes"] = r.notes;
  j["matrix"] = {{"correct_passed", m.correct_passed},
                 {"correct_failed", m.correct_failed},
                 {"correct_inconclusive", m.correct_inconclusive},
                 {"faults_caught", m.faults_caught},
                 {"faults_missed", m.faults_missed},
                 {"faults_inconclusive", m.faults_inconclusive},
                 {"faults_below_resolution", m.faults_below_resolution}};
  j["passed"] = r.ok();
  j["verdict"] = r.ok() ? "passed" : r.unresolved_only() ? "inconclusive" : "failed";
  nlohmann::json entries = nlohmann::json::array();
  for (const SelftestEntry& e : r.entries)
    entries.push_back({{"name", e.name},
                       {"fault", e.fault},
                       {"description", e.description},
                       {"golden", e.golden},
                       {"policy", e.policy},
                       {"expected", e.expect_pass ? "pass" : "fail"},
                       {"verdict", e.verdict},
                       {"as_expected", e.as_expected()},
                       {"deciding", e.deciding},
                       {"failing", e.failing},
                       {"reason", e.reason},
                       {"below_resolution", e.below_resolution},
                       {"seconds", e.seconds}});
  j["entries"] = entries;
  {
    std::ofstream f(out.temp_path());
    f << j.dump(2) << "\n";
    if (!f.flush()) throw OutputError(fmt::format("{}: the write failed", out.temp_path()));
  }
  out.commit();
}

}  // namespace xentlab::selftest
