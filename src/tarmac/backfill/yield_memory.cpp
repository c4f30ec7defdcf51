// The yield's confirmation through NVML (yield_memory.hpp).
#include "tarmac/backfill/yield_memory.hpp"

#include <algorithm>
#include <atomic>
#include <fmt/format.h>

namespace tarmac::backfill {

const char* to_string(MemoryOutcome outcome) {
  switch (outcome) {
    case MemoryOutcome::Freed: return "freed";
    case MemoryOutcome::Held: return "held";
    case MemoryOutcome::Unknown: return "unknown";
  }
  return "unknown";
}

MemoryWait wait_memory_freed(const ServerMemory& look, const sched::Job& server, const util::Clock& clock,
                             long long bound_ms, long long every_ms) {
  static const std::atomic<bool> never{false};
  MemoryWait w;
  const long long start = clock.monotonic_ms();
  for (;;) {
    const auto held = look(server);
    ++w.looks;
    if (!held) {
      w.outcome = MemoryOutcome::Unknown;
      break;
    }
    w.held_bytes = *held;
    if (*held == 0) {
      w.outcome = MemoryOutcome::Freed;
      break;
    }
    const long long now = clock.monotonic_ms();
    if (now - start >= bound_ms) {
      w.outcome = MemoryOutcome::Held;
      break;
    }
    clock.sleep_until(std::min(now + every_ms, start + bound_ms), never);
  }
  w.ms = clock.monotonic_ms() - start;
  return w;
}

std::uint64_t memory_of(const gpu::Snapshot& snapshot, const std::vector<std::string>& uuids,
                        const std::function<bool(unsigned pid)>& of_server) {
  std::uint64_t bytes = 0;
  for (const auto& d : snapshot.devices) {
    if (!d.id.uuid || std::find(uuids.begin(), uuids.end(), *d.id.uuid) == uuids.end()) continue;
    for (const auto& p : d.processes) {
      if (of_server(p.pid)) bytes += p.used_mem_bytes.value_or(1);
    }
  }
  return bytes;
}

bool process_of_job(const host::ProcReader& proc, unsigned pid, long long job_id, unsigned uid) {
  if (proc.owner_uid(pid) != uid) return false;  // read before the environment, which a process can stall
  const auto id = proc.environ_value(pid, "TARMAC_JOB_ID");
  if (!id.ok()) return true;  // unknown: counted, see the header
  return *id && **id == std::to_string(job_id);
}

ServerMemory nvml_server_memory(OpenBackend open, util::LogSink log) {
  struct Look {
    OpenBackend open;
    util::LogSink log;
    std::unique_ptr<gpu::Backend> backend;
    host::ProcReader proc;
  };
  auto state = std::make_shared<Look>(Look{std::move(open), std::move(log), nullptr, host::ProcReader()});
  return [state](const sched::Job& server) -> std::optional<std::uint64_t> {
    const auto failed = [&](const std::string& why) -> std::optional<std::uint64_t> {
      state->backend.reset();
      if (state->log) state->log(util::LogLevel::Warning, "backfill: the yield cannot ask NVML: " + why);
      return std::nullopt;
    };
    if (!state->backend) {
      auto b = state->open();
      if (!b.ok()) return failed(b.error().message);
      state->backend = std::move(*b);
    }
    // Only the process lists: no per-device values beyond the UUID (read once), no host facts.
    auto snap = state->backend->snapshot(
        gpu::SnapshotOptions{.processes = true, .values = gpu::ValueGroups{gpu::ValueGroup::Uuid}});
    if (!snap.ok()) return failed(snap.error().message);
    return memory_of(*snap, server.gpu_uuids,
                     [&](unsigned pid) { return process_of_job(state->proc, pid, server.id, server.uid); });
  };
}

}  // namespace tarmac::backfill
