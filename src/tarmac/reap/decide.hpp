// The decision (pure): for every GPU process, "candidate" or the one reason it is not. The reasons
// are checked in a fixed order, safety first: whatever protects a process is named before
// anything about its utilization, so the output says the strongest reason to leave it alone.
#pragma once

#include <string>
#include <vector>

#include "tarmac/reap/evidence.hpp"
#include "tarmac/reap/rules.hpp"

namespace tarmac::reap {

enum class Reason {
  Candidate,          // holds memory at a known 0 % for at least --idle-for, and nothing protects it
  NotVisible,         // no such process in this PID namespace (it ended, or reap runs in a container)
  Reaper,             // reap itself, or a process it runs under
  Protected,          // an allow-list rule (built in or configured)
  OtherUser,          // another user's, and the caller is not root
  InTarmacJob,        // a tarmac job's: the job's own limits end it
  InSlurmJob,         // a Slurm job's on a node slurmd manages
  NotHolding,         // not proven to have this GPU's device file open: the pid may not be the holder
  BelowMinMemory,     // holds less than --min-memory
  TooYoung,           // started less than reaper.min_age ago
  UnknownUtilization, // its utilization cannot be read: never idle, never killed
  Busy,               // its last reading is above 0 %
  ObservedTooShort,   // idle all the time it was watched, but watched less than --idle-for
  RecentlyBusy,       // watched long enough, but idle for less than --idle-for
};

struct Decision {
  Reason reason = Reason::NotVisible;
  std::string detail;  // the rule, the numbers: "reaper.allow_users (alice)", "idle 3m of 10m"
};

// The decision for each of `evidence` (same order), one per process: a process listed on several
// GPUs is a candidate on none unless it is one on all (a rank busy on one GPU and idle on another
// is busy; the detail names the other GPU).
[[nodiscard]] std::vector<Decision> decide(const std::vector<ProcessEvidence>& evidence, const ReaperConfig& config,
                                           const Caller& caller);

// One process's decision.
[[nodiscard]] Decision decide_one(const ProcessEvidence& evidence, const ReaperConfig& config, const Caller& caller);

// "candidate", "not-visible", "reaper", "protected", "other-user", "tarmac-job", "slurm-job",
// "not-holding", "below-min-memory", "too-young", "unknown-utilization", "busy", "observed-too-short",
// "recently-busy": the JSON's words (docs/reap.md).
[[nodiscard]] const char* to_string(Reason reason);
// The sentence for people: "another user's, and you are not root".
[[nodiscard]] const char* describe(Reason reason);

}  // namespace tarmac::reap
