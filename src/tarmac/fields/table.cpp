// The field table. Names, aliases and units are nvidia-smi 535's (`nvidia-smi --help-query-gpu`);
// values are printed the way it prints them (see value.hpp and readers.hpp).
#include "tarmac/fields/table.hpp"

#include <fmt/format.h>

#include "tarmac/fields/readers.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::fields {

namespace {

// What nvidia-smi prints for a utilization NVML does not give: [N/A] on a GPU in MIG mode.
Marker mig_or_unsupported(const ReadContext& c) {
  return c.device.modes.mig_mode_current == true ? Marker::NotAvailable : Marker::NotSupported;
}

using namespace detail;
using C = const ReadContext&;
using G = gpu::ValueGroup;

// Bits of NVML's clock-event (throttle) reason mask.
constexpr std::uint64_t kGpuIdle = 0x1;
constexpr std::uint64_t kAppClocks = 0x2;
constexpr std::uint64_t kSwPowerCap = 0x4;
constexpr std::uint64_t kHwSlowdown = 0x8;
constexpr std::uint64_t kSyncBoost = 0x10;
constexpr std::uint64_t kSwThermal = 0x20;
constexpr std::uint64_t kHwThermal = 0x40;
constexpr std::uint64_t kHwPowerBrake = 0x80;

template <std::uint64_t Bit>
Value reason(C c) {
  return reason_bit(c.device.sample.clock_event_reasons, c.device.id.supported_clock_event_reasons, Bit);
}

// The driver's major version (580 of "580.159.04"); 0 when unknown.
int driver_major(C c) {
  if (!c.snapshot.driver_version) return 0;
  int major = 0;
  for (const char ch : *c.snapshot.driver_version) {
    if (ch < '0' || ch > '9' || major > 100000) break;
    major = major * 10 + (ch - '0');
  }
  return major;
}

// Display mode: from driver 580 nvidia-smi prints it as deprecated and says whether a display is
// attached in display_attached instead (seen on an H200 with 580.159.04; bench/results/).
constexpr int kDisplayModeDeprecatedFrom = 580;

Value display_mode(C c) {
  if (driver_major(c) >= kDisplayModeDeprecatedFrom) {
    return Value::missing(Marker::Error, "Requested functionality has been deprecated");
  }
  return enabled_or(c.device.modes.display_mode);
}

Value display_attached(C c) {
  if (driver_major(c) < kDisplayModeDeprecatedFrom) return Value::missing(Marker::NotSupported);
  if (!c.device.modes.display_mode) return Value::missing(Marker::NotSupported);
  return Value::flag(*c.device.modes.display_mode, "Yes", "No");
}

Value pci_part(C c, int which) {
  if (!c.device.id.pci_bus_id) return Value::missing(Marker::NotSupported);
  const auto a = parse_pci_bus_id(*c.device.id.pci_bus_id);
  if (!a) return Value::missing(Marker::NotSupported);
  switch (which) {
    case 0: return Value::hex(a->domain, 4);
    case 1: return Value::hex(a->bus, 2);
    default: return Value::hex(a->device, 2);
  }
}

std::vector<FieldSpec> build_table() {
  const Scope S = Scope::System;
  const Scope D = Scope::Device;
  return {
      {"timestamp", {}, "", S, "", {}, "When the query was made, \"YYYY/MM/DD HH:MM:SS.msec\"",
       [](C c) { return Value::text(format_timestamp(c.snapshot.timestamp_unix_ms)); }},
      {"driver_version", {}, "", S, "", {}, "Version of the installed NVIDIA driver",
       [](C c) { return text_or(c.snapshot.driver_version); }},
      {"count", {}, "", S, "", {}, "Number of NVIDIA GPUs in the system",
       [](C c) { return Value::integer(c.gpu_count); }},
      {"name", {"gpu_name"}, "", D, "name", {G::Name}, "Product name", [](C c) { return text_or(c.device.id.name); }},
      {"serial", {"gpu_serial"}, "", D, "serial", {G::Serial}, "Board serial number",
       [](C c) { return text_or(c.device.id.serial); }},
      {"uuid", {"gpu_uuid"}, "", D, "uuid", {G::Uuid}, "Globally unique GPU identifier",
       [](C c) { return text_or(c.device.id.uuid); }},
      {"pci.bus_id", {"gpu_bus_id"}, "", D, "pci", {G::Pci}, "PCI bus id, \"domain:bus:device.function\" in hex",
       [](C c) { return text_or(c.device.id.pci_bus_id); }},
      {"pci.domain", {}, "", D, "pci", {G::Pci}, "PCI domain number, in hex", [](C c) { return pci_part(c, 0); }},
      {"pci.bus", {}, "", D, "pci", {G::Pci}, "PCI bus number, in hex", [](C c) { return pci_part(c, 1); }},
      {"pci.device", {}, "", D, "pci", {G::Pci}, "PCI device number, in hex", [](C c) { return pci_part(c, 2); }},
      {"pci.device_id", {}, "", D, "pci", {G::Pci}, "PCI vendor device id, in hex",
       [](C c) { return hex_or(c.device.id.pci_device_id, 8); }},
      {"pci.sub_device_id", {}, "", D, "pci", {G::Pci}, "PCI sub system id, in hex",
       [](C c) { return hex_or(c.device.id.pci_subsystem_id, 8); }},
      {"pcie.link.gen.current", {}, "", D, "pcie_gen", {G::PcieLink}, "Current PCIe link generation",
       [](C c) { return integer_or(c.device.sample.pcie_gen); }},
      {"pcie.link.gen.gpucurrent", {}, "", D, "pcie_gen", {G::PcieLink}, "Current PCIe link generation",
       [](C c) { return integer_or(c.device.sample.pcie_gen); }},
      {"pcie.link.gen.max", {},
       "", D, "pcie_gen_max", {G::PcieLink}, "Maximum PCIe link generation of this GPU and system",
       [](C c) { return integer_or(c.device.id.pcie_gen_max); }},
      {"pcie.link.width.current", {}, "", D, "pcie_width", {G::PcieLink}, "Current PCIe link width",
       [](C c) { return integer_or(c.device.sample.pcie_width); }},
      {"pcie.link.width.max", {},
       "", D, "pcie_width_max", {G::PcieLink}, "Maximum PCIe link width of this GPU and system",
       [](C c) { return integer_or(c.device.id.pcie_width_max); }},
      {"index", {},
       "", S, "", {}, "Zero based index of the GPU", [](C c) { return Value::integer(c.device.id.index); }},
      {"display_mode", {}, "", D, "display_mode", {G::DisplayMode}, "Whether a display is connected",
       display_mode},
      {"display_attached", {}, "", D, "display_mode", {G::DisplayMode}, "Whether a display is attached (driver 580 on)",
       display_attached},
      {"display_active", {}, "", D, "display_active", {G::DisplayMode}, "Whether a display is initialized on the GPU",
       [](C c) { return enabled_or(c.device.modes.display_active); }},
      {"persistence_mode", {}, "", D, "persistence", {G::PersistenceMode}, "Whether persistence mode is enabled",
       [](C c) { return enabled_or(c.device.modes.persistence_mode); }},
      // Windows' TCC/WDDM driver model: nvidia-smi documents it as always N/A on Linux.
      {"driver_model.current", {}, "", S, "", {}, "Windows driver model now; always [N/A] on Linux",
       [](C) { return Value::missing(Marker::NotAvailable); }},
      {"driver_model.pending", {}, "", S, "", {}, "Windows driver model after the next reboot; always [N/A] on Linux",
       [](C) { return Value::missing(Marker::NotAvailable); }},
      {"vbios_version", {}, "", D, "vbios", {G::VbiosVersion}, "BIOS of the GPU board",
       [](C c) { return text_or(c.device.id.vbios_version); }},
      {"fan.speed", {}, "%", D, "fan", {G::Fans}, "Intended fan speed, percent of maximum",
       [](C c) { return integer_or(c.device.sample.fan_pct, Marker::NotAvailable); }},
      {"pstate", {}, "", D, "pstate", {G::PerformanceState}, "Performance state, P0 (maximum) to P12 (minimum)",
       [](C c) {
         const auto& p = c.device.sample.pstate;
         return p ? Value::text(fmt::format("P{}", *p)) : Value::missing(Marker::NotSupported);
       }},
      {"clocks_event_reasons.supported", {"clocks_throttle_reasons.supported"}, "", D,
       "supported_events|supported_throttle", {G::ClockEvents}, "Bitmask of supported clock event reasons",
       [](C c) { return hex_or(c.device.id.supported_clock_event_reasons, 16); }},
      {"clocks_event_reasons.active", {"clocks_throttle_reasons.active"}, "", D,
       "clock_events|clock_throttle", {G::ClockEvents}, "Bitmask of active clock event reasons",
       [](C c) { return hex_or(c.device.sample.clock_event_reasons, 16); }},
      {"clocks_event_reasons.gpu_idle", {"clocks_throttle_reasons.gpu_idle"}, "", D,
       "clock_events|clock_throttle", {G::ClockEvents}, "Nothing runs and the clocks drop to idle", reason<kGpuIdle>},
      {"clocks_event_reasons.applications_clocks_setting", {"clocks_throttle_reasons.applications_clocks_setting"}, "", D,
       "clock_events|clock_throttle", {G::ClockEvents}, "Clocks limited by the applications clocks setting",
       reason<kAppClocks>},
      {"clocks_event_reasons.sw_power_cap", {"clocks_throttle_reasons.sw_power_cap"}, "", D,
       "clock_events|clock_throttle", {G::ClockEvents}, "Software power cap is reducing the clocks",
       reason<kSwPowerCap>},
      {"clocks_event_reasons.hw_slowdown", {"clocks_throttle_reasons.hw_slowdown"}, "", D,
       "clock_events|clock_throttle", {G::ClockEvents}, "Hardware slowdown (thermal or power brake) is engaged",
       reason<kHwSlowdown>},
      {"clocks_event_reasons.hw_thermal_slowdown", {"clocks_throttle_reasons.hw_thermal_slowdown"}, "", D,
       "clock_events|clock_throttle", {G::ClockEvents}, "Hardware thermal slowdown is engaged", reason<kHwThermal>},
      {"clocks_event_reasons.hw_power_brake_slowdown", {"clocks_throttle_reasons.hw_power_brake_slowdown"}, "", D,
       "clock_events|clock_throttle", {G::ClockEvents}, "External power brake slowdown is engaged",
       reason<kHwPowerBrake>},
      {"clocks_event_reasons.sw_thermal_slowdown", {"clocks_throttle_reasons.sw_thermal_slowdown"}, "", D,
       "clock_events|clock_throttle", {G::ClockEvents}, "Software thermal capping is reducing the clocks",
       reason<kSwThermal>},
      {"clocks_event_reasons.sync_boost", {"clocks_throttle_reasons.sync_boost"}, "", D,
       "clock_events|clock_throttle", {G::ClockEvents}, "Clocks held by a sync boost group", reason<kSyncBoost>},
      {"memory.total", {}, "MiB", D, "memory_v2|memory", {G::Memory}, "Total installed GPU memory",
       [](C c) { return mib_or(c.device.id.mem_total_bytes); }},
      {"memory.reserved", {}, "MiB", D, "memory_v2", {G::Memory}, "Memory reserved by the driver and firmware",
       [](C c) { return mib_or(c.device.sample.mem_reserved_bytes); }},
      {"memory.used", {}, "MiB", D, "memory_v2|memory", {G::Memory}, "Memory allocated by active contexts",
       [](C c) { return mib_or(c.device.sample.mem_used_bytes); }},
      {"memory.free", {}, "MiB", D, "memory_v2|memory", {G::Memory}, "Free memory",
       [](C c) { return mib_or(c.device.sample.mem_free_bytes); }},
      {"compute_mode", {},
       "", D, "compute_mode", {G::ComputeMode}, "Default, Exclusive_Thread, Prohibited or Exclusive_Process",
       [](C c) { return text_or(c.device.modes.compute_mode); }},
      {"compute_cap", {}, "", D, "cuda_cc", {G::ComputeCapability}, "CUDA compute capability, major.minor",
       [](C c) { return text_or(c.device.id.cuda_capability); }},
      // In MIG mode the board has no utilization: nvidia-smi prints [N/A] there, not [Not Supported].
      {"utilization.gpu", {}, "%", D, "utilization", {G::Utilization, G::MigMode}, "Percent of time a kernel was running",
       [](C c) { return integer_or(c.device.sample.util_gpu_pct, mig_or_unsupported(c)); }},
      {"utilization.memory", {},
       "%", D, "utilization", {G::Utilization, G::MigMode}, "Percent of time device memory was read or written",
       [](C c) { return integer_or(c.device.sample.util_mem_pct, mig_or_unsupported(c)); }},
      {"utilization.encoder", {}, "%", D, "encoder", {G::CodecUtilization}, "Percent of time the encoder was busy",
       [](C c) { return integer_or(c.device.sample.util_encoder_pct); }},
      {"utilization.decoder", {}, "%", D, "decoder", {G::CodecUtilization}, "Percent of time the decoder was busy",
       [](C c) { return integer_or(c.device.sample.util_decoder_pct); }},
      {"ecc.mode.current", {}, "", D, "ecc_mode", {G::EccMode}, "ECC mode now",
       [](C c) { return enabled_or(c.device.modes.ecc_mode_current, Marker::NotAvailable); }},
      {"ecc.mode.pending", {}, "", D, "ecc_mode", {G::EccMode}, "ECC mode after the next reboot",
       [](C c) { return enabled_or(c.device.modes.ecc_mode_pending, Marker::NotAvailable); }},
      {"ecc.errors.corrected.volatile.total", {},
       "", D, "ecc_cv", {G::EccErrors}, "Corrected ECC errors since the driver loaded",
       [](C c) { return integer_or(c.device.sample.ecc_corrected_volatile, Marker::NotAvailable); }},
      {"ecc.errors.corrected.aggregate.total", {}, "", D, "ecc_ca", {G::EccErrors}, "Corrected ECC errors, lifetime",
       [](C c) { return integer_or(c.device.sample.ecc_corrected_aggregate, Marker::NotAvailable); }},
      {"ecc.errors.uncorrected.volatile.total", {},
       "", D, "ecc_uv", {G::EccErrors}, "Uncorrected ECC errors since the driver loaded",
       [](C c) { return integer_or(c.device.sample.ecc_uncorrected_volatile, Marker::NotAvailable); }},
      {"ecc.errors.uncorrected.aggregate.total", {},
       "", D, "ecc_ua", {G::EccErrors}, "Uncorrected ECC errors, lifetime",
       [](C c) { return integer_or(c.device.sample.ecc_uncorrected_aggregate, Marker::NotAvailable); }},
      {"retired_pages.single_bit_ecc.count", {"retired_pages.sbe"}, "", D, "retired_sbe", {G::RetiredPages},
       "Pages retired for multiple single bit ECC errors",
       [](C c) { return integer_or(c.device.sample.retired_pages_sbe, Marker::NotAvailable); }},
      {"retired_pages.double_bit.count", {"retired_pages.dbe"}, "", D, "retired_dbe", {G::RetiredPages},
       "Pages retired for a double bit ECC error",
       [](C c) { return integer_or(c.device.sample.retired_pages_dbe, Marker::NotAvailable); }},
      {"retired_pages.pending", {},
       "", D, "retired_pending", {G::RetiredPages}, "Pages pending retirement at the next reboot",
       [](C c) {
         return c.device.sample.retired_pages_pending ? Value::flag(*c.device.sample.retired_pages_pending, "Yes", "No")
                                                      : Value::missing(Marker::NotAvailable);
       }},
      {"temperature.gpu", {}, "", D, "temperature", {G::Temperature}, "Core GPU temperature, degrees C",
       [](C c) { return integer_or(c.device.sample.temp_c); }},
      {"power.draw", {}, "W", D, "power", {G::Power}, "Last measured power draw of the board",
       [](C c) { return watts_or(c.device.sample.power_mw); }},
      {"power.limit", {}, "W", D, "power_limit", {G::PowerLimits}, "Software power limit",
       [](C c) { return watts_or(c.device.modes.power_limit_mw); }},
      {"enforced.power.limit", {},
       "W", D, "enforced_power_limit", {G::PowerLimits}, "Power limit the power management enforces",
       [](C c) { return watts_or(c.device.modes.enforced_power_limit_mw); }},
      {"power.default_limit", {}, "W", D, "power_default_limit", {G::PowerLimits}, "Default power limit",
       [](C c) { return watts_or(c.device.id.power_default_limit_mw); }},
      {"power.min_limit", {}, "W", D, "power_constraints", {G::PowerLimits}, "Lowest power limit that can be set",
       [](C c) { return watts_or(c.device.id.power_min_limit_mw); }},
      {"power.max_limit", {}, "W", D, "power_constraints", {G::PowerLimits}, "Highest power limit that can be set",
       [](C c) { return watts_or(c.device.id.power_max_limit_mw); }},
      {"clocks.current.graphics", {"clocks.gr"}, "MHz", D, "clock_graphics", {G::ClockGraphics},
       "Current graphics (shader) clock",
       [](C c) { return integer_or(c.device.sample.clock_graphics_mhz); }},
      {"clocks.current.sm", {"clocks.sm"}, "MHz", D, "clock_sm", {G::ClockSm}, "Current SM clock",
       [](C c) { return integer_or(c.device.sample.clock_sm_mhz); }},
      {"clocks.current.memory", {"clocks.mem"}, "MHz", D, "clock_mem", {G::ClockMem}, "Current memory clock",
       [](C c) { return integer_or(c.device.sample.clock_mem_mhz); }},
      {"clocks.current.video", {"clocks.video"}, "MHz", D, "clock_video", {G::ClockVideo},
       "Current video encoder/decoder clock",
       [](C c) { return integer_or(c.device.sample.clock_video_mhz); }},
      // The model reads the SM applications clock; NVIDIA GPUs run graphics and SM at one clock.
      {"clocks.applications.graphics", {"clocks.applications.gr"}, "MHz", D, "clock_app_sm", {G::ApplicationsClocks},
       "Applications clock, graphics", [](C c) { return integer_or(c.device.sample.clock_sm_app_mhz); }},
      {"clocks.applications.memory", {"clocks.applications.mem"}, "MHz", D, "clock_app_mem", {G::ApplicationsClocks},
       "Applications clock, memory", [](C c) { return integer_or(c.device.sample.clock_mem_app_mhz); }},
      {"clocks.max.graphics", {"clocks.max.gr"}, "MHz", D, "clock_max_graphics", {G::MaxClocks},
       "Maximum graphics clock",
       [](C c) { return integer_or(c.device.id.clock_graphics_max_mhz); }},
      {"clocks.max.sm", {}, "MHz", D, "clock_max_sm", {G::MaxClocks}, "Maximum SM clock",
       [](C c) { return integer_or(c.device.id.clock_sm_max_mhz); }},
      {"clocks.max.memory", {"clocks.max.mem"}, "MHz", D, "clock_max_mem", {G::MaxClocks}, "Maximum memory clock",
       [](C c) { return integer_or(c.device.id.clock_mem_max_mhz); }},
      {"mig.mode.current", {}, "", D, "mig", {G::MigMode}, "MIG mode now",
       [](C c) { return enabled_or(c.device.modes.mig_mode_current, Marker::NotAvailable); }},
      {"mig.mode.pending", {}, "", D, "mig", {G::MigMode}, "MIG mode after the next GPU reset",
       [](C c) { return enabled_or(c.device.modes.mig_mode_pending, Marker::NotAvailable); }},
  };
}

std::vector<FieldSpec> build_groups() {
  std::vector<FieldSpec> out;
  for (const std::string_view name :
       {"vgpu_driver_capability", "vgpu_device_capability", "driver_model", "inforom", "reset_status", "gom",
        "clocks_event_reasons", "memory", "utilization", "encoder.stats", "ecc.mode", "ecc.errors", "retired_pages",
        "clocks.applications", "clocks.default_applications", "clocks.max", "mig.mode", "gsp.mode",
        "protected_memory"}) {
    FieldSpec group;
    group.name = name;
    group.description = "a section of nvidia-smi's field list, not a field";
    out.push_back(group);
  }
  return out;
}

struct ErrorWords {
  std::string_view name;
  std::string_view words;
};

// nvidia-smi's own wording of NVML's errors (it does not use nvmlErrorString's).
constexpr ErrorWords kErrorWords[] = {
    {"NVML_ERROR_UNINITIALIZED", "Uninitialized"},
    {"NVML_ERROR_INVALID_ARGUMENT", "Invalid Argument"},
    {"NVML_ERROR_NOT_SUPPORTED", "Not Supported"},
    {"NVML_ERROR_NO_PERMISSION", "Insufficient Permissions"},
    {"NVML_ERROR_ALREADY_INITIALIZED", "Already Initialized"},
    {"NVML_ERROR_NOT_FOUND", "Not Found"},
    {"NVML_ERROR_INSUFFICIENT_SIZE", "Insufficient Size"},
    {"NVML_ERROR_INSUFFICIENT_POWER", "Insufficient External Power"},
    {"NVML_ERROR_DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {"NVML_ERROR_TIMEOUT", "Timeout"},
    {"NVML_ERROR_IRQ_ISSUE", "Interrupt Request Issue"},
    {"NVML_ERROR_LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {"NVML_ERROR_FUNCTION_NOT_FOUND", "Function Not Found"},
    {"NVML_ERROR_CORRUPTED_INFOROM", "Corrupted infoROM"},
    {"NVML_ERROR_GPU_IS_LOST", "GPU is lost"},
    {"NVML_ERROR_RESET_REQUIRED", "GPU requires reset"},
    {"NVML_ERROR_OPERATING_SYSTEM", "GPU access blocked by the operating system"},
    {"NVML_ERROR_LIB_RM_VERSION_MISMATCH", "Driver/library version mismatch"},
    {"NVML_ERROR_IN_USE", "In use by another client"},
    {"NVML_ERROR_MEMORY", "Insufficient Memory"},
    {"NVML_ERROR_NO_DATA", "No data"},
    {"NVML_ERROR_VGPU_ECC_NOT_SUPPORTED", "vGPU ECC not supported"},
    {"NVML_ERROR_INSUFFICIENT_RESOURCES", "Insufficient Resources"},
    {"NVML_ERROR_FREQ_NOT_SUPPORTED", "Invalid Frequency"},
    {"NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "Argument version mismatch"},
    {"NVML_ERROR_DEPRECATED", "Requested functionality has been deprecated"},
    {"NVML_ERROR_NOT_READY", "System is not in ready state"},
};

// The failed read behind `field`, if the backend recorded one: ReadError::message ends with
// "(NVML_ERROR_...)".
const gpu::ReadError* failed_read(const FieldSpec& field, const gpu::Device& device) {
  if (field.read_key.empty()) return nullptr;
  for (const auto& key : util::split(field.read_key, '|')) {
    for (const auto& e : device.errors) {
      if (e.what == key) return &e;
    }
  }
  return nullptr;
}

std::string_view error_name_of(std::string_view message) {
  const auto open = message.rfind('(');
  const auto close = message.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return {};
  return message.substr(open + 1, close - open - 1);
}

}  // namespace

std::span<const FieldSpec> all_fields() {
  static const std::vector<FieldSpec> table = build_table();
  return table;
}

const FieldSpec* find_field(std::string_view name) {
  for (const auto& f : all_fields()) {
    if (f.name == name) return &f;
    for (const auto& a : f.aliases) {
      if (a == name) return &f;
    }
  }
  return nullptr;
}

const FieldSpec* find_group(std::string_view name) {
  static const std::vector<FieldSpec> groups = build_groups();
  for (const auto& g : groups) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

Result<std::vector<const FieldSpec*>> parse_field_list(std::string_view list) {
  std::vector<const FieldSpec*> out;
  for (const auto& name : util::split(list, ',')) {
    if (name.empty()) continue;
    const FieldSpec* f = find_field(name);
    if (f == nullptr) f = find_group(name);
    if (f == nullptr) return make_error(Error::Code::Invalid, name);
    out.push_back(f);
  }
  return out;
}

gpu::ValueGroups value_groups(std::span<const FieldSpec* const> fields) {
  gpu::ValueGroups out;
  for (const FieldSpec* f : fields) out |= f->groups;
  return out;
}

std::string nvml_error_words(std::string_view error_name) {
  for (const auto& e : kErrorWords) {
    if (e.name == error_name) return std::string(e.words);
  }
  return "Unknown Error";
}

Value read_field(const FieldSpec& field, const ReadContext& context) {
  if (field.read == nullptr) return Value::missing(Marker::NotAvailable);  // a group: never printed
  if (field.scope == Scope::Device && context.device.lost) return Value::missing(Marker::GpuLost);
  Value v = field.read(context);
  if (v.is_missing()) {
    if (const auto* e = failed_read(field, context.device)) {
      return Value::missing(Marker::Error, nvml_error_words(error_name_of(e->message)));
    }
  }
  return v;
}

}  // namespace tarmac::fields
