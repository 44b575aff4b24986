#pragma once
// Host memory: what is available to this process, and a command's estimate of what it will hold,
// checked against a budget before any work (every command's --memory-budget).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xentlab {

/// The memory available to this process in bytes: MemAvailable of /proc/meminfo (else the
/// physical memory, sysconf), or a cgroup v2 limit less its usage where that is smaller.
std::int64_t available_memory_bytes();

/// The resident memory of this process now in bytes (VmRSS of /proc/self/status; 0 where it
/// cannot be read).
std::int64_t resident_memory_bytes();

/// Work buffers of the libraries and threads a command starts after its estimate is made (BLAS
/// and OpenMP per-thread buffers, HDF5 caches, allocator arenas), not itemized by the estimates.
/// Measured on the audit's blocked given-logits path (2 cores, budgets of 2, 3 and 5 GiB): the
/// peak exceeded the itemized terms by 0.15 GiB at every block size, about what the process held
/// before the work (its resident memory at planning less the problems: 0.17 GiB), which the
/// audit's estimate now counts; this allowance is the margin above that.
inline constexpr double kLibraryBuffersBytes = 64.0 * (1 << 20);

/// An estimate of the peak resident memory of a piece of work, in bytes, as named terms
/// ("reference (dz and its bound)", …) whose sum is the estimate. Terms are bytes ≥ 0.
struct MemoryEstimate {
  std::vector<std::pair<std::string, double>> terms;
  void add(std::string name, double bytes) { terms.emplace_back(std::move(name), bytes); }
  double total() const;
  /// "12.3 GiB: dataset 8.0 GiB, reference 3.1 GiB, …" (the terms of at least 1 % of the total,
  /// largest first; the others summed as "other").
  std::string describe() const;
};

/// The machine's memory in bytes: the physical memory (sysconf), or a cgroup v2 limit where that
/// is smaller; 0 where neither can be read.
std::int64_t physical_memory_bytes();
/// The swap space in bytes: SwapTotal of /proc/meminfo, or a cgroup v2 swap limit where smaller.
std::int64_t swap_bytes();

/// The budget of a command: `given` bytes when > 0, else the memory available now.
struct MemoryBudget {
  std::int64_t bytes = 0;
  bool given = false;
  /// Throws InputError for given < 0, and for a given budget beyond physical_memory_bytes() +
  /// swap_bytes() (the kernel would stop the command first), naming both.
  static MemoryBudget from(std::int64_t given);
  /// "60.00 GiB (as given)" or "… (the memory available now)".
  std::string describe() const;
};

/// Throws InputError when the estimate exceeds the budget, before any work: "<what> would hold
/// an estimated … GiB (terms) but the memory budget is … GiB (source): <remedy>".
void check_memory_estimate(const MemoryEstimate& estimate, const MemoryBudget& budget,
                           const std::string& what, const std::string& remedy);

/// Bytes in GiB with two decimals ("8.00 GiB").
std::string gib(double bytes);

}  // namespace xentlab
