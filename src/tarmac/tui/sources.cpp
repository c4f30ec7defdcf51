#include "tarmac/tui/sources.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fmt/format.h>
#include <set>

#include "tarmac/host/device_files.hpp"
#include "tarmac/host/proc_parse.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/fs.hpp"

namespace tarmac::tui {

namespace {

constexpr int kMaxAncestors = 16;

}  // namespace

// ---- Poller ----

struct Poller::Shared {
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  bool done = false;
  std::optional<HostData> latest;
  long long busy_since_ms = 0;  // 0: not reading
  util::Fd wake;                // closed with the last owner: the Poller, or a thread left behind
};

Poller::Poller(Read read, std::chrono::milliseconds interval, int wake_fd) : shared_(std::make_shared<Shared>()) {
  // The wake descriptor is duplicated: a thread left running at exit must not write to a number
  // that names something else by then.
  if (wake_fd >= 0) shared_->wake = util::Fd(::fcntl(wake_fd, F_DUPFD_CLOEXEC, 0));
  thread_ = std::thread([shared = shared_, read = std::move(read), interval] {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(shared->m);
        if (shared->stop) break;
        shared->busy_since_ms = util::monotonic_ms();
      }
      HostData data = read();
      const long long finished = util::monotonic_ms();
      {
        std::unique_lock<std::mutex> lock(shared->m);
        const long long started = shared->busy_since_ms;
        shared->busy_since_ms = 0;
        shared->latest = std::move(data);
        if (shared->wake) {
          const std::uint64_t one = 1;
          [[maybe_unused]] const auto n = ::write(shared->wake.get(), &one, sizeof one);
        }
        // The next read starts `interval` after this one started (or at once if it took longer).
        const auto wait = std::chrono::milliseconds(std::max(0LL, started + interval.count() - finished));
        shared->cv.wait_for(lock, wait, [&] { return shared->stop; });
        if (shared->stop) break;
      }
    }
    std::lock_guard<std::mutex> lock(shared->m);
    shared->done = true;
    shared->cv.notify_all();
  });
}

Poller::~Poller() {
  // A read that does not end within the second is left to finish on its own (stop detaches it).
  if (thread_.joinable()) (void)stop(std::chrono::milliseconds(1000));
}

bool Poller::stop(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(shared_->m);
  shared_->stop = true;
  shared_->cv.notify_all();
  const bool finished = shared_->cv.wait_for(lock, wait, [&] { return shared_->done; });
  lock.unlock();
  if (finished && thread_.joinable()) thread_.join();
  if (!finished && thread_.joinable()) thread_.detach();
  return finished;
}

std::optional<HostData> Poller::take() {
  std::lock_guard<std::mutex> lock(shared_->m);
  std::optional<HostData> out = std::move(shared_->latest);
  shared_->latest.reset();
  return out;
}

long long Poller::busy_for_ms() const {
  std::lock_guard<std::mutex> lock(shared_->m);
  return shared_->busy_since_ms == 0 ? 0 : util::monotonic_ms() - shared_->busy_since_ms;
}

// ---- LocalReader ----

LocalReader::LocalReader(std::shared_ptr<gpu::Backend> backend, gpu::ActivityThresholds thresholds, Leases leases,
                         std::string proc_root)
    : backend_(std::move(backend)),
      thresholds_(thresholds),
      leases_(std::move(leases)),
      proc_(proc_root),
      proc_root_(std::move(proc_root)) {
  if (const long t = ::sysconf(_SC_CLK_TCK); t > 0) ticks_per_s_ = t;
  if (const long p = ::sysconf(_SC_PAGESIZE); p > 0) page_bytes_ = p;
}

void LocalReader::use_agent(AgentView agent, OpenBackend open) {
  agent_ = std::move(agent);
  open_ = std::move(open);
}

Result<gpu::Snapshot> LocalReader::read_nvml() {
  if (!backend_) {
    if (!open_) return make_error(Error::Code::Internal, "no NVML to read");
    auto opened = open_();
    if (!opened.ok()) return opened.error();
    backend_ = std::move(*opened);
  }
  // What the screen shows, the classes and the verdicts read: not the PCIe link, BAR1, codecs,
  // energy, other clocks or modes, which cost driver calls at every reading and are not shown.
  using G = gpu::ValueGroup;
  static const gpu::ValueGroups kShown{G::Name, G::Uuid, G::Pci, G::Board, G::TemperatureThresholds, G::MaxClocks,
                                       G::Memory, G::PowerLimits, G::Fans, G::ClockEvents, G::Utilization,
                                       G::Temperature, G::Power, G::ClockSm, G::PerformanceState,
                                       G::ProcessUtilization, G::ProcessHost, G::MigMode};
  // The memory-error counters (a fault's evidence) change rarely and cost several calls a GPU:
  // read every kErrorsEveryMs, their last values kept in between.
  static const gpu::ValueGroups kErrors{G::EccErrors, G::RetiredPages, G::RemappedRows};
  const long long started = util::monotonic_ms();
  const bool errors_due = errors_read_ms_ == 0 || started - errors_read_ms_ >= kErrorsEveryMs;
  gpu::SnapshotOptions options;
  options.values = errors_due ? (kShown | kErrors) : kShown;
  auto snap = backend_->snapshot(options);
  if (!snap.ok()) return snap;
  if (errors_due) {
    errors_read_ms_ = started;
    last_errors_.clear();
    for (const auto& d : snap->devices) last_errors_[d.id.index] = d.sample;
    return snap;
  }
  for (auto& d : snap->devices) {
    const auto before = last_errors_.find(d.id.index);
    if (before == last_errors_.end()) continue;
    const gpu::DeviceSample& b = before->second;
    d.sample.ecc_corrected_volatile = b.ecc_corrected_volatile;
    d.sample.ecc_uncorrected_volatile = b.ecc_uncorrected_volatile;
    d.sample.ecc_corrected_aggregate = b.ecc_corrected_aggregate;
    d.sample.ecc_uncorrected_aggregate = b.ecc_uncorrected_aggregate;
    d.sample.retired_pages_sbe = b.retired_pages_sbe;
    d.sample.retired_pages_dbe = b.retired_pages_dbe;
    d.sample.retired_pages_pending = b.retired_pages_pending;
    d.sample.remapped_rows_correctable = b.remapped_rows_correctable;
    d.sample.remapped_rows_uncorrectable = b.remapped_rows_uncorrectable;
    d.sample.remapped_rows_pending = b.remapped_rows_pending;
    d.sample.remapped_rows_failure = b.remapped_rows_failure;
  }
  return snap;
}

HostData LocalReader::read() {
  HostData out;
  // The agent while it answers; the first time it does not, NVML from then on.
  std::optional<AgentLive> live;
  if (agent_) {
    std::string problem;
    live = agent_(problem);
    if (!live) {
      agent_ = nullptr;
      agent_problem_ = std::move(problem);
    }
  }
  Result<gpu::Snapshot> snap = live ? Result<gpu::Snapshot>(std::move(live->snapshot)) : read_nvml();
  out.received_ms = util::monotonic_ms();
  out.via_agent = live.has_value();
  out.agent_problem = agent_problem_;
  if (!snap.ok()) {
    out.problem = snap.error().message;
    return out;
  }
  std::map<std::string, diagnose::GpuLease> leases;  // by uuid
  std::map<std::pair<unsigned, unsigned long long>, std::string> owners;  // (pid, start) -> "job 12"
  // The lease files change when jobs start and end: read at most once a second.
  if (leases_ && (leases_read_ms_ == 0 || out.received_ms - leases_read_ms_ >= 1000)) {
    leases_read_ms_ = out.received_ms;
    last_leases_ = leases_();
  }
  for (const auto& l : last_leases_) {
    leases[l.uuid] = {l.label, l.cancel_id};
    if (l.owner_pid > 1 && !l.job.empty()) owners[{l.owner_pid, l.owner_ticks}] = l.job;
  }
  if (live) {
    out.classes = std::move(live->classes);  // the agent's, measured over time (it knows its leases)
    out.mig_classes = std::move(live->mig_classes);
    out.backfill = std::move(live->backfill);
  }
  const long long now_s = snap->timestamp_unix_ms / 1000;
  for (std::size_t i = 0; i < snap->devices.size(); ++i) {
    const gpu::Device& d = snap->devices[i];
    const auto lease = d.id.uuid ? leases.find(*d.id.uuid) : leases.end();
    if (lease != leases.end()) out.leases[d.id.index] = lease->second;
    // A leased GPU with nothing running is reserved-idle, as the agent and status say.
    if (!live) {
      out.classes.push_back(
          gpu::classify(d, thresholds_, now_s, lease != leases.end() ? gpu::Leased::Yes : gpu::Leased::No));
    }
    // A MIG device given to a job (gpu-MIG-... lease files) with nothing on it is reserved-idle too.
    if (out.mig_classes.size() <= i) out.mig_classes.resize(i + 1);
    auto& classes = out.mig_classes[i];
    if (!live) {
      for (std::size_t k = 0; k < d.mig.size(); ++k) classes.push_back(gpu::classify_mig(d, k, thresholds_, now_s));
    }
    out.mig_leases.push_back(diagnose::overlay_mig_leases(d, leases, thresholds_, now_s, classes));
  }
  // Per process: CPU since the previous read, resident size, and its parents for the tree.
  decltype(cpu_before_) cpu_now;
  decltype(ancestors_) ancestors_now;
  std::set<unsigned> done;
  for (const auto& d : snap->devices) {
    for (const auto& p : d.processes) {
      if (!done.insert(p.pid).second || p.host.visibility != host::PidVisibility::Visible) continue;
      // The snapshot's own read of /proc/PID/stat says all this (host::ProcessCache); a backend
      // that does not is read here.
      std::optional<host::StatFields> stat;
      if (p.host.start_ticks && p.host.cpu_ticks && p.host.rss_pages && p.host.parent_pid) {
        stat = host::StatFields{p.host.name.value_or(""), p.host.state.value_or('?'), *p.host.parent_pid, *p.host.start_ticks, 0};
        stat->utime_ticks = *p.host.cpu_ticks;
        stat->rss_pages = *p.host.rss_pages;
      } else {
        const auto text = util::read_file(fmt::format("{}/{}/stat", proc_root_, p.pid));
        if (text) stat = host::parse_stat(*text);
      }
      if (!stat) continue;
      ProcUsage usage;
      usage.rss_bytes = stat->rss_pages * static_cast<unsigned long long>(page_bytes_);
      const auto key = std::make_pair(p.pid, stat->starttime_ticks);
      const unsigned long long ticks = stat->utime_ticks + stat->stime_ticks;
      if (const auto before = cpu_before_.find(key); before != cpu_before_.end() && out.received_ms > before->second.second) {
        const double seconds = static_cast<double>(out.received_ms - before->second.second) / 1000.0;
        const double used = static_cast<double>(ticks - std::min(ticks, before->second.first)) / static_cast<double>(ticks_per_s_);
        usage.cpu_pct = 100.0 * used / seconds;
      }
      cpu_now[key] = {ticks, out.received_ms};
      out.usage[p.pid] = usage;
      // Parents, up to init: each read once for as long as it lives. The process's own stat was
      // read above: not again.
      unsigned pid = p.pid;
      for (int depth = 0; depth < kMaxAncestors && pid > 1; ++depth) {
        unsigned long long start_ticks = stat->starttime_ticks;
        unsigned parent = stat->ppid;
        std::string name = stat->comm;
        std::optional<long long> start_unix = p.host.start_time_unix;
        if (depth > 0) {
          const auto st = proc_.stat(pid);
          if (!st) break;
          start_ticks = st->identity.starttime_ticks;
          parent = st->parent_pid;
          name = st->name;
          start_unix = st->start_time_unix;
        }
        const auto akey = std::make_pair(pid, start_ticks);
        auto known = ancestors_.find(akey);
        Ancestor a;
        if (known != ancestors_.end()) {
          a = known->second;
          a.parent_pid = parent;  // a process is reparented when its parent ends
        } else {
          a.parent_pid = parent;
          a.name = std::move(name);
          a.start_time_unix = start_unix;
          a.start_ticks = start_ticks;
          if (pid != p.pid) {
            const host::ProcessInfo info = proc_.read(pid);
            a.command = info.command_line.value_or("");
            a.user = info.user;
            a.uid = info.uid;
          }
        }
        ancestors_now[akey] = a;
        out.ancestors[pid] = a;
        if (out.ancestors.count(parent) != 0) break;  // the rest of the chain is known
        pid = parent;
      }
    }
  }
  cpu_before_ = std::move(cpu_now);
  ancestors_ = std::move(ancestors_now);
  // The tarmac job of each GPU process: a lease's owner is the process or one of its parents.
  if (!owners.empty()) {
    for (const unsigned gpu_pid : done) {
      unsigned pid = gpu_pid;
      for (int depth = 0; depth < kMaxAncestors && pid > 1; ++depth) {
        const auto a = out.ancestors.find(pid);
        if (a == out.ancestors.end()) break;
        if (const auto job = owners.find({pid, a->second.start_ticks}); job != owners.end()) {
          out.jobs[gpu_pid] = job->second;
          break;
        }
        pid = a->second.parent_pid;
      }
    }
  }
  if (hidden_scanned_ms_ == 0 || out.received_ms - hidden_scanned_ms_ >= kHiddenScanMs) {
    hidden_scanned_ms_ = out.received_ms;
    hidden_ = hidden_holders(*snap);
  }
  out.hidden = hidden_;
  out.snapshot = std::move(*snap);
  return out;
}

std::map<unsigned, Ancestor> LocalReader::hidden_holders(const gpu::Snapshot& snap) const {
  std::set<unsigned> listed;
  for (const auto& d : snap.devices) {
    for (const auto& p : d.processes) listed.insert(p.pid);
  }
  std::map<unsigned, Ancestor> out;
  if (listed.empty()) return out;
  const host::ParentIndex parents = proc_.parent_index();
  std::map<unsigned, unsigned> parent_of;  // the GPU processes' descendants, and their parents
  for (const unsigned pid : listed) {
    std::vector<unsigned> level{pid};
    for (int depth = 0; depth < kMaxAncestors && !level.empty(); ++depth) {
      std::vector<unsigned> next;
      for (const unsigned p : level) {
        for (const unsigned child : parents.children(p)) {
          if (parent_of.emplace(child, p).second) next.push_back(child);
        }
      }
      level = std::move(next);
    }
  }
  for (const auto& holder : host::device_file_holders(proc_root_, [&](unsigned pid) {
         return parent_of.count(pid) != 0 && listed.count(pid) == 0;
       })) {
    const auto st = proc_.stat(holder.pid);
    if (!st) continue;
    const host::ProcessInfo info = proc_.read(holder.pid);
    out[holder.pid] = Ancestor{parent_of[holder.pid], st->name, info.command_line.value_or(""), info.user,
                               st->start_time_unix, info.uid, st->identity.starttime_ticks};
  }
  return out;
}


Result<std::vector<std::pair<std::string, std::string>>> interesting_environment(const host::ProcReader& proc, unsigned pid) {
  static const char* const kKeys[] = {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "RANK",         "LOCAL_RANK",
                                      "WORLD_SIZE",           "MASTER_ADDR",       "MASTER_PORT",  "SLURM_JOB_ID",
                                      "TARMAC_JOB_ID",        "NCCL_DEBUG",        "OMP_NUM_THREADS"};
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* k : kKeys) {
    auto v = proc.environ_value(pid, k);
    if (!v.ok()) return v.error();
    if (*v) out.emplace_back(k, **v);
  }
  // environ_value cannot tell "no such variable" from "not allowed to read": say which.
  if (out.empty() && ::access(fmt::format("{}/{}/environ", proc.root(), pid).c_str(), R_OK) != 0) {
    return make_error(Error::Code::Io, fmt::format("cannot read its environment: {} (only its owner and root may)",
                                                   std::strerror(errno)));
  }
  return out;
}

}  // namespace tarmac::tui
