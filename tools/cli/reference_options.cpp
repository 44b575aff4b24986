#include "tools/cli/reference_options.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "numerics/error.hpp"

namespace xentlab::cli {

void add_reference_options(CLI::App* cmd, ReferenceChoice& choice) {
  cmd->add_option("--reference", choice.tier,
                  "reference tier: auto (cuda where a GPU is present, else blas), compensated "
                  "(tightest bounds, small problems), blas (fp64 GEMM on the system BLAS), cuda")
      ->capture_default_str();
  cmd->add_option("--memory-budget", choice.memory_budget,
                  "memory the reference may use, in bytes or with K/M/G/T (default: the memory "
                  "available now); a problem that needs more is refused before any work");
}

void apply_reference_choice(const ReferenceChoice& choice, ReferenceOptions& options) {
  try {
    options.tier = parse_reference_tier(choice.tier);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--reference: {}", e.what()));
  }
  if (choice.memory_budget.empty()) return;
  const std::string& s = choice.memory_budget;
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  double scale = 1;
  std::string suffix = s.substr(used);
  if (suffix == "K" || suffix == "KiB") scale = 1024.0;
  else if (suffix == "M" || suffix == "MiB") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!suffix.empty()) used = 0;
  const double bytes = v * scale;
  if (used == 0 || !std::isfinite(bytes) || bytes < 1 || bytes > 9.0e18)
    throw InputError(fmt::format(
        "--memory-budget '{}': expected a positive number of bytes, optionally with K, M, G or T "
        "(powers of 1024), e.g. 12G",
        s));
  options.max_bytes = static_cast<std::int64_t>(bytes);
}

std::function<void(std::int64_t, std::int64_t)> progress_printer(std::string what) {
  struct State {
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now(), last{};
    bool printed = false;
  };
  auto st = std::make_shared<State>();
  return [st, what = std::move(what)](std::int64_t done, std::int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    const double el = std::chrono::duration<double>(now - st->t0).count();
    const bool end = done >= total;
    if (el < 2.0 && !st->printed) return;
    if (!end && std::chrono::duration<double>(now - st->last).count() < 0.5) return;
    st->last = now;
    const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const double eta = frac > 0 ? el * (1.0 - frac) / frac : 0.0;
    std::fprintf(stderr, "\r%s: rows %lld/%lld (%.0f%%), elapsed %.0f s, ETA %.0f s%s", what.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total), 100.0 * frac, el, eta,
                 end ? "\n" : "");
    std::fflush(stderr);
    st->printed = true;
  };
}

}  // namespace xentlab::cli
