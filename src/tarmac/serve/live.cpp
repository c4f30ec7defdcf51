#include "tarmac/serve/live.hpp"

#include <algorithm>
#include <chrono>

namespace tarmac::serve {

std::size_t activity_slot(gpu::Activity activity) {
  const auto it = std::find(gpu::kActivities.begin(), gpu::kActivities.end(), activity);
  return static_cast<std::size_t>(it - gpu::kActivities.begin());
}

void LiveState::publish(const gpu::Snapshot& snapshot, const std::map<unsigned, gpu::Activity>& classes,
                        long long ts_ms, const AgentStats& stats, const host::JobMap& jobs,
                        const host::PodMap& pods, bool pods_listed,
                        const std::map<unsigned, std::vector<gpu::MigActivity>>& mig_classes,
                        const std::map<unsigned, gpu::ActivitySince>& since) {
  auto next = std::make_shared<LiveView>();
  next->ts_ms = ts_ms;
  next->published_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  next->snapshot = snapshot;
  next->classes = classes;
  next->mig_classes = mig_classes;
  next->since = since;
  next->stats = stats;
  next->jobs = jobs;
  next->pods = pods;
  next->pods_listed = pods_listed;
  const auto previous = view();
  if (previous) next->counters = previous->counters;
  for (const auto& [gpu, activity] : classes) {
    GpuCounters& c = next->counters[gpu];
    // The time since the previous sample counts for the class seen then (what held over it).
    if (previous) {
      if (auto it = previous->classes.find(gpu); it != previous->classes.end() && ts_ms > previous->ts_ms) {
        c.class_seconds[activity_slot(it->second)] += static_cast<double>(ts_ms - previous->ts_ms) / 1000.0;
      }
    }
    const bool idle = activity == gpu::Activity::Idle || activity == gpu::Activity::ReservedIdle;
    if (!idle) {
      c.idle_since_ms.reset();
    } else if (!c.idle_since_ms) {
      c.idle_since_ms = ts_ms;
    }
  }
  std::vector<std::shared_ptr<const LiveView>> expired;  // freed after the lock is let go
  std::lock_guard lock(mutex_);
  // A clock stepped back (the wall clock, set by hand or NTP): the views before are of another time.
  if (!recent_.empty() && ts_ms < recent_.back()->ts_ms) {
    expired.insert(expired.end(), recent_.begin(), recent_.end());
    recent_.clear();
  }
  recent_.push_back(next);
  while (!recent_.empty() && (recent_.size() > kRecentViews || ts_ms - recent_.front()->ts_ms > kRecentMs)) {
    expired.push_back(std::move(recent_.front()));
    recent_.pop_front();
  }
  view_ = std::move(next);
}

std::vector<std::shared_ptr<const LiveView>> LiveState::recent(long long window_ms) const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<const LiveView>> out;
  if (recent_.empty()) return out;
  const long long newest = recent_.back()->ts_ms;
  window_ms = std::max(window_ms, 0LL);
  std::size_t first = 0;
  while (newest - recent_[first]->ts_ms > window_ms) ++first;
  // A sample late by a little leaves the window's start uncovered: the one before it covers it.
  if (first > 0 && newest - recent_[first]->ts_ms < window_ms) --first;
  out.assign(recent_.begin() + static_cast<std::ptrdiff_t>(first), recent_.end());
  return out;
}

std::shared_ptr<const LiveView> LiveState::view() const {
  std::lock_guard lock(mutex_);
  return view_;
}

}  // namespace tarmac::serve
