// Which batch runs on which GPU (service.hpp BatchOnGpu), for the dashboard's cards: a managed
// server's batches on the GPUs the scheduler gave its job, an external server's on the GPUs its
// processes were last seen on (one that yields, or whose processes are not known, on none).
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "tarmac/backfill/service.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::backfill {

namespace {
constexpr long long kPublishEveryMs = 1000;  // the dashboard polls every few seconds
}  // namespace

void Service::tick(sched::AgentJobs& jobs) {
  managed_->tick(jobs);
  external_->tick(jobs);
  publish_on_gpus(jobs);
}

void Service::publish_on_gpus(const sched::AgentJobs& jobs) {
  // Which batch is on which GPU, from what the scheduler's thread holds (no store read): a change is
  // shown at once; the progress alone is read again at most once a second.
  std::vector<std::tuple<std::string, long long, const std::string*>> placed;  // uuid, batch, server
  for (const auto& [name, server] : managed_->servers()) {
    const sched::Job* job = server.job != 0 ? jobs.find(server.job) : nullptr;
    if (job == nullptr || job->state != sched::JobState::Running) continue;
    for (const long long id : server.sending) {
      for (const auto& uuid : job->gpu_uuids) placed.emplace_back(uuid, id, &name);
    }
  }
  // An external server's: the GPUs its processes were last seen on (external.hpp).
  const auto external = external_->placements();
  for (const auto& p : external) {
    for (const long long id : p.batches) {
      for (const auto& uuid : p.gpus) placed.emplace_back(uuid, id, &p.server);
    }
  }
  std::sort(placed.begin(), placed.end());
  std::vector<std::pair<std::string, long long>> key;
  for (const auto& [uuid, id, name] : placed) key.emplace_back(uuid, id);
  const long long now = util::monotonic_ms();
  if (key == on_gpus_key_ && now - on_gpus_at_ms_ < kPublishEveryMs) return;
  on_gpus_key_ = std::move(key);
  on_gpus_at_ms_ = now;
  // Each batch read once, however many GPUs its server holds.
  std::map<long long, std::optional<BatchOnGpu>> read;
  std::vector<BatchOnGpu> found;
  for (const auto& [uuid, id, name] : placed) {
    auto& shown = read[id];
    if (!shown) {
      auto batch = db_.batch(id);
      auto progress = db_.progress(id);
      if (!batch.ok() || !*batch || !progress.ok()) continue;
      shown = BatchOnGpu{"", (*batch)->model, *name, progress->done + progress->failed, (*batch)->requests};
    }
    found.push_back(*shown);
    found.back().uuid = uuid;
  }
  std::lock_guard lock(on_gpus_mutex_);
  on_gpus_ = std::move(found);
}

}  // namespace tarmac::backfill
