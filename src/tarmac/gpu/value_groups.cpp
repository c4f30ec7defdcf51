#include "tarmac/gpu/value_groups.hpp"

namespace tarmac::gpu {

std::string_view to_string(ValueGroup group) {
  switch (group) {
    case ValueGroup::Name: return "Name";
    case ValueGroup::Uuid: return "Uuid";
    case ValueGroup::Serial: return "Serial";
    case ValueGroup::VbiosVersion: return "VbiosVersion";
    case ValueGroup::Pci: return "Pci";
    case ValueGroup::ComputeCapability: return "ComputeCapability";
    case ValueGroup::Board: return "Board";
    case ValueGroup::TemperatureThresholds: return "TemperatureThresholds";
    case ValueGroup::MaxClocks: return "MaxClocks";
    case ValueGroup::Memory: return "Memory";
    case ValueGroup::PowerLimits: return "PowerLimits";
    case ValueGroup::PcieLink: return "PcieLink";
    case ValueGroup::Fans: return "Fans";
    case ValueGroup::ClockEvents: return "ClockEvents";
    case ValueGroup::PersistenceMode: return "PersistenceMode";
    case ValueGroup::DisplayMode: return "DisplayMode";
    case ValueGroup::ComputeMode: return "ComputeMode";
    case ValueGroup::MigMode: return "MigMode";
    case ValueGroup::EccMode: return "EccMode";
    case ValueGroup::Bar1: return "Bar1";
    case ValueGroup::Utilization: return "Utilization";
    case ValueGroup::CodecUtilization: return "CodecUtilization";
    case ValueGroup::Temperature: return "Temperature";
    case ValueGroup::Power: return "Power";
    case ValueGroup::Energy: return "Energy";
    case ValueGroup::ClockGraphics: return "ClockGraphics";
    case ValueGroup::ClockSm: return "ClockSm";
    case ValueGroup::ClockMem: return "ClockMem";
    case ValueGroup::ClockVideo: return "ClockVideo";
    case ValueGroup::ApplicationsClocks: return "ApplicationsClocks";
    case ValueGroup::PerformanceState: return "PerformanceState";
    case ValueGroup::EccErrors: return "EccErrors";
    case ValueGroup::RetiredPages: return "RetiredPages";
    case ValueGroup::RemappedRows: return "RemappedRows";
    case ValueGroup::TemperatureSlowdown: return "TemperatureSlowdown";
    case ValueGroup::EnforcedPowerLimit: return "EnforcedPowerLimit";
    case ValueGroup::EccUncorrectedVolatile: return "EccUncorrectedVolatile";
    case ValueGroup::ProcessUtilization: return "ProcessUtilization";
    case ValueGroup::ProcessHost: return "ProcessHost";
  }
  return "unknown";
}

}  // namespace tarmac::gpu
