// The zeroed allocation behind HostArray (numerics/host_array.hpp).
#include "numerics/host_array.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#ifndef _OPENMP
#error "numerics/host_array.cpp zeroes in parallel: compile it with OpenMP"
#endif

namespace xentlab {

void* host_array_allocate(std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;  // one transparent huge page
  if (bytes < kHuge) {
    void* p = std::calloc(bytes > 0 ? bytes : 1, 1);
    if (!p) throw std::bad_alloc();
    return p;
  }
  const std::size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without THP the pages stay 4 KiB
#endif
  // Zero (and so fault in) the pages in parallel, in huge-page-sized pieces.
  const auto pieces = static_cast<std::int64_t>(rounded / kHuge);
  auto* c = static_cast<unsigned char*>(p);
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < pieces; ++k) std::memset(c + k * kHuge, 0, kHuge);
  return p;
}

}  // namespace xentlab
