// Jobs that use GPUs they were not given (daemon_flags.hpp).
#include "tarmac/sched/daemon_flags.hpp"

#include <algorithm>
#include <climits>
#include <optional>
#include <fmt/format.h>

#include "tarmac/host/bounded_read.hpp"
#include "tarmac/host/proc_parse.hpp"
#include "tarmac/sched/daemon_common.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sched {

using detail::indices_text;

namespace {

// The TARMAC_JOB_ID in a process's environment: "" when it has none or it cannot be read, nullopt
// when the read did not finish in time (a user can keep it blocked: host/bounded_read.hpp), which
// the scheduler's pass must not wait for.
std::optional<std::string> job_id_of(unsigned pid) {
  const auto environ = host::BoundedReader::shared().read(fmt::format("/proc/{}/environ", pid));
  if (environ.unknown()) return std::nullopt;
  if (!environ.text) return std::string();
  return host::find_environ_value(*environ.text, "TARMAC_JOB_ID").value_or("");
}

}  // namespace

void OutsideUse::check(const std::map<std::string, GpuUse>& seen) {
  std::set<unsigned> alive;
  for (const auto& [uuid, g] : seen) {
    for (unsigned pid : g.pids) {
      alive.insert(pid);
      Job* job = running_job_of(pid);
      if (job == nullptr) continue;
      if (std::find(job->gpu_uuids.begin(), job->gpu_uuids.end(), uuid) != job->gpu_uuids.end()) continue;
      if (!flagged_.insert({job->id, g.index}).second) continue;
      flag(*job, g, pid);
    }
  }
  std::erase_if(job_of_pid_, [&alive](const auto& kv) { return !alive.contains(kv.first); });
}

Job* OutsideUse::running_job_of(unsigned pid) {
  auto it = job_of_pid_.find(pid);
  if (it == job_of_pid_.end()) {
    auto id = job_id_of(pid);
    if (!id) return nullptr;  // unknown for now: not remembered, asked again next pass
    it = job_of_pid_.emplace(pid, std::move(*id)).first;
  }
  if (it->second.empty()) return nullptr;
  const auto id = util::parse_int(it->second, 1, LLONG_MAX);
  Job* job = id ? table_.find(*id) : nullptr;
  if (job == nullptr || job->kind != JobKind::Job || job->state != JobState::Running) return nullptr;
  return job;
}

void OutsideUse::flag(Job& job, const GpuUse& gpu, unsigned pid) {
  job.outside.push_back(gpu.index);
  table_.persist(job);
  const std::string detail = fmt::format("job {} of {} uses GPU {} (pid {}), which it was not given (it has {})",
                                         job.id, job.user, gpu.index, pid, indices_text(job.gpus));
  if (log_) log_(util::LogLevel::Warning, "scheduler: " + detail);
  table_.record_event(gpu.index, "job_outside", detail);
}

}  // namespace tarmac::sched
