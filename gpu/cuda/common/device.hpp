#pragma once
// Device discovery. Everything here is callable without a GPU: with no device (or no driver) it
// reports why, so GPU tests can skip with that reason.
#include <string>

namespace xentlab::gpu {

struct DeviceInfo {
  bool available = false;
  std::string reason;  ///< why no device is usable, when !available ("no CUDA device: …")
  std::string name;
  int sm_major = 0, sm_minor = 0, multiprocessors = 0;
  double memory_gib = 0;
  int driver_version = 0, runtime_version = 0;
};

/// Queries device 0. Never throws.
DeviceInfo query_device();

}  // namespace xentlab::gpu
