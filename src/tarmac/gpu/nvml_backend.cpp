// The NVML backend: opens the library, enumerates the devices once, and composes snapshots from
// the per-area readers, reading only the value groups each snapshot asks for.
#include <chrono>
#include <fmt/format.h>
#include <map>

#include "tarmac/gpu/backend.hpp"
#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/nvml_device.hpp"

namespace tarmac::gpu {

using namespace tarmac::nvml;
using detail::call;
using detail::NvmlDevice;

namespace {

class NvmlBackend final : public Backend {
 public:
  explicit NvmlBackend(std::unique_ptr<Library> lib) : lib_(std::move(lib)) {}
  ~NvmlBackend() override {
    if (xid_set_ != nullptr) call(lib_->fn().nvmlEventSetFree, xid_set_);
  }
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  Result<void> enumerate() {
    const Functions& f = lib_->fn();
    unsigned count = 0;
    nvmlReturn_t rc = f.nvmlDeviceGetCount_v2 != nullptr ? f.nvmlDeviceGetCount_v2(&count) : f.nvmlDeviceGetCount(&count);
    if (rc != NVML_SUCCESS) return nvml_error("nvmlDeviceGetCount", rc);
    devices_.reserve(count);
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t handle = nullptr;
      rc = f.nvmlDeviceGetHandleByIndex_v2 != nullptr ? f.nvmlDeviceGetHandleByIndex_v2(i, &handle)
                                                      : f.nvmlDeviceGetHandleByIndex(i, &handle);
      devices_.emplace_back(*lib_, i, rc == NVML_SUCCESS ? handle : nullptr);
      NvmlDevice& dev = devices_.back();
      dev.identity.index = i;
      if (rc != NVML_SUCCESS) dev.note_failure("handle", rc == NVML_ERROR_GPU_IS_LOST ? rc : NVML_ERROR_GPU_IS_LOST);
    }
    return {};
  }

  Result<Snapshot> snapshot(const SnapshotOptions& options) override {
    Snapshot snap;
    snap.timestamp_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    if (!versions_read_) read_versions();
    snap.driver_version = driver_version_;
    snap.nvml_version = nvml_version_;
    snap.cuda_driver_version = cuda_version_;
    ValueGroups groups = options.values;
    if (options.slow) groups |= {ValueGroup::Board};      // GPM support decides whether GPM is read
    if (options.topology) groups |= {ValueGroup::Pci};    // NVLink remote ends are matched by bus id
    std::map<unsigned, std::vector<unsigned>> xids;
    if (options.xid_events) xids = drain_xids();
    for (NvmlDevice& dev : devices_) {
      Device out;
      if (options.xid_events) {
        out.new_xids = std::move(xids[dev.identity.index]);
        if (!out.new_xids.empty()) last_xid_[dev.identity.index] = out.new_xids.back();
        if (auto it = last_xid_.find(dev.identity.index); it != last_xid_.end()) {
          out.last_xid = it->second;
        } else if (xid_set_ != nullptr) {
          out.last_xid = 0;  // watched, none seen: what DCGM reports too
        }
      }
      if (dev.handle() == nullptr) {
        out.id = dev.identity;
        out.lost = "the GPU did not answer when tarmac opened it";
        snap.devices.push_back(std::move(out));
        continue;
      }
      dev.begin_snapshot();
      detail::read_identity(dev, groups);  // the groups not read before (or lost while reading)
      out.modes = detail::read_modes(dev, groups);
      out.sample = detail::read_sample(dev, groups);
      if (options.slow) out.slow = detail::read_slow(dev);
      if (options.processes) out.processes = detail::read_processes(dev, host_cache_, groups);
      // A slow read, which reads no modes, reads MIG devices for their GPM (none when MIG is off).
      if ((groups.has(ValueGroup::MigMode) && out.modes.mig_mode_current == true) || options.slow) {
        out.mig = detail::read_mig(dev, options.slow);
        match_mig_processes(out.mig, out.processes);
      }
      out.id = dev.identity;
      out.lost = dev.lost();
      out.errors = dev.take_errors();
      snap.devices.push_back(std::move(out));
    }
    if (options.processes && groups.has(ValueGroup::ProcessHost)) host_cache_.end_round();
    if (options.topology) snap.topology = detail::read_topology(devices_);
    return snap;
  }

 private:
  // Registers every device for XID events once; then returns the events waiting, by device index.
  std::map<unsigned, std::vector<unsigned>> drain_xids() {
    std::map<unsigned, std::vector<unsigned>> out;
    const Functions& f = lib_->fn();
    if (!xid_tried_) {
      xid_tried_ = true;
      if (call(f.nvmlEventSetCreate, &xid_set_) != NVML_SUCCESS) {
        xid_set_ = nullptr;
        return out;
      }
      bool any = false;
      for (NvmlDevice& dev : devices_) {
        if (dev.handle() == nullptr) continue;
        any |= call(f.nvmlDeviceRegisterEvents, dev.handle(), nvmlEventTypeXidCriticalError, xid_set_) == NVML_SUCCESS;
      }
      if (!any) {
        call(f.nvmlEventSetFree, xid_set_);
        xid_set_ = nullptr;
      }
    }
    if (xid_set_ == nullptr) return out;
    auto wait = f.nvmlEventSetWait_v2 != nullptr ? f.nvmlEventSetWait_v2 : f.nvmlEventSetWait;
    for (int i = 0; i < 1024; ++i) {  // bounded: a storm of events cannot stall the snapshot
      nvmlEventData_t data{};
      if (call(wait, xid_set_, &data, 0U) != NVML_SUCCESS) break;
      if ((data.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
      for (NvmlDevice& dev : devices_) {
        if (dev.handle() == data.device) out[dev.identity.index].push_back(static_cast<unsigned>(data.eventData));
      }
    }
    return out;
  }

  void read_versions() {
    const Functions& f = lib_->fn();
    char buffer[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
    if (call(f.nvmlSystemGetDriverVersion, buffer, static_cast<unsigned>(sizeof buffer)) == NVML_SUCCESS) {
      driver_version_ = util::from_c_buffer(buffer, sizeof buffer);
    }
    char nvml_buffer[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = {};
    if (call(f.nvmlSystemGetNVMLVersion, nvml_buffer, static_cast<unsigned>(sizeof nvml_buffer)) == NVML_SUCCESS) {
      nvml_version_ = util::from_c_buffer(nvml_buffer, sizeof nvml_buffer);
    }
    int cuda = 0;
    auto cuda_fn = f.nvmlSystemGetCudaDriverVersion_v2 != nullptr ? f.nvmlSystemGetCudaDriverVersion_v2
                                                                  : f.nvmlSystemGetCudaDriverVersion;
    if (call(cuda_fn, &cuda) == NVML_SUCCESS) cuda_version_ = cuda;
    versions_read_ = true;
  }

  std::unique_ptr<Library> lib_;  // destroyed last: devices hold pointers into it
  std::vector<NvmlDevice> devices_;
  host::ProcessCache host_cache_;
  bool versions_read_ = false;
  std::optional<std::string> driver_version_;
  std::optional<std::string> nvml_version_;
  std::optional<int> cuda_version_;
  bool xid_tried_ = false;
  nvmlEventSet_t xid_set_ = nullptr;
  std::map<unsigned, unsigned> last_xid_;
};

}  // namespace

Result<std::unique_ptr<Backend>> open_nvml_backend(const std::string& library_path) {
  LoadOptions options;
  options.library_path = library_path;
  TARMAC_TRY_ASSIGN(auto lib, Library::open(options));
  auto backend = std::make_unique<NvmlBackend>(std::move(lib));
  TARMAC_TRY(backend->enumerate());
  return std::unique_ptr<Backend>(std::move(backend));
}

std::optional<DriverFailure> driver_failure(const Error& error) {
  const Failure* failure = failure_of(error);
  if (failure == nullptr) return std::nullopt;
  return DriverFailure{static_cast<int>(failure->code), failure->library_text};
}

const char* to_string(ProcessType type) {
  switch (type) {
    case ProcessType::Compute: return "compute";
    case ProcessType::Graphics: return "graphics";
    case ProcessType::Mps: return "mps";
  }
  return "unknown";
}

const char* to_string(Link link) {
  switch (link) {
    case Link::Self: return "X";
    case Link::NvLink: return "NV";
    case Link::Internal: return "PSB";
    case Link::Pix: return "PIX";
    case Link::Pxb: return "PXB";
    case Link::Phb: return "PHB";
    case Link::Node: return "NODE";
    case Link::Sys: return "SYS";
    case Link::Unknown: return "N/A";
  }
  return "N/A";
}

}  // namespace tarmac::gpu
