#pragma once
// Device memory of the CUDA strategies: ONE tracking allocator and an RAII buffer on top of it.
//
// Every device allocation a strategy makes goes through a DeviceMemoryTracker, tagged as either
//   io    — inputs (H, W, bias, targets, given logits) and outputs (loss, lse, dH, dW, db, dz) at
//           their own dtypes, which any implementation must hold, or
//   extra — everything else: logits chunks, fp32 temporaries and accumulators, upcast copies,
//           the cuBLAS workspace (set explicitly with cublasSetWorkspace so that it is counted).
// peak_extra() is the largest number of extra bytes alive at once: the "peak extra device memory"
// that StrategyOutputs::peak_extra_bytes and the benchmark report. Sizes are bytes (int64).
//
// Caching (off by default; the benchmark turns it on): a released block is kept and handed out
// again for an allocation of exactly the same size, as a framework's caching allocator would, so
// repeated runs do not time cudaMalloc/cudaFree. Cached blocks do not count as extra bytes.
//
// Errors: a failed cudaMalloc throws DeviceError naming what was being allocated, its size, and the
// free/total device memory at that moment.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpu/cuda/common/cuda_check.hpp"

namespace xentlab::gpu {

enum class MemKind : std::uint8_t { io, extra };

class DeviceMemoryTracker {
 public:
  DeviceMemoryTracker() = default;
  DeviceMemoryTracker(const DeviceMemoryTracker&) = delete;
  DeviceMemoryTracker& operator=(const DeviceMemoryTracker&) = delete;
  ~DeviceMemoryTracker() { release_cache(); }

  /// Keep released blocks for reuse by same-size allocations (see the file comment).
  void set_caching(bool on) {
    caching_ = on;
    if (!on) release_cache();
  }
  /// Frees every cached block.
  void release_cache() noexcept {
    for (auto& b : cache_) (void)cudaFree(b.first);
    cache_.clear();
  }

  /// Allocates `bytes` (≥ 0; 0 gives nullptr) with cudaMalloc. Throws DeviceError on failure.
  void* allocate(std::int64_t bytes, MemKind kind, const char* what) {
    if (bytes <= 0) return nullptr;
    void* p = nullptr;
    for (std::size_t i = 0; i < cache_.size(); ++i)
      if (cache_[i].second == bytes) {
        p = cache_[i].first;
        cache_.erase(cache_.begin() + static_cast<std::ptrdiff_t>(i));
        count(bytes, kind);
        return p;
      }
    cudaError_t e = cudaMalloc(&p, static_cast<std::size_t>(bytes));
    if (e != cudaSuccess && !cache_.empty()) {
      (void)cudaGetLastError();
      release_cache();
      e = cudaMalloc(&p, static_cast<std::size_t>(bytes));
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free allocation error
      std::size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      throw DeviceError(std::string("cudaMalloc of ") + std::to_string(bytes) + " bytes for " +
                        what + " failed: " + cudaGetErrorName(e) + " (free " +
                        std::to_string(free_b) + " of " + std::to_string(total_b) + " bytes)");
    }
    count(bytes, kind);
    return p;
  }
  /// Frees an allocation made by allocate() with the same size and kind. Never throws.
  void release(void* p, std::int64_t bytes, MemKind kind) noexcept {
    if (p == nullptr) return;
    if (caching_)
      cache_.emplace_back(p, bytes);
    else
      (void)cudaFree(p);
    if (kind == MemKind::extra)
      extra_ -= bytes;
    else
      io_ -= bytes;
  }
  std::int64_t peak_extra() const { return peak_extra_; }
  std::int64_t current_extra() const { return extra_; }
  std::int64_t current_io() const { return io_; }
  /// Starts a new measurement window: the peak becomes the bytes alive now.
  void reset_peak() { peak_extra_ = extra_; }

 private:
  void count(std::int64_t bytes, MemKind kind) {
    if (kind == MemKind::extra) {
      extra_ += bytes;
      if (extra_ > peak_extra_) peak_extra_ = extra_;
    } else {
      io_ += bytes;
    }
  }
  std::int64_t extra_ = 0, peak_extra_ = 0, io_ = 0;
  bool caching_ = false;
  std::vector<std::pair<void*, std::int64_t>> cache_;
};

/// Owning device allocation of `bytes` bytes, registered with a tracker (which must outlive it).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceMemoryTracker& t, std::int64_t bytes, MemKind kind, const char* what)
      : t_(&t), bytes_(bytes), kind_(kind), p_(t.allocate(bytes, kind, what)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }

  void reset() noexcept {
    if (t_ != nullptr) t_->release(p_, bytes_, kind_);
    t_ = nullptr;
    p_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  std::int64_t bytes() const { return bytes_; }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(t_, o.t_);
    std::swap(bytes_, o.bytes_);
    std::swap(kind_, o.kind_);
    std::swap(p_, o.p_);
  }
  DeviceMemoryTracker* t_ = nullptr;
  std::int64_t bytes_ = 0;
  MemKind kind_ = MemKind::extra;
  void* p_ = nullptr;
};

}  // namespace xentlab::gpu
