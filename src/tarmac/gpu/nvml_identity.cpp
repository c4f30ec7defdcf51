// Static identity of a device: read once per value group, by the first snapshot that asks for it.
#include <fmt/format.h>

#include <thread>

#include "tarmac/gpu/nvml_device.hpp"

namespace tarmac::gpu::detail {

using namespace tarmac::nvml;

void NvmlDevice::note_failure(std::string_view what, nvmlReturn_t rc) {
  if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND) {
    unsupported_.insert(what);
  } else if (rc == NVML_ERROR_GPU_IS_LOST) {
    lost_ = return_code_message(rc);
  } else {
    errors_.push_back(ReadError{std::string(what), fmt::format("{} ({})", return_code_message(rc),
                                                               return_code_name(rc))});
  }
}

void NvmlDevice::begin_snapshot() {
  errors_.clear();
  lost_.reset();
}

namespace {

const char* architecture_name(unsigned arch) {
  switch (arch) {
    case 2: return "Kepler";
    case 3: return "Maxwell";
    case 4: return "Pascal";
    case 5: return "Volta";
    case 6: return "Turing";
    case 7: return "Ampere";
    case 8: return "Ada Lovelace";
    case 9: return "Hopper";
    case 10: return "Blackwell";
    default: return "Unknown";
  }
}

const char* brand_name(int brand) {
  switch (brand) {
    case 1: return "Quadro";
    case 2: return "Tesla";
    case 3: return "NVS";
    case 5: return "GeForce";
    case 6: return "Titan";
    case 12: return "Quadro RTX";
    case 13: return "NVIDIA RTX";
    case 14: return "NVIDIA";
    default: return "Unknown";
  }
}

std::optional<nvmlPciInfo_t> read_pci(NvmlDevice& dev) {
  const Functions& f = dev.fn();
  // Newest first: _v3 fills every field; the older ones leave parts of the struct unset.
  for (auto fn : {f.nvmlDeviceGetPciInfo_v3, f.nvmlDeviceGetPciInfo_v2, f.nvmlDeviceGetPciInfo}) {
    if (fn == nullptr) continue;
    return dev.read<nvmlPciInfo_t>("pci", [&](nvmlPciInfo_t* pci) { return fn(dev.handle(), pci); });
  }
  dev.note_failure("pci", NVML_ERROR_FUNCTION_NOT_FOUND);
  return std::nullopt;
}

// The first set bit of an affinity mask, read as the NUMA node id.
std::optional<int> read_numa_node(NvmlDevice& dev) {
  std::vector<unsigned long> nodes(4, 0);
  auto mask = dev.read<bool>("numa", [&](bool* ok) {
    *ok = true;
    return call(dev.fn().nvmlDeviceGetMemoryAffinity, dev.handle(), static_cast<unsigned>(nodes.size()),
                nodes.data(), NVML_AFFINITY_SCOPE_NODE);
  });
  if (!mask) return std::nullopt;
  for (std::size_t word = 0; word < nodes.size(); ++word) {
    for (unsigned bit = 0; bit < 64; ++bit) {
      if ((nodes[word] >> bit) & 1UL) return static_cast<int>(word * 64 + bit);
    }
  }
  return std::nullopt;
}

std::vector<unsigned> read_cpu_affinity(NvmlDevice& dev) {
  const unsigned cpus = std::max(64U, std::thread::hardware_concurrency());
  std::vector<unsigned long> mask((cpus + 63) / 64, 0);
  std::vector<unsigned> out;
  auto ok = dev.read<bool>("cpu_affinity", [&](bool* done) {
    *done = true;
    return call(dev.fn().nvmlDeviceGetCpuAffinity, dev.handle(), static_cast<unsigned>(mask.size()), mask.data());
  });
  if (!ok) return out;
  for (std::size_t word = 0; word < mask.size(); ++word) {
    for (unsigned bit = 0; bit < 64; ++bit) {
      if ((mask[word] >> bit) & 1UL) out.push_back(static_cast<unsigned>(word * 64 + bit));
    }
  }
  return out;
}

// Minor number, brand, architecture, board part number, GPM support and NUMA/CPU affinity.
void read_board(NvmlDevice& dev) {
  const Functions& f = dev.fn();
  const nvmlDevice_t h = dev.handle();
  DeviceIdentity& id = dev.identity;
  id.board_part_number =
      read_string(dev, "part_number", f.nvmlDeviceGetBoardPartNumber, NVML_DEVICE_PART_NUMBER_BUFFER_SIZE);
  id.minor_number = dev.read<unsigned>("minor", [&](unsigned* v) { return call(f.nvmlDeviceGetMinorNumber, h, v); });
  if (auto brand = dev.read<int>("brand", [&](int* v) { return call(f.nvmlDeviceGetBrand, h, v); })) {
    id.brand = brand_name(*brand);
  }
  if (auto arch = dev.read<unsigned>("arch", [&](unsigned* v) { return call(f.nvmlDeviceGetArchitecture, h, v); })) {
    id.architecture = architecture_name(*arch);
  }
  if (auto gpm = dev.read<nvmlGpmSupport_t>("gpm_support", [&](nvmlGpmSupport_t* s) {
        s->version = NVML_GPM_SUPPORT_VERSION;
        return call(f.nvmlGpmQueryDeviceSupport, h, s);
      })) {
    id.gpm_supported = gpm->isSupportedDevice != 0;
  }
  id.numa_node = read_numa_node(dev);
  id.cpu_affinity = read_cpu_affinity(dev);
}

}  // namespace

void read_identity(NvmlDevice& dev, ValueGroups groups) {
  const ValueGroups todo = groups.without(dev.identity_read);
  if (todo.empty()) return;
  const auto wants = [&todo](ValueGroup g) { return todo.has(g); };
  const Functions& f = dev.fn();
  const nvmlDevice_t h = dev.handle();
  DeviceIdentity& id = dev.identity;
  id.index = dev.index();
  if (wants(ValueGroup::Uuid)) id.uuid = read_string(dev, "uuid", f.nvmlDeviceGetUUID, NVML_DEVICE_UUID_BUFFER_SIZE);
  if (wants(ValueGroup::Name)) id.name = read_string(dev, "name", f.nvmlDeviceGetName, NVML_DEVICE_NAME_BUFFER_SIZE);
  if (wants(ValueGroup::Serial)) {
    id.serial = read_string(dev, "serial", f.nvmlDeviceGetSerial, NVML_DEVICE_SERIAL_BUFFER_SIZE);
  }
  if (wants(ValueGroup::VbiosVersion)) {
    id.vbios_version = read_string(dev, "vbios", f.nvmlDeviceGetVbiosVersion, NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE);
  }
  if (wants(ValueGroup::Pci)) {
    if (auto pci = read_pci(dev)) {
      id.pci_bus_id = util::from_c_buffer(pci->busId, sizeof(pci->busId));
      id.pci_device_id = pci->pciDeviceId;
      id.pci_subsystem_id = pci->pciSubSystemId;
    }
  }
  if (wants(ValueGroup::ComputeCapability)) {
    int major = 0;
    int minor = 0;
    if (dev.read<bool>("cuda_cc", [&](bool* ok) {
          *ok = true;
          return call(f.nvmlDeviceGetCudaComputeCapability, h, &major, &minor);
        })) {
      id.cuda_capability = fmt::format("{}.{}", major, minor);
    }
  }
  if (wants(ValueGroup::Board)) read_board(dev);
  auto u = [&](std::string_view what, auto fn, auto... args) {
    return dev.read<unsigned>(what, [&](unsigned* v) { return call(fn, h, args..., v); });
  };
  if (wants(ValueGroup::PowerLimits)) {
    id.power_default_limit_mw = u("power_default_limit", f.nvmlDeviceGetPowerManagementDefaultLimit);
    unsigned min_mw = 0;
    unsigned max_mw = 0;
    if (dev.read<bool>("power_constraints", [&](bool* ok) {
          *ok = true;
          return call(f.nvmlDeviceGetPowerManagementLimitConstraints, h, &min_mw, &max_mw);
        })) {
      id.power_min_limit_mw = min_mw;
      id.power_max_limit_mw = max_mw;
    }
  }
  if (wants(ValueGroup::TemperatureThresholds)) {
    id.temp_shutdown_c = u("temp_shutdown", f.nvmlDeviceGetTemperatureThreshold, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN);
    id.temp_slowdown_c = u("temp_slowdown", f.nvmlDeviceGetTemperatureThreshold, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN);
    id.temp_gpu_max_c = u("temp_gpu_max", f.nvmlDeviceGetTemperatureThreshold, NVML_TEMPERATURE_THRESHOLD_GPU_MAX);
    id.temp_mem_max_c = u("temp_mem_max", f.nvmlDeviceGetTemperatureThreshold, NVML_TEMPERATURE_THRESHOLD_MEM_MAX);
  } else if (wants(ValueGroup::TemperatureSlowdown)) {
    id.temp_slowdown_c = u("temp_slowdown", f.nvmlDeviceGetTemperatureThreshold, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN);
  }
  if (wants(ValueGroup::MaxClocks)) {
    id.clock_graphics_max_mhz = u("clock_max_graphics", f.nvmlDeviceGetMaxClockInfo, NVML_CLOCK_GRAPHICS);
    id.clock_sm_max_mhz = u("clock_max_sm", f.nvmlDeviceGetMaxClockInfo, NVML_CLOCK_SM);
    id.clock_mem_max_mhz = u("clock_max_mem", f.nvmlDeviceGetMaxClockInfo, NVML_CLOCK_MEM);
    id.clock_video_max_mhz = u("clock_max_video", f.nvmlDeviceGetMaxClockInfo, NVML_CLOCK_VIDEO);
  }
  if (wants(ValueGroup::PcieLink)) {
    id.pcie_gen_max = u("pcie_gen_max", f.nvmlDeviceGetMaxPcieLinkGeneration);
    id.pcie_width_max = u("pcie_width_max", f.nvmlDeviceGetMaxPcieLinkWidth);
  }
  if (wants(ValueGroup::Fans)) id.fan_count = u("fan_count", f.nvmlDeviceGetNumFans);
  if (wants(ValueGroup::ClockEvents)) {
    auto reasons = [&](std::string_view what, auto fn) {
      return dev.read<unsigned long long>(what, [&](unsigned long long* v) { return call(fn, h, v); });
    };
    id.supported_clock_event_reasons = reasons("supported_events", f.nvmlDeviceGetSupportedClocksEventReasons);
    if (!id.supported_clock_event_reasons) {
      id.supported_clock_event_reasons = reasons("supported_throttle", f.nvmlDeviceGetSupportedClocksThrottleReasons);
    }
  }
  // The memory total comes with the first sample's memory read (read_sample): one call, not two.
  if (!dev.lost()) {
    dev.identity_read |= todo;
    if (todo.has(ValueGroup::TemperatureThresholds)) dev.identity_read |= {ValueGroup::TemperatureSlowdown};
  }
}

}  // namespace tarmac::gpu::detail
