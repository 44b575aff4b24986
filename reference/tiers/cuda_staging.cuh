#pragma once
// The host side of the cuda tier's transfers (cuda.cu, its only includer): pinned staging of the
// device → host copies, a CUDA event owned for its scope, and the stage clock of
// XENTLAB_REFERENCE_TIMINGS.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "reference/tiers/cuda_support.cuh"

namespace xentlab {
namespace {

// Device → host copies of the large outputs through two pinned staging buffers: the DMA of one
// piece overlaps the parallel memcpy of the previous one into the (pageable) destination.
class HostCopier {
 public:
  static constexpr std::size_t kPiece = std::size_t{128} << 20;
  HostCopier() {
    for (int k = 0; k < 2; ++k) {
      check(cudaMallocHost(&buf_[k], kPiece), "pinned staging buffer");
      check(cudaEventCreateWithFlags(&done_[k], cudaEventDisableTiming), "event");
    }
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "copy stream");
  }
  ~HostCopier() {
    for (int k = 0; k < 2; ++k) {
      cudaFreeHost(buf_[k]);
      cudaEventDestroy(done_[k]);
    }
    cudaStreamDestroy(stream_);
  }
  HostCopier(const HostCopier&) = delete;
  HostCopier& operator=(const HostCopier&) = delete;

  void copy(void* dst, const void* src, std::size_t bytes, const char* what) {
    copy_after(nullptr, dst, src, bytes, what);
  }
  // The same once `ready` (an event recorded after the producers of src) has happened; without
  // one, once the whole device is idle. The work queued after the event runs on meanwhile.
  void copy_after(cudaEvent_t ready, void* dst, const void* src, std::size_t bytes,
                  const char* what) {
    if (ready)
      check(cudaStreamWaitEvent(stream_, ready, 0), what);
    else
      check(cudaDeviceSynchronize(), what);  // the producers of src ran on the default stream
    auto* d = static_cast<unsigned char*>(dst);
    const auto* sd = static_cast<const unsigned char*>(src);
    const std::size_t pieces = (bytes + kPiece - 1) / kPiece;
    auto issue = [&](std::size_t p) {
      const std::size_t off = p * kPiece, n = std::min(kPiece, bytes - off);
      check(cudaMemcpyAsync(buf_[p % 2], sd + off, n, cudaMemcpyDeviceToHost, stream_), what);
      check(cudaEventRecord(done_[p % 2], stream_), what);
    };
    if (pieces > 0) issue(0);
    for (std::size_t p = 0; p < pieces; ++p) {
      check(cudaEventSynchronize(done_[p % 2]), what);
      if (p + 1 < pieces) issue(p + 1);
      const std::size_t off = p * kPiece, n = std::min(kPiece, bytes - off);
      const auto* from = static_cast<const unsigned char*>(buf_[p % 2]);
      const std::int64_t lines = static_cast<std::int64_t>((n + (1 << 20) - 1) >> 20);
#pragma omp parallel for schedule(static)
      for (std::int64_t l = 0; l < lines; ++l) {
        const std::size_t o = static_cast<std::size_t>(l) << 20;
        std::memcpy(d + off + o, from + o, std::min<std::size_t>(std::size_t{1} << 20, n - o));
      }
    }
  }

 private:
  void* buf_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {};
  cudaStream_t stream_ = nullptr;
};

// A CUDA event (no timing) owned for its scope.
struct Event {
  cudaEvent_t e = nullptr;
  Event() { check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event"); }
  ~Event() {
    if (e) cudaEventDestroy(e);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : e(o.e) { o.e = nullptr; }
  Event& operator=(Event&&) = delete;
};

// Stage times on stderr when XENTLAB_REFERENCE_TIMINGS is set (for measurements).
struct StageClock {
  bool on = std::getenv("XENTLAB_REFERENCE_TIMINGS") != nullptr;
  std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now();
  // sync = false: the stage's end as the host sees it, the GPU's queued work left running (a
  // synchronisation there would serialise what the stages overlap).
  void mark(const char* what, bool sync = true) {
    if (!on) return;
    if (sync) cudaDeviceSynchronize();
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "[cuda reference] %-28s %8.3f s\n", what,
                 std::chrono::duration<double>(now - t).count());
    t = now;
  }
};

}  // namespace
}  // namespace xentlab
