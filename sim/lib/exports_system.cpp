// Initialisation, shutdown, error strings, the internal export table and system-wide queries.
#include <cstring>
#include <fmt/format.h>

#include "context.hpp"
#include "fault_rule.hpp"
#include "proc_info.hpp"

namespace tarmac::nvml {

using sim::lib::Context;
using sim::lib::copy_string;
using sim::lib::guarded;

extern "C" {

TARMAC_SIM_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  const char* const function = __func__;
  // Every flag (NO_GPUS, NO_ATTACH) is accepted: the simulator always has its GPUs at hand.
  (void)flags;
  return guarded([&] { return Context::get().init(function); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  const char* const function = __func__;
  return guarded([&] { return Context::get().init(function); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlInit(void) {
  const char* const function = __func__;
  return guarded([&] { return Context::get().init(function); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlShutdown(void) {
  return guarded([&] { return Context::get().shutdown(); });
}

TARMAC_SIM_EXPORT const char* nvmlErrorString(nvmlReturn_t result) { return sim::return_code_text(result); }

TARMAC_SIM_EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void** table, const void* uuid) {
  (void)uuid;
  // A table whose first 8 bytes hold its own size and nothing else: nvidia-smi 535 takes it and
  // then makes no internal call at all.
  static const unsigned long long kTable[1] = {sizeof(kTable)};
  if (table == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *table = kTable;
  return NVML_SUCCESS;
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    return copy_string(e.sim->scenario().driver_version, version, length);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    return copy_string(e.sim->scenario().nvml_version, version, length);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cuda_driver_version) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (cuda_driver_version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *cuda_driver_version = e.sim->scenario().cuda_version;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cuda_driver_version) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (cuda_driver_version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *cuda_driver_version = e.sim->scenario().cuda_version;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (name == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    // The driver reports the program as started (argv[0]), falling back to the kernel's name.
    const auto pid_value = static_cast<pid_t>(pid);
    const std::vector<std::string> argv = sim::read_cmdline(pid_value);
    std::string value;
    if (!argv.empty() && !argv[0].empty()) {
      value = argv[0];
    } else if (auto comm = sim::read_comm(pid_value)) {
      value = *comm;
    } else {
      return NVML_ERROR_NOT_FOUND;
    }
    return copy_string(value, name, length);
  });
}

}  // extern "C"
}  // namespace tarmac::nvml
