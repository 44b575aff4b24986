#pragma once
// HostArray: the std::vector of the lab's large arrays: the reference's outputs (dz, dH, dW and
// their bounds and condition quantities), a run's gradients and the bounds a run is judged by, up
// to 4.2 GB each for the Llama-3-8B head. A plain std::vector<double>
// of that size spends seconds zero-filling fresh 4 KiB pages one by one on one thread; this
// allocator takes transparent huge pages where the kernel offers them (madvise) and zero-fills
// the memory once, in parallel, when it is allocated.
//
// Default construction writes nothing: the elements a resize adds read as zero because the memory
// was zeroed when it was allocated. One difference from std::vector<T>: shrinking and then growing
// again without a reallocation (resize down, then up, or clear then resize) brings back the old
// values instead of zeros — assign(n, 0) where that matters. Destruction writes nothing either.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

namespace xentlab {

/// `bytes` zeroed bytes: calloc below one huge page; above, huge-page aligned, advised as huge
/// pages and zeroed (so faulted in) in parallel by OpenMP threads (numerics/host_array.cpp,
/// compiled with OpenMP whatever the including code is compiled with). Throws std::bad_alloc. Freed
/// with std::free.
void* host_array_allocate(std::size_t bytes);

template <class T>
struct HostArrayAllocator {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_default_constructible_v<T>,
                "HostArray holds plain numbers only");
  using value_type = T;
  HostArrayAllocator() = default;
  template <class U>
  HostArrayAllocator(const HostArrayAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_alloc();
    return static_cast<T*>(host_array_allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }

  /// Default construction: the slot is already zero (allocate).
  template <class U>
  void construct(U*) noexcept {}
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  void destroy(U*) noexcept {}
};

template <class T, class U>
bool operator==(const HostArrayAllocator<T>&, const HostArrayAllocator<U>&) noexcept {
  return true;
}
template <class T, class U>
bool operator!=(const HostArrayAllocator<T>&, const HostArrayAllocator<U>&) noexcept {
  return false;
}

/// A std::vector whose growth zero-fills in parallel (see above).
template <class T>
using HostArray = std::vector<T, HostArrayAllocator<T>>;

}  // namespace xentlab
