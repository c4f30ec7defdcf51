// The scheduler's job table (daemon_table.hpp): the jobs, their files and their record in the store.
#include "tarmac/sched/daemon_table.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fmt/format.h>

#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fs.hpp"

namespace tarmac::sched {

using nlohmann::json;

const char* to_string(JobEvent event) {
  switch (event) {
    case JobEvent::Started: return "started";
    case JobEvent::Requeued: return "requeued";
    case JobEvent::Ended: return "ended";
  }
  return "?";
}

JobTable::JobTable(JobDb db, std::string jobs_dir, std::string logs_dir, util::LogSink log)
    : db_(std::move(db)), jobs_dir_(std::move(jobs_dir)), logs_dir_(std::move(logs_dir)), log_(std::move(log)) {}

Job* JobTable::find(long long id) {
  const auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

Job& JobTable::add(Job job) {
  const long long id = job.id;
  return jobs_.emplace(id, std::move(job)).first->second;
}

void JobTable::persist(const Job& job) {
  if (auto r = db_.save(job); !r.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot record job {}: {}", job.id, r.error().message));
  }
}

void JobTable::record_event(std::optional<unsigned> gpu, const std::string& kind, const std::string& detail) {
  if (auto r = db_.event(util::wall_ms(), gpu, kind, detail); !r.ok()) {
    log(util::LogLevel::Warning, fmt::format("scheduler: cannot record event {}: {}", kind, r.error().message));
  }
}

std::optional<Job> JobTable::ended(long long id) {
  auto all = db_.list(true, 0);
  if (!all.ok()) return std::nullopt;
  for (auto& j : *all) {
    if (j.id == id) return std::move(j);
  }
  return std::nullopt;
}

bool JobTable::save_env(const Job& job) {
  return util::write_file_atomically(file(job.id, "env"), util::json_text(json(job.env))) &&
         ::chmod(file(job.id, "env").c_str(), 0600) == 0;
}

void JobTable::load_env(Job& job) {
  const auto text = util::read_file(file(job.id, "env"));
  const json env = text ? json::parse(*text, nullptr, false) : json();
  job.env.clear();
  if (!env.is_array()) return;
  for (const auto& v : env) {
    if (v.is_string()) job.env.push_back(v.get<std::string>());
  }
}

std::string JobTable::file(long long id, const char* ext) const { return fmt::format("{}/{}.{}", jobs_dir_, id, ext); }

std::string JobTable::log_file(long long id) const { return fmt::format("{}/{}.log", logs_dir_, id); }

void JobTable::remove_job_files(long long id) {
  for (const char* ext : {"json", "lock", "run", "exit"}) ::unlink(file(id, ext).c_str());
}

void JobTable::announce(const Job& job, JobEvent event) {
  if (sink_) sink_(job, event);
}

void JobTable::count_usage(const Job& job, long long until_unix_ms) {
  if (job.kind != JobKind::Job || job.started_ms <= 0) return;
  usage_[job.uid] += static_cast<long long>(job.gpus.size()) * std::max(0LL, until_unix_ms - job.started_ms);
}

void JobTable::finish(Job& job, JobState state, const std::string& reason) {
  job.state = state;
  if (!reason.empty()) job.reason = reason;
  if (job.ended_ms == 0) job.ended_ms = util::wall_ms();
  job.shim_pid = 0;
  ::unlink(file(job.id, "env").c_str());
  count_usage(job, job.ended_ms);
  persist(job);
  announce(job, JobEvent::Ended);
}

Job JobTable::end(Job& job, JobState state, const std::string& reason) {
  finish(job, state, reason);
  Job out = job;
  jobs_.erase(out.id);
  return out;
}

void JobTable::back_to_queue(Job& job, const std::string& reason) {
  remove_job_files(job.id);  // first, so that a crash now finds a queued job with none
  job.state = JobState::Queued;
  job.gpus.clear();
  job.gpu_uuids.clear();
  job.started_ms = 0;
  job.shim_pid = 0;
  job.shim_start = 0;
  job.stopping_for = StopReason::None;
  job.preempted_for = 0;
  job.reason = reason;
  persist(job);
}

void JobTable::requeue_preempted(Job& job, long long now_unix_ms) {
  count_usage(job, now_unix_ms);
  job.requeues += 1;
  const Job* for_job = find(job.preempted_for);  // a lease or a normal job, or gone already
  back_to_queue(job, for_job == nullptr ? std::string("preempted; queued again")
                                        : fmt::format("preempted for {} {}; queued again", to_string(for_job->kind),
                                                      for_job->id));
  announce(job, JobEvent::Requeued);
}

void JobTable::load_usage(long long window_ms, long long now_unix_ms) {
  if (auto usage = db_.usage(now_unix_ms - window_ms, now_unix_ms); usage.ok()) usage_ = *usage;
}

unsigned JobTable::queued_of(uid_t uid) const {
  return static_cast<unsigned>(std::count_if(jobs_.begin(), jobs_.end(), [uid](const auto& kv) {
    return kv.second.uid == uid && kv.second.kind == JobKind::Job && kv.second.state == JobState::Queued;
  }));
}

std::set<std::string> JobTable::given_gpus() const {
  std::set<std::string> out;
  for (const auto& [id, j] : jobs_) {
    if (holds_gpus(j)) out.insert(j.gpu_uuids.begin(), j.gpu_uuids.end());
  }
  return out;
}

}  // namespace tarmac::sched
