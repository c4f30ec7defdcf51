// The C ABI of the simulated libnvidia-ml: every row of nvml_functions.def declared with its
// exact parameters and default visibility. Each export file includes this, so a definition whose
// signature differs from its table row does not compile (two C functions cannot share a name).
#pragma once

#include "tarmac/nvml/nvml_api.hpp"
#include "tarmac/nvml/nvml_types.hpp"

// Everything else in the library is hidden (-fvisibility=hidden and a linker version script).
#define TARMAC_SIM_EXPORT __attribute__((visibility("default")))

namespace tarmac::nvml {
extern "C" {

#define X(name, params, need) TARMAC_SIM_EXPORT nvmlReturn_t name params;
#include "tarmac/nvml/nvml_functions.def"
#undef X

TARMAC_SIM_EXPORT const char* nvmlErrorString(nvmlReturn_t result);
// nvidia-smi asks for an internal table at start-up; one that holds only its own size lets it go on.
TARMAC_SIM_EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void** table, const void* uuid);

}  // extern "C"
}  // namespace tarmac::nvml
