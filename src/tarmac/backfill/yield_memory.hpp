// The yield's confirmation (docs/backfill.md "Yield", issue 16): once a managed Ollama server has
// unloaded its model, NVML is asked, for a bounded time, until none of the server's processes holds
// memory on its GPUs; only then does the scheduler signal it. The look is a function, so that the
// wait is tested without NVML; nvml_server_memory() is the agent's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/backend.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/sched/job.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/log.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::backfill {

// The GPU memory (bytes) that `server`'s processes hold on its GPUs now, as NVML lists them;
// nullopt when NVML cannot be read.
using ServerMemory = std::function<std::optional<std::uint64_t>(const sched::Job& server)>;

// How long a yield waits for the memory to go before it signals the server all the same, and how
// often it asks meanwhile. The wait is on the scheduler's thread, which the issue accepts for a
// few seconds ("only then escalate"); an Ollama runner gives its memory back well within it.
inline constexpr long long kMemoryWaitMs = 5000;
inline constexpr long long kMemoryPollMs = 50;

enum class MemoryOutcome {
  Freed,     // NVML listed none of the server's memory
  Held,      // still listed when the wait's bound passed
  Unknown,   // NVML could not be read: the wait ended at once
};
[[nodiscard]] const char* to_string(MemoryOutcome outcome);

struct MemoryWait {
  MemoryOutcome outcome = MemoryOutcome::Unknown;
  long long ms = 0;             // the wait's length
  int looks = 0;                // how often NVML was asked
  std::uint64_t held_bytes = 0;  // at the last look that read
};

// Asks `look` every `every_ms` of `clock` until it says 0 bytes, for at most `bound_ms`; an
// unreadable NVML ends the wait (Unknown) rather than holding the scheduler for nothing.
[[nodiscard]] MemoryWait wait_memory_freed(const ServerMemory& look, const sched::Job& server,
                                           const util::Clock& clock, long long bound_ms = kMemoryWaitMs,
                                           long long every_ms = kMemoryPollMs);

// The bytes that the processes `of_server` accepts hold in `snapshot` on the GPUs `uuids`. A
// process whose memory NVML does not report counts as 1 byte (it holds some, for all we know); one
// listed with 0 bytes holds none.
[[nodiscard]] std::uint64_t memory_of(const gpu::Snapshot& snapshot, const std::vector<std::string>& uuids,
                                      const std::function<bool(unsigned pid)>& of_server);

// Whether process `pid` is of job `job_id`, run as `uid` (the server's account): run by that uid
// (another user's process is never the server's, whatever its environment says: nobody can make
// every yield wait its whole bound with a process of their own on the server's GPU), and with
// TARMAC_JOB_ID the job's, which the job's wrapper sets and the job's processes inherit (the
// scheduler's own rule, sched/daemon_flags.cpp). One of that uid whose environment could not be read
// in time counts as the job's: the wait is bounded, and signalling a server that still holds memory
// is what the wait is for. One whose owner cannot be read (gone) is not.
[[nodiscard]] bool process_of_job(const host::ProcReader& proc, unsigned pid, long long job_id, unsigned uid);

// ServerMemory through NVML: the backend is opened (with `open`) at the first look and kept, and
// opened again after a look that failed. For one thread (the scheduler's).
using OpenBackend = std::function<Result<std::unique_ptr<gpu::Backend>>()>;
[[nodiscard]] ServerMemory nvml_server_memory(OpenBackend open, util::LogSink log);

}  // namespace tarmac::backfill
