// Ending a candidate (`reap --kill`): every process is reached through a pidfd opened after its
// identity (pid, start time, boot) was fixed and checked again before every signal, so a pid that
// now names another process is never signalled. SIGTERM to the holder and its tree, --grace for
// them to end, SIGKILL to what is left; a defunct holder through its parent, an uninterruptible
// one reported and left; then the driver is asked until the memory is free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/backend.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/reap/evidence.hpp"
#include "tarmac/reap/rules.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::reap {

enum class Outcome {
  Ended,            // every process of the tree ended after SIGTERM
  Killed,           // some needed SIGKILL after the grace
  Gone,             // it had ended before the first signal: nothing was sent
  IdentityChanged,  // its pid names another process now: nothing was sent
  Uninterruptible,  // in D state: reported and left alone
  Refused,          // a rule forbids it (its defunct parent is protected, not yours, init...)
  Survived,         // still running after SIGKILL (stuck in the kernel)
  Failed,           // a signal could not be sent
};

// One signal sent (or not) to one process.
struct Step {
  unsigned pid = 0;
  std::string role;  // "holder", "descendant", "hidden", "parent"
  int signal = 0;
  bool sent = false;
  std::string note;  // why not sent, or the error
};

struct KillResult {
  Outcome outcome = Outcome::Failed;
  std::vector<Step> steps;
  int last_signal = 0;                     // the strongest signal sent (SIGTERM, SIGKILL), 0: none
  std::optional<bool> memory_freed;        // nullopt: not asked (nothing was sent)
  std::optional<std::uint64_t> freed_bytes;
  long long took_ms = 0;                   // from the first signal to the memory freed (or given up)
  std::string message;
};

// A process of the tree that is to be signalled, fixed when it was chosen.
struct Target {
  host::ProcessIdentity identity;
  std::string role;
};

// Signals `targets` (SIGTERM, then SIGKILL after `grace_ms` to those left), each through a pidfd
// opened and checked against its identity before every signal. Steps are appended to `result`.
// Returns whether every target has ended.
[[nodiscard]] bool end_targets(const std::vector<Target>& targets, const host::ProcReader& proc, long long grace_ms,
                               KillResult& result);

// Ends the candidate `evidence` (decided with decide.hpp) and waits for its memory.
[[nodiscard]] KillResult reap_process(const ProcessEvidence& evidence, const ReaperConfig& config, const Caller& caller,
                                      const host::ProcReader& proc, gpu::Backend& backend, const util::Clock& clock);

// "ended", "killed", "gone", "identity-changed", "uninterruptible", "refused", "survived", "failed".
[[nodiscard]] const char* to_string(Outcome outcome);

}  // namespace tarmac::reap
