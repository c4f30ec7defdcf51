#include "tarmac/sched/job.hpp"

#include <array>
#include <limits>
#include <utility>

namespace tarmac::sched {

namespace {

using nlohmann::json;

constexpr std::array<std::pair<JobState, const char*>, 11> kStates = {{
    {JobState::Queued, "queued"},
    {JobState::Running, "running"},
    {JobState::Stopping, "stopping"},
    {JobState::Done, "done"},
    {JobState::Cancelled, "cancelled"},
    {JobState::Failed, "failed"},
    {JobState::Lost, "lost"},
    {JobState::Active, "active"},
    {JobState::Released, "released"},
    {JobState::Expired, "expired"},
    {JobState::Reclaimed, "reclaimed"},
}};

template <typename T>
T value_or(const json& j, const char* key, T fallback) {
  return json_field<T>(j, key).value_or(fallback);
}

std::vector<std::string> strings_of(const json& j, const char* key) {
  std::vector<std::string> out;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& v : *it) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

std::vector<gid_t> groups_of(const json& spec) {
  std::vector<gid_t> out;
  const auto it = spec.find("groups");
  if (it == spec.end() || !it->is_array() || it->size() > kMaxGroups) return out;
  for (const auto& v : *it) {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > std::numeric_limits<gid_t>::max() - 1) return {};
    out.push_back(v.get<gid_t>());
  }
  return out;
}

const char* to_string(JobKind kind) { return kind == JobKind::Job ? "job" : "lease"; }

const char* to_string(JobState state) {
  for (const auto& [s, name] : kStates) {
    if (s == state) return name;
  }
  return "?";
}

const char* to_string(StopReason reason) {
  switch (reason) {
    case StopReason::None: return "none";
    case StopReason::Cancel: return "cancel";
    case StopReason::Preempt: return "preempt";
  }
  return "none";
}

std::optional<StopReason> stop_reason_from(std::string_view text) {
  for (const StopReason r : {StopReason::None, StopReason::Cancel, StopReason::Preempt}) {
    if (text == to_string(r)) return r;
  }
  return std::nullopt;
}

std::optional<JobKind> job_kind_from(std::string_view text) {
  if (text == "job") return JobKind::Job;
  if (text == "lease") return JobKind::Lease;
  return std::nullopt;
}

std::optional<JobState> job_state_from(std::string_view text) {
  for (const auto& [s, name] : kStates) {
    if (text == name) return s;
  }
  return std::nullopt;
}

bool has_ended(JobState state) {
  return state != JobState::Queued && state != JobState::Running && state != JobState::Stopping &&
         state != JobState::Active;
}

json to_json(const Job& job) {
  const auto opt = [](long long ms) { return ms > 0 ? json(ms) : json(nullptr); };
  json j = {
      {"id", job.id},
      {"kind", to_string(job.kind)},
      {"state", to_string(job.state)},
      {"user", job.user},
      {"uid", job.uid},
      {"name", job.name},
      {"argv", job.argv},
      {"cwd", job.cwd},
      {"n", job.request.n},
      {"min_free_bytes", job.request.min_free_bytes},
      {"max_util_pct", job.request.max_util_pct},
      {"mig", job.request.mig ? json(*job.request.mig) : json(nullptr)},
      {"time_ms", job.time_ms ? json(*job.time_ms) : json(nullptr)},
      {"grace_ms", job.grace_ms},
      {"backfill", job.backfill},
      {"detach", job.detach},
      {"agent", job.agent},
      {"gpus", job.gpus},
      {"uuids", job.gpu_uuids},
      {"submitted_unix_ms", opt(job.submitted_ms)},
      {"started_unix_ms", opt(job.started_ms)},
      {"ended_unix_ms", opt(job.ended_ms)},
      {"expires_unix_ms", opt(job.expires_ms)},
      {"exit_code", job.exit_code ? json(*job.exit_code) : json(nullptr)},
      {"requeues", job.requeues},
      {"outside", job.outside},
      {"reason", job.reason},
      {"log", job.log.empty() ? json(nullptr) : json(job.log)},
  };
  return j;
}

json spec_json(const Job& job) {
  return json{{"path", job.path},
              {"argv", job.argv},
              {"cwd", job.cwd},
              {"gid", job.gid},
              {"groups", job.groups},
              {"n", job.request.n},
              {"min_free", job.request.min_free_bytes},
              {"max_util", job.request.max_util_pct},
              {"mig", job.request.mig ? json(*job.request.mig) : json(nullptr)},
              {"time_ms", job.time_ms ? json(*job.time_ms) : json(nullptr)},
              {"grace_ms", job.grace_ms},
              {"backfill", job.backfill},
              {"uuids", job.uuids},
              {"detach", job.detach},
              {"agent", job.agent}};
}

void apply_spec_json(const json& spec, Job& job) {
  if (!spec.is_object()) return;
  job.path = value_or<std::string>(spec, "path", "");
  job.argv = strings_of(spec, "argv");
  job.cwd = value_or<std::string>(spec, "cwd", "");
  job.gid = value_or<gid_t>(spec, "gid", 0);
  job.groups = groups_of(spec);
  job.request.n = value_or<unsigned>(spec, "n", 1);
  job.request.min_free_bytes = value_or<std::uint64_t>(spec, "min_free", 0);
  job.request.max_util_pct = value_or<unsigned>(spec, "max_util", 100);
  if (const auto mig = spec.find("mig"); mig != spec.end() && mig->is_string()) job.request.mig = mig->get<std::string>();
  if (const auto t = value_or<long long>(spec, "time_ms", -1); t >= 0) job.time_ms = t;
  job.grace_ms = value_or<long long>(spec, "grace_ms", kDefaultGraceMs);
  job.backfill = value_or<bool>(spec, "backfill", false);
  job.uuids = value_or<bool>(spec, "uuids", false);
  job.detach = value_or<bool>(spec, "detach", false);
  job.agent = value_or<bool>(spec, "agent", false);
}

}  // namespace tarmac::sched
