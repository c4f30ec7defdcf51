// What several of reap's test files share (one definition each, so that a unity build compiles).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/backend.hpp"
#include "tarmac/host/device_files.hpp"
#include "tarmac/host/proc_reader.hpp"

namespace tarmac::reap::test_support {

inline constexpr long long kMin = 60 * 1000;  // a minute, in the milliseconds the reaper counts

// The device file the tests give every GPU: /dev/null, which every process they start has open
// as its descriptor 0 (no test can create a GPU's device node, major 195, without the driver).
inline constexpr const char* kTestDevicePath = "/dev/null";
inline host::DeviceNumber test_device_file() { return *host::char_device_of(kTestDevicePath); }
// A reader that may stat that file (holds_device stats NVIDIA's files alone otherwise).
inline host::ProcReader test_proc_reader() { return host::ProcReader("/proc", kTestDevicePath); }
// One that none of their processes has open.
inline host::DeviceNumber unheld_device_file() { return *host::char_device_of("/dev/zero"); }

// GPUs ("GPU-0", "GPU-1", ..., minor = index) listing the given real processes while /proc shows
// them alive (not defunct): what the driver does once a process's memory is freed. A process's
// reading is 0 % unless `sm` names another (nullopt: unknown).
class LiveGpus final : public gpu::Backend {
 public:
  struct Listing {
    unsigned gpu = 0;
    unsigned pid = 0;
    std::optional<unsigned> sm = 0U;
    std::optional<unsigned> enc = 0U;
  };
  explicit LiveGpus(std::vector<Listing> listings, unsigned gpus = 1) : listings_(std::move(listings)), gpus_(gpus) {}
  void set(unsigned gpu, unsigned pid, std::optional<unsigned> sm) {
    for (auto& l : listings_) {
      if (l.gpu == gpu && l.pid == pid) l.sm = sm;
    }
  }
  Result<gpu::Snapshot> snapshot(const gpu::SnapshotOptions&) override {
    gpu::Snapshot s;
    const host::ProcReader proc;
    for (unsigned g = 0; g < gpus_; ++g) {
      gpu::Device d;
      d.id.index = g;
      d.id.uuid = "GPU-" + std::to_string(g);
      d.id.minor_number = g;
      d.modes.mig_mode_current = false;
      for (const auto& l : listings_) {
        if (l.gpu != g) continue;
        const auto info = proc.read(l.pid);
        if (info.visibility != host::PidVisibility::Visible || info.state == 'Z') continue;
        gpu::GpuProcess p;
        p.pid = l.pid;
        p.used_mem_bytes = 4ULL << 30;
        p.sm_util_pct = l.sm;
        p.mem_util_pct = l.sm ? std::optional<unsigned>(0U) : std::nullopt;
        p.enc_util_pct = l.sm ? l.enc : std::nullopt;
        p.host = info;
        d.processes.push_back(p);
      }
      s.devices.push_back(std::move(d));
    }
    return s;
  }

 private:
  std::vector<Listing> listings_;
  unsigned gpus_;
};

}  // namespace tarmac::reap::test_support
