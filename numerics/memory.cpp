// Host memory available, and the estimate check (memory.hpp).
#include "numerics/memory.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "numerics/error.hpp"

namespace xentlab {
namespace {

long long read_number(const char* path) {
  long long v = -1;
  if (std::FILE* f = std::fopen(path, "r")) {
    if (std::fscanf(f, "%lld", &v) != 1) v = -1;  // "max": no limit
    std::fclose(f);
  }
  return v;
}

// A field of /proc/meminfo ("MemAvailable", "SwapTotal") in bytes; -1 where it cannot be read.
std::int64_t meminfo_bytes(const char* field) {
  long long kb = -1;
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    const std::string pattern = std::string(field) + ": %lld kB";
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, pattern.c_str(), &kb) == 1) break;
    std::fclose(f);
  }
  return kb >= 0 ? static_cast<std::int64_t>(kb) * 1024 : -1;
}

}  // namespace

std::int64_t available_memory_bytes() {
  const std::int64_t meminfo = meminfo_bytes("MemAvailable");
  std::int64_t avail = meminfo > 0 ? meminfo : -1;
  if (avail < 0) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    avail = pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : std::int64_t{8} << 30;
  }
  // A container's memory limit (cgroup v2) can be far below what the machine has.
  const long long limit = read_number("/sys/fs/cgroup/memory.max");
  const long long used = read_number("/sys/fs/cgroup/memory.current");
  if (limit > 0 && used >= 0) avail = std::min<std::int64_t>(avail, std::max(0LL, limit - used));
  return avail;
}

std::int64_t resident_memory_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %lld kB", &kb) == 1) break;
  std::fclose(f);
  return kb > 0 ? static_cast<std::int64_t>(kb) * 1024 : 0;
}

std::string gib(double bytes) {
  return fmt::format("{:.2f} GiB", bytes / double(std::int64_t{1} << 30));
}

double MemoryEstimate::total() const {
  double t = 0;
  for (const auto& [name, b] : terms) t += b;
  return t;
}

std::string MemoryEstimate::describe() const {
  const double tot = total();
  std::vector<std::pair<std::string, double>> sorted = terms;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string s;
  double other = 0;
  for (const auto& [name, b] : sorted) {
    if (b < 0.01 * tot) {
      other += b;
      continue;
    }
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", name, gib(b));
  }
  if (other > 0) s += fmt::format("{}other {}", s.empty() ? "" : ", ", gib(other));
  return fmt::format("{} ({:.0f} bytes): {}", gib(tot), tot, s);
}

std::int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  std::int64_t total = pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : 0;
  const long long limit = read_number("/sys/fs/cgroup/memory.max");
  if (limit > 0 && (total == 0 || limit < total)) total = limit;
  return total;
}

std::int64_t swap_bytes() {
  std::int64_t swap = std::max<std::int64_t>(meminfo_bytes("SwapTotal"), 0);
  const long long limit = read_number("/sys/fs/cgroup/memory.swap.max");  // -1: "max" or none
  if (limit >= 0) swap = std::min<std::int64_t>(swap, limit);
  return swap;
}

MemoryBudget MemoryBudget::from(std::int64_t given) {
  if (given < 0)
    throw InputError(
        fmt::format("memory budget must be >= 0 bytes (0 = the available memory), got {}", given));
  // A budget beyond the machine's memory and swap is no budget: the kernel would kill the command
  // before it reached it (exit 137, no message), which the budget exists to prevent.
  const std::int64_t physical = physical_memory_bytes();
  const std::int64_t most = physical > 0 ? physical + swap_bytes() : 0;
  if (given > 0 && most > 0 && given > most)
    throw InputError(fmt::format(
        "memory budget {} ({} bytes) exceeds this machine's memory and swap, {} ({} bytes{}): give "
        "at most that, or 0 for the memory available now",
        gib(static_cast<double>(given)), given, gib(static_cast<double>(most)), most,
        read_number("/sys/fs/cgroup/memory.max") == physical ? ", the container's limit" : ""));
  MemoryBudget b;
  b.given = given > 0;
  b.bytes = b.given ? given : available_memory_bytes();
  return b;
}

std::string MemoryBudget::describe() const {
  return fmt::format("{} ({} bytes, {})", gib(static_cast<double>(bytes)), bytes,
                     given ? "as given" : "the memory available now");
}

void check_memory_estimate(const MemoryEstimate& estimate, const MemoryBudget& budget,
                           const std::string& what, const std::string& remedy) {
  if (estimate.total() <= static_cast<double>(budget.bytes)) return;
  throw InputError(fmt::format(
      "{} would hold an estimated {} but the memory budget is {}: refused before any work; {}",
      what, estimate.describe(), budget.describe(), remedy));
}

}  // namespace xentlab
