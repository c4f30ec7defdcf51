// Function-pointer types for every NVML entry point in nvml_functions.def, generated from that one
// table: PFN_<name> is the exact C signature of <name>.
#pragma once

#include "tarmac/nvml/nvml_types.hpp"

namespace tarmac::nvml {

enum class Need { Required, Optional };

#define X(name, params, need) using PFN_##name = nvmlReturn_t(*) params;
#include "tarmac/nvml/nvml_functions.def"
#undef X

// nvmlErrorString is the one entry point that does not return nvmlReturn_t.
using PFN_nvmlErrorString = const char* (*)(nvmlReturn_t result);

}  // namespace tarmac::nvml
