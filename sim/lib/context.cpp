#include "context.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "fault_rule.hpp"
#include "pci.hpp"

namespace tarmac::sim::lib {

namespace {

// The clock of a simulation without a state directory starts when the library is loaded.
const long long g_load_real_ns = realtime_ns();

// Handles point into this array so that any pointer can be checked without dereferencing it.
constexpr unsigned kMaxDevices = 256;
struct DeviceSlot {
  unsigned index;
};
DeviceSlot g_slots[kMaxDevices];

// MIG handles: one array per kind, kMaxMig per GPU, so that any pointer can be checked too.
constexpr unsigned kMaxMig = 7;
struct MigSlot {
  unsigned gpu;
  unsigned mig;
};
MigSlot g_mig_slots[3][kMaxDevices * kMaxMig];

std::filesystem::path library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&library_dir), &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  return std::filesystem::canonical(info.dli_fname, ec).parent_path();
}

void sleep_ms(unsigned ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

const bool g_trace = std::getenv("TARMAC_SIM_TRACE") != nullptr;
thread_local const char* g_current_function = nullptr;

void note(const char* function) {
  if (g_trace) g_current_function = function;
}

}  // namespace

nvmlReturn_t trace_result(nvmlReturn_t rc) noexcept {
  if (g_trace && g_current_function != nullptr) {
    std::fprintf(stderr, "tarmac-sim: %s -> %d (%s)\n", g_current_function, rc, return_code_text(rc));
    g_current_function = nullptr;
  }
  return rc;
}

Context& Context::get() {
  // Destroyed at exit or dlclose, so that nothing the library allocated outlives it (a client
  // that unloads the library must not see leaks).
  static Context context;
  return context;
}

Context::~Context() {
  for (EventSetState* set : event_sets) delete set;
  for (GpmSampleState* sample : gpm_samples) delete sample;
}

nvmlDevice_t Context::handle(unsigned index) {
  return reinterpret_cast<nvmlDevice_t>(&g_slots[index]);
}

std::optional<unsigned> Context::index_of(nvmlDevice_t device) const {
  const auto p = reinterpret_cast<std::uintptr_t>(device);
  const auto base = reinterpret_cast<std::uintptr_t>(&g_slots[0]);
  if (p < base || (p - base) % sizeof(DeviceSlot) != 0) return std::nullopt;
  const auto index = static_cast<unsigned>((p - base) / sizeof(DeviceSlot));
  if (sim_ == nullptr || index >= sim_->gpu_count()) return std::nullopt;
  return index;
}

void* Context::mig_handle(unsigned gpu, unsigned mig, MigHandleKind kind) {
  return &g_mig_slots[static_cast<int>(kind)][gpu * kMaxMig + mig];
}

std::optional<std::pair<unsigned, unsigned>> Context::mig_of(const void* handle, MigHandleKind kind) const {
  const MigSlot* slots = g_mig_slots[static_cast<int>(kind)];
  const auto p = reinterpret_cast<std::uintptr_t>(handle);
  const auto base = reinterpret_cast<std::uintptr_t>(&slots[0]);
  if (p < base || (p - base) % sizeof(MigSlot) != 0) return std::nullopt;
  const auto slot = (p - base) / sizeof(MigSlot);
  if (slot >= kMaxDevices * kMaxMig || sim_ == nullptr) return std::nullopt;
  const auto gpu = static_cast<unsigned>(slot / kMaxMig);
  const auto mig = static_cast<unsigned>(slot % kMaxMig);
  if (gpu >= sim_->gpu_count() || mig >= sim_->scenario().gpus[gpu].mig.size()) return std::nullopt;
  return std::pair{gpu, mig};
}

nvmlReturn_t Context::init(const char* function) {
  note(function);
  std::unique_lock lock(mu_);
  if (refcount_ == 0) {
    for (unsigned i = 0; i < kMaxDevices; ++i) g_slots[i].index = i;
    for (auto& kind : g_mig_slots) {
      for (unsigned i = 0; i < kMaxDevices * kMaxMig; ++i) kind[i] = {i / kMaxMig, i % kMaxMig};
    }
    auto sim = Simulation::from_environment(g_load_real_ns, library_dir());
    if (!sim) {
      if (!reported_) {
        std::fprintf(stderr, "libnvidia-ml.so.1 (tarmac NVML simulator): %s\n", sim.error().message.c_str());
        reported_ = true;
      }
      return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    // A scenario of a broken driver ([driver] init_error): every initialiser fails, silently, as
    // the real library does when it cannot reach the kernel driver.
    if (const auto init_error = (*sim)->scenario().init_error) return static_cast<nvmlReturn_t>(*init_error);
    if ((*sim)->gpu_count() > kMaxDevices) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    sim_ = std::move(*sim);
  }
  const double t = sim_->now();
  FaultDecision d = sim_->faults().on_call(function, std::nullopt, t);
  if (d.delay_ms > 0) {
    lock.unlock();
    sleep_ms(d.delay_ms);
    lock.lock();
  }
  if (d.rc && *d.rc != NVML_SUCCESS) {
    if (refcount_ == 0) sim_.reset();
    return *d.rc;
  }
  ++refcount_;
  return NVML_SUCCESS;
}

nvmlReturn_t Context::shutdown() {
  std::lock_guard lock(mu_);
  if (refcount_ == 0) return NVML_ERROR_UNINITIALIZED;
  if (--refcount_ == 0) sim_.reset();
  return NVML_SUCCESS;
}

Entry Context::finish_entry(Entry e, const char* function, std::optional<unsigned> gpu) {
  sim_->faults().refresh();
  const FaultDecision d = sim_->faults().on_call(function, gpu, e.t);
  if (d.delay_ms > 0) {
    // Sleep without the lock: a slow call must not stall other threads' calls.
    e.lock.unlock();
    sleep_ms(d.delay_ms);
    e.lock.lock();
    if (refcount_ == 0 || sim_ == nullptr) {
      e.rc = NVML_ERROR_UNINITIALIZED;
      return e;
    }
    e.sim = sim_.get();
    e.t = sim_->now();
  }
  if (d.rc) e.rc = *d.rc;
  return e;
}

Entry Context::lock_initialised() {
  Entry e;
  e.lock = std::unique_lock(mu_);
  if (refcount_ == 0) {
    e.rc = NVML_ERROR_UNINITIALIZED;
    return e;
  }
  e.sim = sim_.get();
  e.t = sim_->now();
  return e;
}

Entry Context::enter_system(const char* function) {
  note(function);
  Entry e = lock_initialised();
  if (e.rc != NVML_SUCCESS) return e;
  return finish_entry(std::move(e), function, std::nullopt);
}

Entry Context::enter_device(const char* function, nvmlDevice_t device, MigHandles accept_mig) {
  note(function);
  Entry e = lock_initialised();
  if (e.rc != NVML_SUCCESS) return e;
  if (auto index = index_of(device)) return enter_gpu(std::move(e), function, *index, std::nullopt);
  const auto m = mig_of(device, MigHandleKind::Device);
  if (!m) {
    e.rc = NVML_ERROR_INVALID_ARGUMENT;
    return e;
  }
  e = enter_gpu(std::move(e), function, m->first, m->second);
  // Most exports have no answer for a MIG device (the real driver's NOT_SUPPORTED).
  if (e.rc == NVML_SUCCESS && accept_mig == MigHandles::Refuse) e.rc = NVML_ERROR_NOT_SUPPORTED;
  return e;
}

Entry Context::enter_instance(const char* function, const void* handle, MigHandleKind kind) {
  note(function);
  Entry e = lock_initialised();
  if (e.rc != NVML_SUCCESS) return e;
  const auto m = mig_of(handle, kind);
  if (!m) {
    e.rc = NVML_ERROR_INVALID_ARGUMENT;
    return e;
  }
  return enter_gpu(std::move(e), function, m->first, m->second);
}

Entry Context::enter_gpu(Entry e, const char* function, unsigned gpu, std::optional<unsigned> mig) {
  e.gpu = gpu;
  e.mig = mig;
  if (sim_->is_lost(gpu, e.t)) {
    e.rc = NVML_ERROR_GPU_IS_LOST;
    return e;
  }
  return finish_entry(std::move(e), function, gpu);
}

Entry Context::enter_index(const char* function, unsigned index) {
  note(function);
  Entry e;
  e.lock = std::unique_lock(mu_);
  if (refcount_ == 0) {
    e.rc = NVML_ERROR_UNINITIALIZED;
    return e;
  }
  if (index >= sim_->gpu_count()) {
    e.rc = NVML_ERROR_INVALID_ARGUMENT;
    return e;
  }
  e.sim = sim_.get();
  e.gpu = index;
  e.t = sim_->now();
  // As on real hardware, a GPU that fell off the bus stays in the count but yields no handle.
  if (sim_->is_lost(index, e.t)) {
    e.rc = NVML_ERROR_GPU_IS_LOST;
    return e;
  }
  return finish_entry(std::move(e), function, index);
}

Entry Context::relock() {
  Entry e = lock_initialised();
  if (e.rc != NVML_SUCCESS) return e;
  sim_->faults().refresh();
  return e;
}

nvmlReturn_t copy_string(const std::string& value, char* buffer, unsigned int length) {
  if (buffer == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < value.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buffer, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

void write_pci_info(const GpuSpec& gpu, nvmlPciInfo_t* out, PciLayout layout) {
  nvmlPciInfo_t full{};
  const std::string legacy = format_pci_bus_id_legacy(gpu.pci);
  std::memcpy(full.busIdLegacy, legacy.c_str(), std::min(legacy.size() + 1, sizeof full.busIdLegacy));
  full.domain = gpu.pci.domain;
  full.bus = gpu.pci.bus;
  full.device = gpu.pci.device;
  full.pciDeviceId = gpu.pci_device_id;
  full.pciSubSystemId = gpu.pci_subsystem_id;
  std::memcpy(full.busId, gpu.pci_bus_id.c_str(), std::min(gpu.pci_bus_id.size() + 1, sizeof full.busId));
  std::memcpy(out, &full, layout == PciLayout::V1 ? offsetof(nvmlPciInfo_t, busId) : sizeof full);
}

}  // namespace tarmac::sim::lib
