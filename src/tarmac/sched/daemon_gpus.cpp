// What the scheduler knows of the GPUs (daemon_gpus.hpp).
#include "tarmac/sched/daemon_gpus.hpp"

#include <signal.h>

#include <cerrno>
#include <fmt/format.h>

#include "tarmac/sched/pick.hpp"

namespace tarmac::sched {

namespace {
constexpr long long kEndedPidMs = 10000;  // how long an ended job's pid is known as gone
}  // namespace

bool GpuView::ensure_backend() {
  if (backend_) return true;
  auto b = open_();
  if (!b.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot open NVML: {}", b.error().message));
    return false;
  }
  backend_ = std::move(*b);
  return true;
}

Result<gpu::Snapshot> GpuView::look() {
  auto snap = backend_->snapshot(
      gpu::SnapshotOptions{.processes = true, .topology = !topology_.has_value(), .values = kPickValues});
  if (!snap.ok()) {
    backend_.reset();
    topology_.reset();
    return snap;
  }
  if (snap->topology) topology_ = snap->topology;
  else snap->topology = topology_;
  return snap;
}

unsigned GpuView::known_count() {
  if (const unsigned n = seen_count(); n > 0) return n;
  if (!ensure_backend()) return 0;
  auto snap = backend_->snapshot(gpu::SnapshotOptions{});
  return snap.ok() ? static_cast<unsigned>(snap->devices.size()) : 0;
}

void GpuView::observe(const gpu::Snapshot& merged, const std::map<unsigned, gpu::Activity>& classes, long long now_ms) {
  std::lock_guard lock(mutex_);
  count_ = static_cast<unsigned>(merged.devices.size());
  for (const auto& d : merged.devices) {
    if (!d.id.uuid) continue;
    GpuUse& g = use_[*d.id.uuid];
    g.index = d.id.index;
    g.util = d.sample.util_gpu_pct;
    g.pids.clear();
    // A MIG device is an entry of its own, by its UUID (what its leases and jobs hold), with the
    // processes on it: those are not the board's, which is never given out whole in MIG mode.
    // MIG devices this board no longer has (its layout changed) are forgotten with their pids.
    std::erase_if(use_, [&d](const auto& kv) {
      return kv.second.mig && kv.second.index == d.id.index &&
             std::none_of(d.mig.begin(), d.mig.end(), [&kv](const gpu::MigDevice& m) { return m.uuid == kv.first; });
    });
    for (const auto& m : d.mig) {
      if (!m.uuid) continue;
      use_[*m.uuid] = GpuUse{.index = d.id.index, .util = std::nullopt, .pids = {}, .idle_since_ms = 0, .mig = true};
    }
    for (const auto& p : d.processes) {
      const bool placed = p.mig && *p.mig < d.mig.size() && d.mig[*p.mig].uuid;
      (placed ? use_[*d.mig[*p.mig].uuid] : g).pids.push_back(p.pid);
    }
    const auto c = classes.find(d.id.index);
    const bool idle = c != classes.end() && (c->second == gpu::Activity::Idle || c->second == gpu::Activity::ReservedIdle);
    if (!idle) g.idle_since_ms = 0;
    else if (g.idle_since_ms == 0) g.idle_since_ms = now_ms;
  }
}

std::map<std::string, GpuUse> GpuView::seen() const {
  std::lock_guard lock(mutex_);
  return use_;
}

unsigned GpuView::seen_count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

void GpuView::publish_given(std::set<std::string> given) {
  std::lock_guard lock(mutex_);
  given_ = std::move(given);
}

std::set<std::string> GpuView::given() const {
  std::lock_guard lock(mutex_);
  return given_;
}

void GpuView::drop_ended_processes(gpu::Snapshot& snapshot, long long now_ms) {
  std::erase_if(ended_pids_, [now_ms](const auto& kv) { return now_ms - kv.second > kEndedPidMs; });
  for (auto& d : snapshot.devices) {
    std::erase_if(d.processes, [this](const gpu::GpuProcess& p) {
      return p.pid >= 2 && ended_pids_.contains(p.pid) && ::kill(static_cast<pid_t>(p.pid), 0) != 0 && errno == ESRCH;
    });
  }
}

}  // namespace tarmac::sched
