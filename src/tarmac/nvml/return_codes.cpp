#include <fmt/format.h>
#include <utility>

#include "tarmac/nvml/library.hpp"

namespace tarmac::nvml {
namespace {

struct CodeText {
  nvmlReturn_t code;
  const char* name;
  const char* message;
};

constexpr CodeText kCodes[] = {
    {NVML_SUCCESS, "NVML_SUCCESS", "success"},
    {NVML_ERROR_UNINITIALIZED, "NVML_ERROR_UNINITIALIZED", "NVML was not initialised"},
    {NVML_ERROR_INVALID_ARGUMENT, "NVML_ERROR_INVALID_ARGUMENT", "an argument was invalid"},
    {NVML_ERROR_NOT_SUPPORTED, "NVML_ERROR_NOT_SUPPORTED", "not supported by this GPU or driver"},
    {NVML_ERROR_NO_PERMISSION, "NVML_ERROR_NO_PERMISSION",
     "permission denied (some values need root or the device files' group)"},
    {NVML_ERROR_ALREADY_INITIALIZED, "NVML_ERROR_ALREADY_INITIALIZED", "NVML was already initialised"},
    {NVML_ERROR_NOT_FOUND, "NVML_ERROR_NOT_FOUND", "not found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "NVML_ERROR_INSUFFICIENT_SIZE", "a buffer was too small"},
    {NVML_ERROR_INSUFFICIENT_POWER, "NVML_ERROR_INSUFFICIENT_POWER",
     "the GPU's external power cables are not properly attached"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "NVML_ERROR_DRIVER_NOT_LOADED",
     "the NVIDIA kernel driver is not loaded (check `lsmod | grep nvidia` and `dmesg`)"},
    {NVML_ERROR_TIMEOUT, "NVML_ERROR_TIMEOUT", "the driver timed out"},
    {NVML_ERROR_IRQ_ISSUE, "NVML_ERROR_IRQ_ISSUE", "the kernel driver saw an interrupt problem with the GPU"},
    {NVML_ERROR_LIBRARY_NOT_FOUND, "NVML_ERROR_LIBRARY_NOT_FOUND", "the NVML library could not be found"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "NVML_ERROR_FUNCTION_NOT_FOUND",
     "this driver's NVML does not have the function (an older driver)"},
    {NVML_ERROR_CORRUPTED_INFOROM, "NVML_ERROR_CORRUPTED_INFOROM", "the GPU's infoROM is corrupted"},
    {NVML_ERROR_GPU_IS_LOST, "NVML_ERROR_GPU_IS_LOST",
     "the GPU has fallen off the bus or is otherwise inaccessible (check `dmesg` for Xid 79)"},
    {NVML_ERROR_RESET_REQUIRED, "NVML_ERROR_RESET_REQUIRED", "the GPU needs a reset"},
    {NVML_ERROR_OPERATING_SYSTEM, "NVML_ERROR_OPERATING_SYSTEM",
     "the operating system or a cgroup blocked access to the GPU device"},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
     "the NVML library and the kernel driver have different versions (reboot or reload the driver)"},
    {NVML_ERROR_IN_USE, "NVML_ERROR_IN_USE", "the GPU is in use"},
    {NVML_ERROR_MEMORY, "NVML_ERROR_MEMORY", "out of memory"},
    {NVML_ERROR_NO_DATA, "NVML_ERROR_NO_DATA", "no data"},
    {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED", "not available with ECC enabled"},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "NVML_ERROR_INSUFFICIENT_RESOURCES", "out of driver resources"},
    {NVML_ERROR_FREQ_NOT_SUPPORTED, "NVML_ERROR_FREQ_NOT_SUPPORTED", "frequency not supported"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
     "the structure version is not supported by this driver"},
    {NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN", "an unknown driver error occurred"},
};

const CodeText* find(nvmlReturn_t code) {
  for (const auto& entry : kCodes) {
    if (entry.code == code) return &entry;
  }
  return nullptr;
}

}  // namespace

std::string return_code_name(nvmlReturn_t code) {
  const CodeText* entry = find(code);
  return entry != nullptr ? entry->name : fmt::format("NVML_ERROR_{}", code);
}

std::string return_code_message(nvmlReturn_t code) {
  const CodeText* entry = find(code);
  return entry != nullptr ? entry->message : fmt::format("unknown NVML return code {}", code);
}

Error nvml_error(std::string_view call, nvmlReturn_t code, std::string library_text) {
  return make_error(Error::Code::External,
                    fmt::format("{} failed: {} ({})", call, return_code_message(code), return_code_name(code)),
                    Failure{code, std::move(library_text)});
}

const Failure* failure_of(const Error& error) { return error.cause_as<Failure>(); }

}  // namespace tarmac::nvml
