// A job or a lease of the agent's queue (docs/scheduler.md "Agent mode"), how it is written in
// JSON (the socket's and `tarmac jobs --json`'s form) and in the store's sched_job table.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/sched/pick.hpp"

namespace tarmac::sched {

enum class JobKind { Job, Lease };
enum class JobState { Queued, Running, Stopping, Done, Cancelled, Failed, Lost, Active, Released, Expired, Reclaimed };

[[nodiscard]] const char* to_string(JobKind kind);
[[nodiscard]] const char* to_string(JobState state);
[[nodiscard]] std::optional<JobKind> job_kind_from(std::string_view text);
[[nodiscard]] std::optional<JobState> job_state_from(std::string_view text);
// Whether a job in `state` has ended (nothing more will happen to it).
[[nodiscard]] bool has_ended(JobState state);

// A job's --grace when its request names none: between SIGTERM and SIGKILL.
inline constexpr long long kDefaultGraceMs = 10000;

// Why a running job is being stopped (the store's sched_job.stop_reason: "none", "cancel",
// "preempt"), so that a restarted agent knows whether a stopping job ends or is queued again.
enum class StopReason { None, Cancel, Preempt };

[[nodiscard]] const char* to_string(StopReason reason);
[[nodiscard]] std::optional<StopReason> stop_reason_from(std::string_view text);

struct Job {
  long long id = 0;
  JobKind kind = JobKind::Job;
  JobState state = JobState::Queued;
  // Who runs it: the submitter's uid, gid and supplementary groups as the socket's peer
  // credentials gave them (the user name is for people only).
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  std::string user;
  std::string name;
  // What to run (jobs): the resolved executable, argv, environment and directory of the submitter.
  std::string path;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;
  PickRequest request;
  std::optional<long long> time_ms;
  long long grace_ms = kDefaultGraceMs;
  bool backfill = false;
  bool uuids = false;   // CUDA_VISIBLE_DEVICES as UUIDs
  bool detach = false;  // output to `log` rather than the submitter's stdout and stderr
  // Run for the agent itself (backfill's managed servers, Daemon's AgentJobs), never asked for on
  // the socket: the part of the agent that asked is told before the job is preempted.
  bool agent = false;
  // What happened.
  std::vector<unsigned> gpus;
  std::vector<std::string> gpu_uuids;
  long long submitted_ms = 0;
  long long started_ms = 0;
  long long ended_ms = 0;
  long long expires_ms = 0;  // leases
  std::optional<int> exit_code;
  int requeues = 0;
  std::vector<unsigned> outside;  // GPUs its processes used without being given them
  std::string reason;             // why it waits, or why it ended as it did
  std::string log;                // the output file of a detached job
  // The wrapper of a running job.
  int shim_pid = 0;
  unsigned long long shim_start = 0;
  StopReason stopping_for = StopReason::None;
  long long preempted_for = 0;  // the normal job a stopping backfill job makes room for
};

// A member of a JSON object when it is there with the type asked for (bool, std::string or an
// integer type), else nullopt: requests come from anyone, so nothing is taken on trust.
template <typename T>
[[nodiscard]] std::optional<T> json_field(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if constexpr (std::is_same_v<T, bool>) {
    if (it->is_boolean()) return it->template get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (it->is_string()) return it->template get<std::string>();
  } else {
    if (it->is_number_integer()) return it->template get<T>();
  }
  return std::nullopt;
}

// The most supplementary groups a process may have (NGROUPS_MAX).
inline constexpr std::size_t kMaxGroups = 65536;

// The "groups" of a spec (the store's or the wrapper's): gids, or none when it is missing (a job
// recorded before groups were) or malformed (then the job runs with its gid alone).
[[nodiscard]] std::vector<gid_t> groups_of(const nlohmann::json& spec);

// The job as the socket and `tarmac jobs --json` show it (no environment).
[[nodiscard]] nlohmann::json to_json(const Job& job);
// The part of a job the store keeps as one JSON text (what to run and how). Not the environment,
// which may hold secrets: that stays in the agent's own directory (docs/scheduler.md).
[[nodiscard]] nlohmann::json spec_json(const Job& job);
void apply_spec_json(const nlohmann::json& spec, Job& job);

}  // namespace tarmac::sched
