#include "tarmac/reap/pass.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <signal.h>

#include <algorithm>
#include <fmt/format.h>
#include <map>

#include "tarmac/store/recorder.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::reap {
namespace {

// The listing of `e`'s pid on its own GPU (by UUID where known) in `snapshot`, or nullptr.
const gpu::GpuProcess* own_listing(const gpu::Snapshot& snapshot, const ProcessEvidence& e) {
  for (const auto& device : snapshot.devices) {
    if (device.lost || (e.gpu_uuid ? device.id.uuid != e.gpu_uuid : device.id.index != e.gpu)) continue;
    for (const auto& p : device.processes) {
      if (p.pid == e.process.pid) return &p;
    }
  }
  return nullptr;
}

// A reading of `pid` above 0 % or unknown on any GPU of `snapshot`: the decision it makes.
std::optional<Decision> busy_anywhere(const gpu::Snapshot& snapshot, unsigned pid, long long ts_ms) {
  for (const auto& device : snapshot.devices) {
    if (device.lost) continue;
    for (const auto& p : device.processes) {
      if (p.pid != pid) continue;
      const auto reading = observe(device, p, ts_ms).sm_util_pct;
      if (!reading) return Decision{Reason::UnknownUtilization, fmt::format("on GPU {} now: unknown", device.id.index)};
      if (*reading > 0) return Decision{Reason::Busy, fmt::format("on GPU {} now: {} %", device.id.index, *reading)};
    }
  }
  return std::nullopt;
}

nlohmann::json optional_json(const auto& value) {
  if (!value) return nullptr;
  return *value;
}

}  // namespace

unsigned Pass::candidates() const {
  return static_cast<unsigned>(
      std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.decision.reason == Reason::Candidate; }));
}

unsigned Pass::reaped() const {
  return static_cast<unsigned>(
      std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.action && r.action->memory_freed == true; }));
}

Caller caller_of(const host::ProcReader& proc) {
  Caller caller;
  caller.uid = geteuid();
  caller.pid = getpid();
  caller.ancestors = ancestors_of(proc, static_cast<unsigned>(caller.pid));
  caller.slurm_manages_node = slurmd_runs(proc);
  return caller;
}

Result<Pass> survey(gpu::Backend& backend, const host::ProcReader& proc, const GatherOptions& options,
                    const ReaperConfig& rules, const Caller& caller, const util::Clock& clock) {
  TARMAC_TRY_ASSIGN(auto gathered, gather(backend, proc, options, clock));
  Pass pass;
  pass.source = gathered.source;
  pass.watched_ms = gathered.watched_ms;
  pass.store_note = gathered.store_note;
  pass.time_unix_ms = clock.wall_ms();
  pass.rules = rules;
  pass.leases = options.leases;
  pass.kill_switch_present = kill_switch_on(rules.kill_switch);
  // Decided over every listing, then filtered: --gpu and --user choose what is shown, never what
  // the decision of a process listed on several GPUs rests on.
  auto decisions = decide(gathered.processes, rules, caller);
  for (std::size_t i = 0; i < gathered.processes.size(); ++i) {
    // One decision per process already; a listing that is not a candidate wins all the same.
    const auto [it, first] = pass.surveyed.emplace(gathered.processes[i].process.pid, decisions[i].reason);
    if (!first && decisions[i].reason != Reason::Candidate) it->second = decisions[i].reason;
  }
  for (std::size_t i = 0; i < gathered.processes.size(); ++i) {
    if (!shown(options, gathered.processes[i])) continue;
    pass.rows.push_back({std::move(gathered.processes[i]), std::move(decisions[i]), std::nullopt, {}});
  }
  return pass;
}

Decision redecide(const ProcessEvidence& e, const ReaperConfig& rules, const Caller& caller,
                  const std::vector<JobLease>& leases, const host::ProcReader& proc, gpu::Backend& backend,
                  const util::Clock& clock) {
  auto snapshot = backend.snapshot(reap_snapshot_options());
  if (!snapshot.ok()) {
    return Decision{Reason::UnknownUtilization, "the driver could not be asked again: " + snapshot.error().message};
  }
  const unsigned pid = e.process.pid;
  const auto* listed = own_listing(*snapshot, e);
  if (listed == nullptr) return Decision{Reason::NotVisible, fmt::format("no longer listed on GPU {}", e.gpu)};
  if (auto busy = busy_anywhere(*snapshot, pid, clock.wall_ms())) return *busy;
  ProcessEvidence now = e;
  now.process.used_mem_bytes = listed->used_mem_bytes;
  now.process.host = proc.read(pid);
  if (now.process.host.start_time_unix != e.process.host.start_time_unix) now.identity.reset();  // another process now
  if (auto job = tarmac_job_of(proc, pid, leases); job.ok()) {
    now.tarmac_job = std::move(*job);
  } else {
    note_unread(now.process.host, job.error());
  }
  now.holding = now.device_file ? proc.holds_device(pid, *now.device_file) : host::Holding::Unknown;
  return decide_one(now, rules, caller);
}

void kill_candidates(Pass& pass, const Caller& caller, const host::ProcReader& proc, gpu::Backend& backend,
                     const util::Clock& clock, const std::function<void(const Row&)>& on_action) {
  // Whatever the survey was for, what decides a signal is decided for killing (watch evidence
  // alone never lets root end a process: decide.cpp).
  Caller killing = caller;
  killing.intent = Intent::Kill;
  unsigned attempts = 0;
  std::map<unsigned, const Row*> acted;  // a process listed on several GPUs is ended once
  for (auto& row : pass.rows) {
    if (row.decision.reason != Reason::Candidate) continue;
    // Looked at before each candidate: a switch created during a pass stops the rest of it.
    pass.kill_switch_present = pass.kill_switch_present || kill_switch_on(pass.rules.kill_switch);
    const unsigned pid = row.evidence.process.pid;
    if (pass.kill_switch_present) {
      row.left_because = "the kill switch " + pass.rules.kill_switch + " exists";
    } else if (const auto first = acted.find(pid); first != acted.end()) {
      row.action = first->second->action;
      // Its memory on this GPU: the driver asked again, for this listing.
      if (row.action->memory_freed) {
        row.action->memory_freed = wait_memory_freed(backend, row.evidence.gpu, pid, pass.rules.free_wait_ms, clock);
        row.action->freed_bytes = *row.action->memory_freed ? row.evidence.process.used_mem_bytes : std::nullopt;
      }
    } else if (attempts >= pass.rules.max_kills) {
      row.left_because = fmt::format("reaper.max_kills ({}) reached", pass.rules.max_kills);
    } else if (const auto now = redecide(row.evidence, pass.rules, killing, pass.leases, proc, backend, clock);
               now.reason != Reason::Candidate) {
      row.left_because = fmt::format("decided again before the signal: {} ({})", to_string(now.reason), now.detail);
    } else {
      row.action = reap_process(row.evidence, pass.rules, killing, proc, backend, clock, pass.surveyed, pass.leases);
      if (!row.action->steps.empty()) ++attempts;
      acted[pid] = &row;
      if (on_action) on_action(row);
    }
  }
}

nlohmann::json event_detail(const Row& row, uid_t caller_uid) {
  const auto& e = row.evidence;
  const auto& a = *row.action;
  return {{"by_uid", caller_uid},
          {"pid", e.process.pid},
          {"user", optional_json(e.process.host.user)},
          {"command", optional_json(e.process.host.command_line)},
          {"gpu_uuid", optional_json(e.gpu_uuid)},
          {"evidence", {{"source", to_string(e.source)}, {"idle_ms", e.history.idle_ms()},
                        {"observed_ms", e.history.observed_ms()}, {"mem_used_bytes", optional_json(e.process.used_mem_bytes)}}},
          {"signal", a.last_signal != 0 ? nlohmann::json(signal_name(a.last_signal)) : nlohmann::json(nullptr)},
          {"outcome", to_string(a.outcome)},
          {"memory_freed", optional_json(a.memory_freed)},
          {"freed_bytes", optional_json(a.freed_bytes)}};
}

Result<void> record_events(const std::string& path, const Pass& pass, uid_t caller_uid) {
  if (::access(path.c_str(), W_OK) != 0) return {};
  store::RecorderOptions options;
  options.path = path;
  store::Recorder recorder(options);
  bool any = false;
  for (const auto& row : pass.rows) {
    if (!row.action) continue;
    recorder.add(store::Event{pass.time_unix_ms, row.evidence.gpu, "reap", util::json_text(event_detail(row, caller_uid))});
    any = true;
  }
  if (!any) return {};
  const auto status = recorder.flush();
  if (!status.ok) return make_error(Error::Code::Io, status.message);
  return {};
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGKILL: return "SIGKILL";
    case 0: return "";
    default: return fmt::format("signal {}", sig);
  }
}

}  // namespace tarmac::reap
