#include "cli/options/reference.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "harness/text.hpp"
#include "numerics/error.hpp"
#include "numerics/memory.hpp"
#include "numerics/no_device.hpp"

namespace xentlab::cli {

void add_memory_budget_option(CLI::App* cmd, std::string& value) {
  cmd->add_option("--memory-budget", value,
                  "host memory the command may hold: bytes, or with a unit (K/M/G/T and "
                  "KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000); default or 0: the "
                  "memory available now. Work whose estimate exceeds it is refused before it "
                  "starts (exit 2)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v.find_first_not_of(" \t") == std::string::npos
                       ? "'" + v + "' is not a memory size: give one, or leave the option out"
                       : std::string();
          },
          "", "nonempty"));
}

std::int64_t parse_memory_budget(const std::string& value) {
  if (value.empty()) return 0;
  try {
    const std::int64_t bytes = parse_bytes(value);  // 0: the available memory
    MemoryBudget::from(bytes);  // refuses a budget beyond the machine's memory, before any work
    return bytes;
  } catch (const InputError& e) {
    throw InputError(fmt::format("--memory-budget: {}", e.what()));
  }
}

void add_reference_options(CLI::App* cmd, ReferenceChoice& choice) {
  cmd->add_option("--reference", choice.tier,
                  "reference tier: auto (cuda where a GPU is present, else blas), compensated "
                  "(tightest bounds, small problems), blas (fp64 GEMM on the system BLAS), cuda")
      ->capture_default_str();
  add_memory_budget_option(cmd, choice.memory_budget);
}

void apply_reference_choice(const ReferenceChoice& choice, ReferenceOptions& options) {
  try {
    options.tier = parse_reference_tier(choice.tier);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--reference: {}", e.what()));
  }
  std::string why;
  if (options.tier == ReferenceTier::cuda && !cuda_reference_available(&why))
    throw NoDeviceError("--reference cuda: the cuda reference tier is not available: " + why);
  options.max_bytes = parse_memory_budget(choice.memory_budget);
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
    std::fprintf(stderr, "\r%s: rows %lld/%lld (%.0f%%), elapsed %.0f s, ETA %.0f s%s",
                 what.c_str(), static_cast<long long>(done), static_cast<long long>(total),
                 100.0 * frac, el, eta, end ? "\n" : "");
    std::fflush(stderr);
    st->printed = true;
  };
}

}  // namespace xentlab::cli
