#include "tarmac/slurm/hooks.hpp"

#include <csignal>
#include <fmt/format.h>
#include <set>
#include <thread>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/host/job_map.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::slurm {

namespace {

constexpr int kMaxGpuIndex = 1023;
constexpr long long kLeaseBoundMs = 30LL * 24 * 3600 * 1000;  // longer than any Slurm time limit sites set
constexpr long long kLeaseLockWaitMs = 2000;

std::string lease_job(const JobEnv& job) { return "slurm-" + job.job_id; }

// "pid 4242 (bob, python)": who, in words a drain reason can carry (printable, short).
std::string who(const gpu::GpuProcess& p) {
  const std::string program = host::program_name(p.host.command_line);
  const std::string name = program.empty() ? p.host.name.value_or("?") : program;
  return util::terminal_text(fmt::format("pid {} ({}, {})", p.pid, p.host.user.value_or("?"), name));
}

std::string held(const gpu::GpuProcess& p) {
  return p.used_mem_bytes ? util::format_bytes(*p.used_mem_bytes) : std::string("memory");
}

gpu::SnapshotOptions snapshot_options() {
  gpu::SnapshotOptions o;
  o.processes = true;
  return o;
}

// The job's GPUs in the snapshot, in the job's order; fails naming one the driver does not list.
Result<std::vector<const gpu::Device*>> job_devices(const gpu::Snapshot& snap, const JobEnv& job) {
  std::vector<const gpu::Device*> out;
  for (const unsigned index : job.gpus) {
    const gpu::Device* found = nullptr;
    for (const auto& d : snap.devices) {
      if (d.id.index == index) found = &d;
    }
    if (found == nullptr) {
      return make_error(Error::Code::NotFound, fmt::format("GPU {} of job {} is not on this node (the driver lists {})",
                                                           index, job.job_id, snap.devices.size()));
    }
    out.push_back(found);
  }
  return out;
}

HookResult fail(std::string line) { return {1, {std::move(line)}}; }

// Whether the real, effective, saved and file-system uids of `pid` are all `uid` (/proc/PID/status).
bool all_uids_are(unsigned pid, uid_t uid) {
  const auto status = util::read_file(fmt::format("/proc/{}/status", pid));
  if (!status) return false;
  const auto at = status->find("\nUid:");
  if (at == std::string::npos) return false;
  const auto end = status->find('\n', at + 1);
  int seen = 0;
  for (const auto& word : util::split(util::trim(status->substr(at + 5, end - at - 5)), '\t')) {
    if (util::trim(word).empty()) continue;
    if (util::parse_int(util::trim(word)) != std::optional<long long>(uid)) return false;
    ++seen;
  }
  return seen == 4;
}

// Ends `victims` (pid -> the process as the snapshot saw it): each through a pidfd opened first and
// then checked to be that process still (start time) and the job's user's; SIGTERM, `grace_ms`,
// SIGKILL to what is left. Returns a line per process.
std::vector<std::string> end_processes(const host::ProcReader& proc, const std::map<unsigned, const gpu::GpuProcess*>& victims,
                                       uid_t uid, long long grace_ms) {
  std::vector<std::string> lines;
  std::vector<std::pair<unsigned, util::Fd>> sent;
  for (const auto& [pid, p] : victims) {
    auto fd = util::open_pidfd(static_cast<pid_t>(pid));
    if (!fd.ok()) {
      lines.push_back(fmt::format("{}: gone ({})", who(*p), fd.error().message));
      continue;
    }
    // Checked after the pidfd is open, so what is checked is the process the signal reaches: the
    // start time the driver's listing was attributed with, and every uid the job user's (a process
    // that kept root's real or saved uid is not theirs to have ended).
    const auto now = proc.stat(pid);
    const bool same = now && p->host.start_ticks && now->identity.starttime_ticks == *p->host.start_ticks &&
                      all_uids_are(pid, uid);
    if (!same) {
      lines.push_back(fmt::format("{}: its pid names another process now; nothing sent", who(*p)));
      continue;
    }
    if (auto r = util::signal_pidfd(*fd, SIGTERM); !r.ok()) {
      lines.push_back(fmt::format("{}: {}", who(*p), r.error().message));
      continue;
    }
    sent.emplace_back(pid, std::move(*fd));
  }
  const long long deadline = util::monotonic_ms() + grace_ms;
  for (auto& [pid, fd] : sent) {
    const gpu::GpuProcess& p = *victims.at(pid);
    if (util::pidfd_ended(fd, std::max(0LL, deadline - util::monotonic_ms()))) {
      lines.push_back(fmt::format("{}: ended after SIGTERM", who(p)));
      continue;
    }
    (void)util::signal_pidfd(fd, SIGKILL);  // the pidfd names this process or nobody
    lines.push_back(util::pidfd_ended(fd, 2000) ? fmt::format("{}: killed after {} ms", who(p), grace_ms)
                                                : fmt::format("{}: survived SIGKILL", who(p)));
  }
  return lines;
}

// Whether a lease is the Slurm prolog's: root's file, a slurm- job. Anyone may write a lease file in
// the shared directory; a user's own naming a Slurm job is not believed.
bool slurm_lease(const sched::Lease& l) { return l.file_uid == 0 && l.job_id.starts_with("slurm-"); }

// Leases the job's GPUs, so that agentless pick and run skip them. Leases are a courtesy to those
// commands: a lock another user holds, or their lease on the GPU, never fails the prolog.
std::vector<std::string> lease_gpus(const std::vector<const gpu::Device*>& devices, const JobEnv& job,
                                    const HookOptions& options) {
  std::vector<std::string> lines;
  auto dir = sched::LeaseDir::open(options.lock_dir, options.max_hold_ms);
  if (!dir.ok()) return {"no leases: " + dir.error().message};
  auto lock = dir->lock(kLeaseLockWaitMs);
  if (!lock.ok()) return {"no leases: " + lock.error().message};
  auto live = dir->live_leases(util::wall_ms());
  if (!live.ok()) return {"no leases: " + live.error().message};
  std::vector<sched::Lease> mine;
  for (const gpu::Device* d : devices) {
    if (!d->id.uuid) continue;
    bool shared = false;
    for (const auto& l : *live) {
      if (l.uuid != *d->id.uuid || l.job_id == lease_job(job)) continue;
      if (slurm_lease(l)) {
        shared = true;  // another Slurm job's: a GPU the site shares between jobs
      } else {
        lines.push_back(fmt::format("GPU {} was leased {} outside Slurm: it is job {}'s now", d->id.index,
                                    util::terminal_text(sched::describe(l)), job.job_id));
      }
    }
    if (shared) continue;
    sched::Lease l;
    l.uuid = *d->id.uuid;
    l.job_id = lease_job(job);
    l.user = job.user;
    // No process of the job outlives the prolog to own the lease: it lasts until the epilog takes it
    // back, bounded so that a node whose epilog never ran does not keep the GPU from pick forever.
    l.expires_unix_ms = util::wall_ms() + kLeaseBoundMs;
    mine.push_back(std::move(l));
  }
  if (auto w = dir->write(mine); !w.ok()) return {"no leases: " + w.error().message};
  lines.push_back(fmt::format("leased GPUs {} to {}", fmt::join(job.gpus, ","), lease_job(job)));
  return lines;
}

// Takes the job's leases back; a GPU another mapped job still uses is leased to that job instead.
std::vector<std::string> release_gpus(const std::vector<const gpu::Device*>& devices, const JobEnv& job,
                                      const host::JobMap& after, const HookOptions& options) {
  auto dir = sched::LeaseDir::open(options.lock_dir, options.max_hold_ms);
  if (!dir.ok()) return {"leases not released: " + dir.error().message};
  auto lock = dir->lock(kLeaseLockWaitMs);
  if (!lock.ok()) return {"leases not released: " + lock.error().message};
  std::vector<std::string> uuids;
  std::vector<sched::Lease> handed;
  for (const gpu::Device* d : devices) {
    if (!d->id.uuid) continue;
    uuids.push_back(*d->id.uuid);
    if (const auto it = after.find(d->id.index); it != after.end() && !it->second.empty()) {
      sched::Lease l;
      l.uuid = *d->id.uuid;
      l.job_id = "slurm-" + it->second.front();
      l.user = "slurm";
      l.expires_unix_ms = util::wall_ms() + kLeaseBoundMs;
      handed.push_back(std::move(l));
    }
  }
  dir->remove(uuids, lease_job(job));
  if (auto w = dir->write(handed); !w.ok()) return {"leases not handed on: " + w.error().message};
  return {};
}

}  // namespace

Result<JobEnv> read_job_env(const std::map<std::string, std::string>& env) {
  const auto get = [&env](const char* name) -> std::string {
    const auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  JobEnv job;
  job.job_id = get("SLURM_JOB_ID");
  if (job.job_id.empty() || job.job_id.find_first_not_of("0123456789") != std::string::npos || job.job_id.size() > 20) {
    return make_error(Error::Code::Invalid, "SLURM_JOB_ID is missing or not a number: run this as slurmd's Prolog or "
                                            "Epilog (docs/slurm.md)");
  }
  const auto uid = util::parse_int(get("SLURM_JOB_UID"), 0, 0x7fffffff);
  if (!uid) return make_error(Error::Code::Invalid, "SLURM_JOB_UID is missing or not a number");
  job.uid = static_cast<uid_t>(*uid);
  const std::string user = get("SLURM_JOB_USER");
  const bool plain = !user.empty() && user.size() <= 64 && user.find_first_not_of(
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == std::string::npos;
  job.user = plain ? user : std::to_string(job.uid);
  const std::string partition = get("SLURM_JOB_PARTITION");
  if (partition.size() <= 64 && partition.find_first_not_of(
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == std::string::npos) {
    job.partition = partition;
  }
  std::string gpus = get("SLURM_JOB_GPUS");
  const char* from = "SLURM_JOB_GPUS";
  if (gpus.empty()) {
    gpus = get("CUDA_VISIBLE_DEVICES");
    from = "CUDA_VISIBLE_DEVICES";
  }
  std::set<unsigned> seen;
  if (util::trim(gpus).empty()) return job;  // a job without GPUs on this node
  for (const auto& word : util::split(gpus, ',')) {
    const auto index = util::parse_int(util::trim(word), 0, kMaxGpuIndex);
    if (!index) {
      return make_error(Error::Code::Invalid,
                        fmt::format("{}={}: expected GPU indices like 0,1 (gres.conf with AutoDetect=nvml gives them)",
                                    from, util::terminal_text(gpus)));
    }
    if (seen.insert(static_cast<unsigned>(*index)).second) job.gpus.push_back(static_cast<unsigned>(*index));
  }
  return job;
}

MappedJobs mapped_jobs(const host::JobMap& map) {
  MappedJobs out;
  for (const auto& [gpu, jobs] : map) out.insert(jobs.begin(), jobs.end());
  return out;
}

std::optional<std::string> unfit_reason(const gpu::Device& d, const std::string& job, const MappedJobs& mapped) {
  if (d.lost) return fmt::format("GPU {} is lost: {}", d.id.index, util::terminal_text(*d.lost));
  if (const auto fault = gpu::fault_reason(d)) {
    return fmt::format("GPU {} has a fault: {}", d.id.index, util::terminal_text(*fault));
  }
  for (const auto& p : d.processes) {
    const auto& claim = p.host.slurm_job_id;
    if (claim && *claim != job && mapped.contains(*claim)) continue;  // another job's: shared on purpose
    if (!claim && p.host.unread) {
      return fmt::format("GPU {}: {} held by {}, whose job cannot be read ({})", d.id.index, held(p), who(p),
                         util::terminal_text(*p.host.unread));
    }
    if (claim && !claim->empty()) {
      return fmt::format("GPU {}: {} held by {}, which claims Slurm job {} that no prolog mapped", d.id.index,
                         held(p), who(p), util::terminal_text(*claim));
    }
    return fmt::format("GPU {}: {} held by {} of no Slurm job", d.id.index, held(p), who(p));
  }
  return std::nullopt;
}

std::vector<const gpu::GpuProcess*> leftovers(const gpu::Device& d, const JobEnv& job, const MappedJobs& mapped,
                                              bool job_was_mapped) {
  std::vector<const gpu::GpuProcess*> out;
  for (const auto& p : d.processes) {
    if (!p.host.uid || *p.host.uid != job.uid) continue;
    const auto& claim = p.host.slurm_job_id;
    const bool this_job = claim && *claim == job.job_id;
    if (job.uid == 0 && !this_job) continue;  // root's processes of no job are not a job's leftovers
    if (this_job) {
      out.push_back(&p);
      continue;
    }
    if (claim && !claim->empty() && mapped.contains(*claim)) continue;  // the user's other job
    if (!claim && p.host.unread) continue;  // its job is unknown: it might be another of the user's jobs
    if (job_was_mapped) out.push_back(&p);
  }
  return out;
}

HookResult run_prolog(gpu::Backend& backend, const JobEnv& job, const HookOptions& options) {
  if (job.gpus.empty()) return {0, {fmt::format("job {} has no GPUs on this node", job.job_id)}};
  auto snap = backend.snapshot(snapshot_options());
  if (!snap.ok()) return fail("tarmac prolog: cannot read the GPUs: " + snap.error().message);
  auto devices = job_devices(*snap, job);
  if (!devices.ok()) return fail("tarmac prolog: " + devices.error().message);
  const MappedJobs mapped =
      options.job_map_dir.empty() ? MappedJobs{} : mapped_jobs(host::read_job_map(options.job_map_dir));
  for (const gpu::Device* d : *devices) {
    if (auto why = unfit_reason(*d, job.job_id, mapped)) return fail("tarmac prolog: " + *why);
  }
  HookResult result;
  if (!options.job_map_dir.empty()) {
    const host::JobInfo info{job.user, job.partition};
    if (auto r = host::change_job_map(options.job_map_dir, job.gpus, job.job_id, host::JobMapChange::Add,
                                      &info);
        !r.ok()) {
      return fail("tarmac prolog: " + r.error().message);
    }
    result.lines.push_back(fmt::format("mapped job {} to GPUs {} in {}", job.job_id, fmt::join(job.gpus, ","),
                                       options.job_map_dir));
  }
  if (!options.lock_dir.empty()) {
    auto leased = lease_gpus(*devices, job, options);
    result.lines.insert(result.lines.end(), leased.begin(), leased.end());
  }
  return result;
}

HookResult run_epilog(gpu::Backend& backend, const host::ProcReader& proc, const JobEnv& job,
                      const HookOptions& options) {
  HookResult result;
  if (job.gpus.empty()) return {0, {fmt::format("job {} had no GPUs on this node", job.job_id)}};
  // The mapping goes whatever happens: the job is over, and a mapping left behind would keep its
  // GPUs given out (reserved-idle) and charge its idle time to the job forever.
  const auto unmap = [&]() {
    if (options.job_map_dir.empty()) return;
    if (auto r = host::change_job_map(options.job_map_dir, job.gpus, job.job_id, host::JobMapChange::Remove); !r.ok()) {
      result.lines.push_back("cannot update the job mapping: " + r.error().message);
    }
  };
  const auto fail_unmapped = [&](const std::string& why) {
    unmap();
    HookResult failed = fail(why);
    failed.lines.insert(failed.lines.end(), result.lines.begin(), result.lines.end());
    return failed;
  };
  auto snap = backend.snapshot(snapshot_options());
  if (!snap.ok()) return fail_unmapped("tarmac epilog: cannot read the GPUs: " + snap.error().message);
  auto devices = job_devices(*snap, job);
  if (!devices.ok()) return fail_unmapped("tarmac epilog: " + devices.error().message);
  const host::JobMap map = options.job_map_dir.empty() ? host::JobMap{} : host::read_job_map(options.job_map_dir);
  const MappedJobs mapped = mapped_jobs(map);
  // Processes of no job are the job's leftovers only when its prolog ran: after a failed prolog
  // they are what failed it, and not this job's to end.
  const bool job_was_mapped = mapped.contains(job.job_id);
  std::map<unsigned, const gpu::GpuProcess*> victims;
  for (const gpu::Device* d : *devices) {
    for (const auto* p : leftovers(*d, job, mapped, job_was_mapped)) victims.emplace(p->pid, p);
  }
  auto ended = end_processes(proc, victims, job.uid, options.grace_ms);
  result.lines.insert(result.lines.end(), ended.begin(), ended.end());

  // The mapping and the lease go whatever happens next: the job is over.
  unmap();
  if (!options.lock_dir.empty()) {
    const host::JobMap after = options.job_map_dir.empty() ? host::JobMap{} : host::read_job_map(options.job_map_dir);
    auto released = release_gpus(*devices, job, after, options);
    result.lines.insert(result.lines.end(), released.begin(), released.end());
  }

  // The driver says when the memory is free: what a process that ended still held is given back
  // after it is reaped, and Slurm's own kill of the job's cgroup may still be tearing contexts down.
  const long long deadline = util::monotonic_ms() + options.free_wait_ms;
  std::string occupied;
  for (;;) {
    auto again = backend.snapshot(snapshot_options());
    if (!again.ok()) return fail("tarmac epilog: cannot read the GPUs: " + again.error().message);
    occupied.clear();
    for (const unsigned index : job.gpus) {
      for (const auto& d : again->devices) {
        if (d.id.index != index || !occupied.empty()) continue;
        for (const auto& p : d.processes) {
          const auto& claim = p.host.slurm_job_id;
          if (claim && *claim != job.job_id && mapped.contains(*claim)) continue;  // another job shares it
          occupied = fmt::format("GPU {} stays occupied: {} held by {}", index, held(p), who(p));
          break;
        }
      }
    }
    if (occupied.empty() || util::monotonic_ms() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!occupied.empty()) {
    result.exit_code = 1;
    result.lines.insert(result.lines.begin(), "tarmac epilog: " + occupied);
  }
  return result;
}

}  // namespace tarmac::slurm
