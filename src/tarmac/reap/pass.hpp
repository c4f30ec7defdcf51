// One reap pass, the part shared by `tarmac reap` and the agent's policy: the evidence gathered,
// each process decided, and with --kill the candidates ended in order under the pass's limits
// (the kill switch, reaper.max_kills), each action kept for the store's events, the log and the
// report. Printing is the caller's (cli/reap_command.cpp).
#pragma once

#include <sys/types.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/backend.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/reap/decide.hpp"
#include "tarmac/reap/gather.hpp"
#include "tarmac/reap/kill.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::reap {

// What happened to one process in a pass.
struct Row {
  ProcessEvidence evidence;
  Decision decision;
  std::optional<KillResult> action;  // set for a candidate --kill went for
  std::string left_because;          // a candidate --kill did not go for: why (kill switch, max_kills)
};

struct Pass {
  std::vector<Row> rows;
  EvidenceSource source = EvidenceSource::Watch;
  long long watched_ms = 0;
  std::string store_note;
  long long time_unix_ms = 0;
  bool kill = false;
  bool kill_switch_present = false;  // as last looked: at the survey, and before each candidate with --kill
  ReaperConfig rules;
  std::vector<JobLease> leases;      // the scheduler's live leases the survey saw (a tarmac job's processes)
  SurveyDecisions surveyed;          // every listed pid's decision in the survey, --gpu and --user aside

  [[nodiscard]] unsigned candidates() const;
  [[nodiscard]] unsigned reaped() const;  // actions whose memory the driver freed
};

// Who runs this pass: the effective uid, the pid and its ancestors, whether slurmd runs here.
[[nodiscard]] Caller caller_of(const host::ProcReader& proc);

// Gathers the evidence (gather.hpp) and decides every process, one decision per process over every
// GPU it is listed on; the rows are those --gpu and --user show. Nothing is signalled.
[[nodiscard]] Result<Pass> survey(gpu::Backend& backend, const host::ProcReader& proc, const GatherOptions& options,
                                  const ReaperConfig& rules, const Caller& caller, const util::Clock& clock);

// --kill's pass over the candidates, in order: none while the kill switch (rules.kill_switch)
// exists (looked at before each one, and again before SIGKILL), at most rules.max_kills ended,
// each decided again right before (redecide) and left when it is no longer a candidate;
// `on_action` is called after each action.
void kill_candidates(Pass& pass, const Caller& caller, const host::ProcReader& proc, gpu::Backend& backend,
                     const util::Clock& clock, const std::function<void(const Row&)>& on_action = {});

// `e` decided again with what is true now: one fresh snapshot (it must still be listed on its GPU,
// at a known 0 % there and on every other GPU it is listed on) and its facts read again (owner,
// name, jobs, whether it has the device file open), through decide_one.
[[nodiscard]] Decision redecide(const ProcessEvidence& e, const ReaperConfig& rules, const Caller& caller,
                                const std::vector<JobLease>& leases, const host::ProcReader& proc, gpu::Backend& backend,
                                const util::Clock& clock);

// The store event for one action (kind "reap"): who, what, the evidence, the signal, the result.
[[nodiscard]] nlohmann::json event_detail(const Row& row, uid_t caller_uid);

// Appends the event of each action to the store at `path` when this user may write it. An error
// only when writing was tried and failed (the actions themselves are done either way).
[[nodiscard]] Result<void> record_events(const std::string& path, const Pass& pass, uid_t caller_uid);

// "SIGTERM", "SIGKILL", "" for 0, "signal N" otherwise.
[[nodiscard]] std::string signal_name(int sig);

}  // namespace tarmac::reap
