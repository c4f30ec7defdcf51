// Ending a candidate (`reap --kill`): every process is reached through a pidfd, and its identity
// (pid, start time, boot) is read after the pidfd was opened, before and after its facts (owner,
// parent, state) are read, and again before every signal, so a pid that now names another process
// is never signalled and no fact is another process's. The holder must still have the GPU's device
// file open; every descendant passes the rules the holder passed and must not be busy on any GPU,
// or nothing is sent. SIGTERM to the holder and its tree, --grace for them to end, SIGKILL to what
// is left unless the kill switch appeared meanwhile; a defunct leader only while it has live
// threads, an uninterruptible holder reported and left; then the driver is asked until the memory
// is free.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/backend.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/reap/decide.hpp"
#include "tarmac/reap/evidence.hpp"
#include "tarmac/reap/test_device.hpp"
#include "tarmac/reap/gather.hpp"
#include "tarmac/reap/rules.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::reap {

enum class Outcome {
  Ended,            // every process of the tree ended after SIGTERM
  Killed,           // some needed SIGKILL after the grace
  Gone,             // it had ended before the first signal: nothing was sent
  IdentityChanged,  // its pid names another process now: nothing was sent
  Uninterruptible,  // in D state: reported and left alone
  Refused,          // a check forbids it (a true zombie, not holding the device file now, a
                    // protected, job's or busy descendant...): nothing was sent
  Survived,         // still running after SIGKILL (stuck in the kernel)
  Failed,           // a signal could not be sent
  Stopped,          // the kill switch appeared: nothing more was sent (no SIGKILL after the grace)
};

// One signal sent (or not) to one process.
struct Step {
  unsigned pid = 0;
  std::string role;  // "holder", "descendant"
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

// Every pid the survey saw listed, with its decision there (--gpu and --user aside): a tree member
// the driver lists is ended only if the survey itself found it a candidate.
using SurveyDecisions = std::map<unsigned, Reason>;

// Ends the candidate `evidence` (decided with decide.hpp) and waits for its memory: Refused, with
// nothing sent, while the gate is closed. `leases` are the scheduler's live leases: a descendant in
// a tarmac job refuses the whole candidate, as does a member the driver lists whose decision in
// `surveyed` is not "candidate" (or that the survey did not see).
[[nodiscard]] KillResult reap_process(const ProcessEvidence& evidence, const ReaperConfig& config, const Caller& caller,
                                      const host::ProcReader& proc, gpu::Backend& backend, const util::Clock& clock,
                                      const SurveyDecisions& surveyed, const std::vector<JobLease>& leases = {});

// Whether the kill switch file `path` exists (lstat: a dangling link counts); false for "".
[[nodiscard]] bool kill_switch_on(const std::string& path);

// Asks the driver until `pid` no longer holds GPU `gpu`, for at most `wait_ms`: whether it let go.
[[nodiscard]] bool wait_memory_freed(gpu::Backend& backend, unsigned gpu, unsigned pid, long long wait_ms,
                                     const util::Clock& clock);

// "ended", "killed", "gone", "identity-changed", "uninterruptible", "refused", "survived", "failed",
// "stopped".
[[nodiscard]] const char* to_string(Outcome outcome);

}  // namespace tarmac::reap
