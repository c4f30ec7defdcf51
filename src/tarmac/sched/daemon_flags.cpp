// Jobs that use GPUs they were not given (daemon_flags.hpp).
#include "tarmac/sched/daemon_flags.hpp"

#include <algorithm>
#include <climits>
#include <fmt/format.h>
#include <string_view>

#include "tarmac/sched/daemon_common.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sched {

using detail::indices_text;

namespace {

// The TARMAC_JOB_ID in a process's environment, "" when it has none or cannot be read.
std::string job_id_of(unsigned pid) {
  auto text = util::read_file(fmt::format("/proc/{}/environ", pid));
  if (!text) return "";
  std::string_view env = *text;
  constexpr std::string_view kKey = "TARMAC_JOB_ID=";
  std::size_t pos = 0;
  while (pos < env.size()) {
    std::size_t end = env.find('\0', pos);
    if (end == std::string_view::npos) end = env.size();
    const auto kv = env.substr(pos, end - pos);
    if (kv.starts_with(kKey)) return std::string(kv.substr(kKey.size()));
    pos = end + 1;
  }
  return "";
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
  if (it == job_of_pid_.end()) it = job_of_pid_.emplace(pid, job_id_of(pid)).first;
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
