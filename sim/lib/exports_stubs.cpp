// The entry points nvidia-smi 535 looks up that the simulator does not simulate
// (sim/entry_points/nvidia_smi_stubs.def): each answers NOT_SUPPORTED without reading its
// arguments, which is safe for any C caller (the caller owns its argument registers and stack).
#include <cstdio>
#include <cstdlib>

#include "exports.hpp"

namespace tarmac::nvml {

namespace {

// TARMAC_SIM_TRACE=1 names each call of an unsimulated function: how to find what a client misses.
nvmlReturn_t not_simulated(const char* name) {
  static const bool trace = std::getenv("TARMAC_SIM_TRACE") != nullptr;
  if (trace) std::fprintf(stderr, "tarmac-sim: %s: not simulated (NOT_SUPPORTED)\n", name);
  return NVML_ERROR_NOT_SUPPORTED;
}

}  // namespace

extern "C" {

#define STUB(name) \
  TARMAC_SIM_EXPORT nvmlReturn_t name() { return not_simulated(#name); }
#include "entry_points/nvidia_smi_stubs.def"
#undef STUB

}  // extern "C"
}  // namespace tarmac::nvml
