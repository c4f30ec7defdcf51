// The backend interface: one vendor's way of producing a Snapshot. NVML is the only backend
// today; the interface keeps NVML types out of everything above gpu/.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tarmac/gpu/model.hpp"
#include "tarmac/gpu/value_groups.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::gpu {

// What a snapshot should include: which per-device values, and what beyond them.
struct SnapshotOptions {
  bool processes = true;   // running processes with host attribution
  bool slow = false;       // PCIe throughput and GPM (tens of ms per GPU on real hardware)
  bool topology = false;   // the GPU x GPU link matrix
  // Watch XID (critical error) events: the first snapshot that asks registers every device; each
  // one then collects the events that arrived since (Device::new_xids, Device::last_xid).
  bool xid_events = false;
  // The per-device values read; values of other groups stay empty (std::nullopt) in the snapshot.
  ValueGroups values = ValueGroups::all();
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Reads every device. Fails only when nothing can be read at all; per-value failures are data.
  [[nodiscard]] virtual Result<Snapshot> snapshot(const SnapshotOptions& options) = 0;
};

// Loads NVML (path: --nvml-lib; empty for $TARMAC_NVML_LIB or the default search) and opens every
// device. Values are read, and their support probed once, by the snapshots that ask for them.
[[nodiscard]] Result<std::unique_ptr<Backend>> open_nvml_backend(const std::string& library_path);

// What the driver's library said when a call failed, in its own terms, for a front end that must
// answer as the vendor's tools do (query, as nvidia-smi: the return code is its exit code).
struct DriverFailure {
  int code = 0;      // the library's return code (an nvmlReturn_t)
  std::string text;  // the library's own words for the code; empty when it gave none
};

// The DriverFailure behind an error of open_nvml_backend or Backend::snapshot; nullopt for any
// other error (no library, a library refused, a failure of tarmac's own).
[[nodiscard]] std::optional<DriverFailure> driver_failure(const Error& error);

}  // namespace tarmac::gpu
