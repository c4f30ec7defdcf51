// The library's one global: NVML is a process-wide C API, so its state (init count, the open
// simulation, event sets, GPM samples) lives in a single Context behind a mutex. Every export
// enters through one of the enter_* functions, which check initialisation, the handle, a lost
// GPU and the fault book, and hold the lock while the export reads the simulation.
#pragma once

#include <cmath>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "exports.hpp"
#include "simulation.hpp"

namespace tarmac::sim::lib {

using namespace tarmac::nvml;  // NVIDIA's names read best unqualified in the exports

// What an export works with once entered: the simulation (locked), the GPU and the time.
struct Entry {
  nvmlReturn_t rc = NVML_SUCCESS;  // anything else: answer it and stop
  Simulation* sim = nullptr;
  unsigned gpu = 0;
  std::optional<unsigned> mig;  // entered through a MIG device, GPU instance or compute instance handle
  double t = 0;
  std::unique_lock<std::mutex> lock;
};

// An event set handed out by nvmlEventSetCreate: what it listens to and what it has delivered.
struct EventSetState {
  double created_t = 0;  // only events after this simulated time are delivered
  std::vector<std::pair<unsigned, unsigned long long>> registered;  // (GPU, event mask)
  std::set<std::tuple<unsigned, double, unsigned long long, unsigned long long>> delivered;
};

// A GPM sample handed out by nvmlGpmSampleAlloc.
struct GpmSampleState {
  bool taken = false;
  unsigned gpu = 0;
  std::optional<unsigned> mig;  // nvmlGpmMigSampleGet's: the MIG device of that GPU instance
  double t = 0;
};

// Whether an export answers for MIG device handles too (the few that do on a real driver: name,
// UUID, memory, processes, the MIG queries); the others answer NOT_SUPPORTED for them.
enum class MigHandles { Refuse, Accept };

// The three kinds of MIG handle NVML hands out, each pointing into an array of its own.
enum class MigHandleKind { Device, GpuInstance, ComputeInstance };

class Context {
 public:
  static Context& get();

  nvmlReturn_t init(const char* function);
  nvmlReturn_t shutdown();

  Entry enter_system(const char* function);
  Entry enter_device(const char* function, nvmlDevice_t device, MigHandles mig = MigHandles::Refuse);
  // A GPU instance's or compute instance's handle (Entry::mig set), or INVALID_ARGUMENT.
  Entry enter_instance(const char* function, const void* handle, MigHandleKind kind);
  Entry enter_index(const char* function, unsigned index);

  // The handle of GPU `index`, and back (nullopt for anything that is not a live handle).
  [[nodiscard]] static nvmlDevice_t handle(unsigned index);
  [[nodiscard]] std::optional<unsigned> index_of(nvmlDevice_t device) const;  // call with the lock held
  // The handle of MIG device `mig` of GPU `gpu` (as a device, GPU instance or compute instance),
  // and back: (GPU, MIG device) for a handle of that kind naming a MIG device that exists now.
  [[nodiscard]] static void* mig_handle(unsigned gpu, unsigned mig, MigHandleKind kind);
  [[nodiscard]] std::optional<std::pair<unsigned, unsigned>> mig_of(const void* handle, MigHandleKind kind) const;

  // Objects handed out to callers, validated before use (never dereferenced blindly).
  std::set<EventSetState*> event_sets;
  std::set<GpmSampleState*> gpm_samples;

  // A fresh Entry for a second look at the simulation after sleeping (event waits).
  Entry relock();

  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  Context() = default;
  Entry finish_entry(Entry e, const char* function, std::optional<unsigned> gpu);
  // The GPU (or MIG device) of a handle checked: lost, then the fault book.
  Entry enter_gpu(Entry e, const char* function, unsigned gpu, std::optional<unsigned> mig);
  // The lock taken, and the simulation and its time when NVML is initialised (else UNINITIALIZED).
  Entry lock_initialised();

  std::mutex mu_;
  int refcount_ = 0;
  std::unique_ptr<Simulation> sim_;
  bool reported_ = false;
};

// With TARMAC_SIM_TRACE set, prints each call's function (noted by enter_*) and its result to
// stderr: how to find which call a client stumbles on.
nvmlReturn_t trace_result(nvmlReturn_t rc) noexcept;

// Exports name themselves to enter_* with `const char* const function = __func__;` taken
// outside the body's lambda: inside it, __func__ would be "operator()".
//
// Runs an export's body, turning any exception into NVML_ERROR_UNKNOWN: nothing may unwind
// through the C ABI into the host process.
template <typename Body>
nvmlReturn_t guarded(Body&& body) noexcept {
  try {
    return trace_result(body());
  } catch (...) {
    return trace_result(NVML_ERROR_UNKNOWN);
  }
}

// Copies a string into a caller's buffer the way NVML does: too small is INSUFFICIENT_SIZE.
nvmlReturn_t copy_string(const std::string& value, char* buffer, unsigned int length);

// The unversioned PCI functions' callers may hold the 52-byte v1 struct (busId[16], five ids,
// reserved words): V1 writes only the 36 bytes both layouts share; V3 writes all of nvmlPciInfo_t.
enum class PciLayout { V1, V3 };
void write_pci_info(const GpuSpec& gpu, nvmlPciInfo_t* out, PciLayout layout);

// A scenario's watts as NVML's milliwatts.
inline unsigned mw(double watts) { return static_cast<unsigned>(std::llround(watts * 1000.0)); }

}  // namespace tarmac::sim::lib
