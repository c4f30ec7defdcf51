// Enumeration, handles, identity strings, PCI information and PCIe links.
#include <cstring>

#include "context.hpp"
#include "pci.hpp"

namespace tarmac::nvml {

using sim::lib::Context;
using sim::lib::copy_string;
using sim::lib::Entry;
using sim::lib::guarded;

namespace {

nvmlReturn_t get_count(const char* function, unsigned int* count) {
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *count = static_cast<unsigned>(e.sim->gpu_count());  // lost GPUs included, as on real hardware
    return NVML_SUCCESS;
  });
}

nvmlReturn_t handle_by_index(const char* function, unsigned int index, nvmlDevice_t* device) {
  return guarded([&] {
    auto e = Context::get().enter_index(function, index);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *device = Context::handle(index);
    return NVML_SUCCESS;
  });
}

// Finds a GPU by a predicate for the ByUUID/ByPciBusId lookups.
template <typename Match>
nvmlReturn_t handle_by(const char* function, nvmlDevice_t* device, Match&& match) {
  auto e = Context::get().enter_system(function);
  if (e.rc != NVML_SUCCESS) return e.rc;
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < e.sim->gpu_count(); ++i) {
    if (!match(e.sim->scenario().gpus[i])) continue;
    if (e.sim->is_lost(i, e.t)) return NVML_ERROR_GPU_IS_LOST;
    *device = Context::handle(i);
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t handle_by_pci(const char* function, const char* pci_bus_id, nvmlDevice_t* device) {
  return guarded([&] {
    if (pci_bus_id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const auto wanted = sim::parse_pci_bus_id(pci_bus_id);
    if (!wanted) return NVML_ERROR_INVALID_ARGUMENT;
    return handle_by(function, device, [&](const sim::GpuSpec& g) { return g.pci == *wanted; });
  });
}

// Reads one string property of a GPU; unset (nullopt) properties are NOT_SUPPORTED.
template <typename Get>
nvmlReturn_t device_string(const char* function, nvmlDevice_t device, char* buffer, unsigned int length, Get&& get) {
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    const std::optional<std::string> value = get(e.sim->scenario().gpus[e.gpu]);
    if (!value) return NVML_ERROR_NOT_SUPPORTED;
    return copy_string(*value, buffer, length);
  });
}

// Reads a string of a GPU or of one of its MIG devices (the MigInstance, else null).
template <typename Get>
nvmlReturn_t mig_device_string(const char* function, nvmlDevice_t device, char* buffer, unsigned int length, Get&& get) {
  return guarded([&] {
    auto e = Context::get().enter_device(function, device, sim::lib::MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    const sim::GpuSpec& g = e.sim->scenario().gpus[e.gpu];
    return copy_string(get(g, e.mig ? &g.mig[*e.mig] : nullptr), buffer, length);
  });
}

// Reads one unsigned property; nullopt means NOT_SUPPORTED.
template <typename Get>
nvmlReturn_t device_uint(const char* function, nvmlDevice_t device, unsigned int* out, Get&& get) {
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const std::optional<unsigned> value = get(e, e.sim->scenario().gpus[e.gpu]);
    if (!value) return NVML_ERROR_NOT_SUPPORTED;
    *out = *value;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t pci_info(const char* function, nvmlDevice_t device, nvmlPciInfo_t* pci, sim::lib::PciLayout layout) {
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    sim::lib::write_pci_info(e.sim->scenario().gpus[e.gpu], pci, layout);
    return NVML_SUCCESS;
  });
}

std::optional<unsigned> pcie(const sim::GpuSpec& g, unsigned value) {
  if (!g.pcie_max_gen) return std::nullopt;
  return value;
}

}  // namespace

extern "C" {

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) { return get_count(__func__, count); }
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return get_count(__func__, count); }

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return handle_by_index(__func__, index, device);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return handle_by_index(__func__, index, device);
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  const char* const function = __func__;
  return guarded([&] {
    if (uuid == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const std::string wanted(uuid, strnlen(uuid, NVML_DEVICE_UUID_BUFFER_SIZE));
    return handle_by(function, device, [&](const sim::GpuSpec& g) { return g.uuid == wanted; });
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pci_bus_id, nvmlDevice_t* device) {
  return handle_by_pci(__func__, pci_bus_id, device);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pci_bus_id, nvmlDevice_t* device) {
  return handle_by_pci(__func__, pci_bus_id, device);
}

// A MIG device's index is its index under its parent (nvidia-smi's "MIG Dev" column).
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device, sim::lib::MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *index = e.mig.value_or(e.gpu);
    return NVML_SUCCESS;
  });
}

// A MIG device's name is its board's and its profile's ("NVIDIA H200 MIG 1g.18gb"), its UUID its own.
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  return mig_device_string(__func__, device, name, length, [](const sim::GpuSpec& g, const sim::MigInstance* m) {
    return m == nullptr ? g.name : g.name + " MIG " + m->profile->name;
  });
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  return mig_device_string(__func__, device, uuid, length, [](const sim::GpuSpec& g, const sim::MigInstance* m) {
    return m == nullptr ? g.uuid : m->uuid;
  });
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial, unsigned int length) {
  return device_string(__func__, device, serial, length, [](const sim::GpuSpec& g) { return g.serial; });
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char* version, unsigned int length) {
  return device_string(__func__, device, version, length, [](const sim::GpuSpec& g) { return g.vbios_version; });
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char* part_number,
                                                            unsigned int length) {
  return device_string(__func__, device, part_number, length,
                       [](const sim::GpuSpec& g) { return g.board_part_number; });
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char* version,
                                                                unsigned int length) {
  return device_string(__func__, device, version, length, [](const sim::GpuSpec& g) { return g.inforom_version; });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor_number) {
  return device_uint(__func__, device, minor_number,
                     [](const Entry&, const sim::GpuSpec& g) { return std::optional(g.minor_number); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *type = e.sim->scenario().gpus[e.gpu].brand;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int* arch) {
  return device_uint(__func__, device, arch,
                     [](const Entry&, const sim::GpuSpec& g) { return std::optional(g.architecture); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *major = e.sim->scenario().gpus[e.gpu].cc_major;
    *minor = e.sim->scenario().gpus[e.gpu].cc_minor;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return pci_info(__func__, device, pci, sim::lib::PciLayout::V3);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return pci_info(__func__, device, pci, sim::lib::PciLayout::V3);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return pci_info(__func__, device, pci, sim::lib::PciLayout::V1);
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int* gen) {
  return device_uint(__func__, device, gen,
                     [](const Entry&, const sim::GpuSpec& g) { return pcie(g, g.pcie_max_gen.value_or(0)); });
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int* gen) {
  return device_uint(__func__, device, gen,
                     [](const Entry&, const sim::GpuSpec& g) { return pcie(g, g.pcie_gpu_max_gen); });
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int* width) {
  return device_uint(__func__, device, width,
                     [](const Entry&, const sim::GpuSpec& g) { return pcie(g, g.pcie_max_width); });
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int* gen) {
  return device_uint(__func__, device, gen, [](const Entry&, const sim::GpuSpec& g) { return pcie(g, g.pcie_gen); });
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int* width) {
  return device_uint(__func__, device, width,
                     [](const Entry&, const sim::GpuSpec& g) { return pcie(g, g.pcie_width); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                                           unsigned int* value_kbps) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (value_kbps == nullptr || (counter != NVML_PCIE_UTIL_TX_BYTES && counter != NVML_PCIE_UTIL_RX_BYTES)) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!e.sim->scenario().gpus[e.gpu].pcie_max_gen) return NVML_ERROR_NOT_SUPPORTED;
    const sim::DeviceView view = e.sim->device(e.gpu, e.t);
    *value_kbps = counter == NVML_PCIE_UTIL_TX_BYTES ? view.sample.pcie_tx_kbps : view.sample.pcie_rx_kbps;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int* value) {
  return device_uint(__func__, device, value, [](const Entry&, const sim::GpuSpec& g) { return pcie(g, 0); });
}

}  // extern "C"
}  // namespace tarmac::nvml
