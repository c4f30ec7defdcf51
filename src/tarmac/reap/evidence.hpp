// Everything reap knows about one GPU process when it decides: what NVML says, what /proc says,
// what was observed of it over time, and who else holds the GPU with it.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/model.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/reap/history.hpp"

namespace tarmac::reap {

// A process that holds the GPU with a listed one without being listed itself: a child that
// inherited the device files (a DataLoader worker), or one in the same container.
struct HiddenHolder {
  enum class Relation { Descendant, SameContainer };
  unsigned pid = 0;
  Relation relation = Relation::Descendant;
  std::optional<std::string> name;
  std::optional<unsigned> uid;
  std::vector<std::string> devices;  // its /dev/nvidia* files
};

// Where the evidence of idleness came from.
enum class EvidenceSource {
  Store,  // the agent's store recorded this machine
  Watch,  // reap watched for --window itself
};

struct ProcessEvidence {
  unsigned gpu = 0;
  std::optional<std::string> gpu_uuid;
  gpu::GpuProcess process;                       // the latest NVML listing, with host facts
  std::optional<host::ProcessIdentity> identity; // fixed when first seen; nullopt: not visible here
  IdleHistory history;
  EvidenceSource source = EvidenceSource::Watch;
  std::optional<std::string> tarmac_job;         // TARMAC_JOB_ID of its job, or the job of a lease it holds
  std::optional<std::string> tty;                // its controlling terminal
  std::vector<unsigned> children;                // direct children
  std::vector<HiddenHolder> hidden;              // unlisted holders of the same GPU, tied to it
  std::optional<long long> age_ms;               // since it started; nullopt when unknown
  // The GPU's own device file (/dev/nvidiaN: major 195, the GPU's minor); nullopt where it cannot
  // be told (no minor number, MIG mode): then no process of the GPU is ever a candidate.
  std::optional<host::DeviceNumber> device_file;
  // Whether the process has that file open (fstat of its descriptors): a pid NVML lists without it
  // is not tied to the process that has the pid now (the listed one ended, its context kept alive
  // by a child that inherited the file), and is never a candidate.
  host::Holding holding = host::Holding::Unknown;
  // Set when the driver's listing of this (GPU, pid) is not proven to be this process's: the store
  // or the watch saw the pid listed on the GPU for a process of another or unknown start time up
  // to kListingMarginMs before this one started, or later (a stale context, left by a process that
  // ended while a child kept its device file, listed under a pid that is now another process's).
  // The text says what was seen; such a listing is never a candidate (`not-holding`).
  std::optional<std::string> listed_before;
};

// What the caller will do with the decisions.
enum class Intent {
  Report,  // a dry run, or a pass that only shows
  Kill,    // --kill: watch evidence alone is not enough (docs/reap.md "Safety checks")
};

// Who runs reap, and facts about the machine the rules depend on.
struct Caller {
  uid_t uid = 0;
  pid_t pid = 0;                       // reap's own pid: it and its ancestors are never candidates
  std::vector<unsigned> ancestors;     // reap's parent, its parent, ... up to 1
  bool slurm_manages_node = false;     // slurmd runs here: a Slurm job's processes are Slurm's to end
  Intent intent = Intent::Report;
  [[nodiscard]] bool is_root() const { return uid == 0; }
};

[[nodiscard]] const char* to_string(HiddenHolder::Relation relation);
[[nodiscard]] const char* to_string(EvidenceSource source);

}  // namespace tarmac::reap
