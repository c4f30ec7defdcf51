#include "tarmac/reap/pass.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <signal.h>

#include <algorithm>
#include <fmt/format.h>

#include "tarmac/store/recorder.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::reap {
namespace {

bool file_exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::lstat(path.c_str(), &st) == 0;
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
  for (auto& e : gathered.processes) {
    auto decision = decide_one(e, rules, caller);
    pass.rows.push_back({std::move(e), std::move(decision), std::nullopt, {}});
  }
  return pass;
}

void kill_candidates(Pass& pass, const Caller& caller, const host::ProcReader& proc, gpu::Backend& backend,
                     const util::Clock& clock, const std::function<void(const Row&)>& on_action) {
  pass.kill_switch_present = file_exists(pass.rules.kill_switch);
  unsigned attempts = 0;
  for (auto& row : pass.rows) {
    if (row.decision.reason != Reason::Candidate) continue;
    if (pass.kill_switch_present) {
      row.left_because = "the kill switch " + pass.rules.kill_switch + " exists";
    } else if (attempts >= pass.rules.max_kills) {
      row.left_because = fmt::format("reaper.max_kills ({}) reached", pass.rules.max_kills);
    } else {
      row.action = reap_process(row.evidence, pass.rules, caller, proc, backend, clock);
      if (!row.action->steps.empty()) ++attempts;
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
