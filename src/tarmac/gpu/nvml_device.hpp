// Internal to the NVML backend: one opened device, the support it has shown, and the helper that
// turns an NVML call into an optional value (probing support once).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tarmac/gpu/model.hpp"
#include "tarmac/gpu/value_groups.hpp"
#include "tarmac/host/process_cache.hpp"
#include "tarmac/nvml/library.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::gpu::detail {

// Calls an entry point that may be absent from an older driver's library.
template <typename Fn, typename... Args>
nvml::nvmlReturn_t call(Fn fn, Args... args) {
  return fn == nullptr ? nvml::NVML_ERROR_FUNCTION_NOT_FOUND : fn(args...);
}

// A GPM sample buffer, freed through the library that allocated it.
class GpmSample {
 public:
  GpmSample() = default;
  GpmSample(nvml::nvmlGpmSample_t sample, nvml::PFN_nvmlGpmSampleFree free_fn) : sample_(sample), free_(free_fn) {}
  GpmSample(GpmSample&& other) noexcept : sample_(std::exchange(other.sample_, nullptr)), free_(other.free_) {}
  GpmSample& operator=(GpmSample&& other) noexcept {
    if (this != &other) {
      reset();
      sample_ = std::exchange(other.sample_, nullptr);
      free_ = other.free_;
    }
    return *this;
  }
  GpmSample(const GpmSample&) = delete;
  GpmSample& operator=(const GpmSample&) = delete;
  ~GpmSample() { reset(); }
  [[nodiscard]] nvml::nvmlGpmSample_t get() const { return sample_; }
  explicit operator bool() const { return sample_ != nullptr; }

 private:
  void reset() {
    if (sample_ != nullptr && free_ != nullptr) free_(sample_);
    sample_ = nullptr;
  }
  nvml::nvmlGpmSample_t sample_ = nullptr;
  nvml::PFN_nvmlGpmSampleFree free_ = nullptr;
};

class NvmlDevice {
 public:
  NvmlDevice(const nvml::Library& lib, unsigned index, nvml::nvmlDevice_t handle)
      : lib_(&lib), index_(index), handle_(handle) {}

  [[nodiscard]] const nvml::Functions& fn() const { return lib_->fn(); }
  [[nodiscard]] nvml::nvmlDevice_t handle() const { return handle_; }
  [[nodiscard]] unsigned index() const { return index_; }

  // Runs `fill(&value)` unless `what` is known to be unsupported or the GPU is lost.
  // NOT_SUPPORTED / FUNCTION_NOT_FOUND mark `what` unsupported for good (probed once);
  // GPU_IS_LOST marks the device lost; any other failure is recorded in errors() and retried.
  template <typename T, typename Fill>
  std::optional<T> read(std::string_view what, Fill&& fill) {
    if (lost_ || unsupported_.count(what) != 0) return std::nullopt;
    T value{};
    const nvml::nvmlReturn_t rc = fill(&value);
    if (rc == nvml::NVML_SUCCESS) return value;
    note_failure(what, rc);
    return std::nullopt;
  }

  // Records a failed call (see read()); public for calls that fill several values at once.
  void note_failure(std::string_view what, nvml::nvmlReturn_t rc);

  [[nodiscard]] bool supported(std::string_view what) const { return unsupported_.count(what) == 0; }
  [[nodiscard]] const std::optional<std::string>& lost() const { return lost_; }
  // Called at the start of each snapshot: a lost GPU is probed again, errors start empty.
  void begin_snapshot();
  [[nodiscard]] std::vector<ReadError> take_errors() { return std::move(errors_); }

  DeviceIdentity identity;
  ValueGroups identity_read;  // the groups whose identity part is in `identity`
  GpmSample gpm_previous;  // the last slow read's GPM sample
  std::map<unsigned, GpmSample> gpm_mig_previous;  // the same of each GPU instance, by its id
  // The newest per-process utilization sample seen (driver time, us): the next read asks for the
  // samples newer than it or than its minimum window, whichever reaches further back
  // (gpu::utilization_since), so no read waits for a sample period.
  std::optional<unsigned long long> utilization_seen_us;

 private:
  const nvml::Library* lib_;
  unsigned index_;
  nvml::nvmlDevice_t handle_;
  std::unordered_set<std::string_view> unsupported_;
  std::optional<std::string> lost_;
  std::vector<ReadError> errors_;
};

// The readers, one per area (nvml_identity.cpp, nvml_sample.cpp, nvml_processes.cpp, nvml_topology.cpp).
// Each reads the values of `groups` only (value_groups.hpp); read_identity skips groups whose
// identity was read before.
void read_identity(NvmlDevice& dev, ValueGroups groups);
[[nodiscard]] DeviceModes read_modes(NvmlDevice& dev, ValueGroups groups);
[[nodiscard]] DeviceSample read_sample(NvmlDevice& dev, ValueGroups groups);
[[nodiscard]] DeviceSlowSample read_slow(NvmlDevice& dev);
[[nodiscard]] std::vector<GpuProcess> read_processes(NvmlDevice& dev, host::ProcessCache& host_cache,
                                                   ValueGroups groups);
[[nodiscard]] Topology read_topology(std::vector<NvmlDevice>& devices);
// The MIG devices of a GPU in MIG mode (nvml_mig.cpp), with their GPM when `slow`; processes are
// matched to them by their instance ids (GpuProcess::mig).
[[nodiscard]] std::vector<MigDevice> read_mig(NvmlDevice& dev, bool slow);

// GPM rates since `previous`, from a new sample that `take` fills (kept in `previous` for the
// next read); none on the first read or when GPM fails. `what` is the support it is probed as
// ("gpm" for the board, "gpm_mig" for its GPU instances: one refused never turns off the other).
struct GpmRates {
  std::optional<double> sm_active_pct, sm_occupancy_pct, tensor_active_pct, dram_bw_pct;
};
[[nodiscard]] GpmRates gpm_rates(NvmlDevice& dev, std::string_view what, GpmSample& previous,
                                 const std::function<nvml::nvmlReturn_t(nvml::nvmlGpmSample_t)>& take);

// Reads a fixed-size string value (name, UUID, serial...) through a (device, buffer, length) call.
template <typename Fn>
std::optional<std::string> read_string(NvmlDevice& dev, std::string_view what, Fn fn, unsigned capacity) {
  if (dev.lost() || !dev.supported(what)) return std::nullopt;
  std::vector<char> buffer(capacity, '\0');
  const nvml::nvmlReturn_t rc = call(fn, dev.handle(), buffer.data(), capacity);
  if (rc != nvml::NVML_SUCCESS) {
    dev.note_failure(what, rc);
    return std::nullopt;
  }
  return util::from_c_buffer(buffer.data(), buffer.size());
}

}  // namespace tarmac::gpu::detail
