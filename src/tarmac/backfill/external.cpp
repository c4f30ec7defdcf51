// External servers' yield (external.hpp).
#include "tarmac/backfill/external.hpp"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tarmac/backfill/ollama.hpp"
#include "tarmac/host/tcp_listeners.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::backfill {

Result<YieldTarget> yieldable(const ServerConfig& server) {
  if (server.protocol != ServerProtocol::Ollama) {
    return make_error(Error::Code::Invalid, "its protocol has no unload: stopping its batches would free none of its "
                                            "GPU memory (only Ollama's protocol unloads)");
  }
  const auto port = net::loopback_port(server.url);
  if (!port) {
    return make_error(Error::Code::Invalid, fmt::format("{} is not this machine's loopback: tarmac cannot see which "
                                                        "GPUs it uses (name it as http://127.0.0.1:PORT if it runs here)",
                                                        server.url));
  }
  if (server.server_user.empty()) {
    return make_error(Error::Code::Invalid, "no server_user names the account that runs it: without one, a user who "
                                            "listens on its port could pose as it");
  }
  TARMAC_TRY_ASSIGN(const uid_t uid, server_user_uid(server.server_user));
  return YieldTarget{.port = *port, .uid = uid};
}

ExternalServers::ExternalServers(ExternalOptions options, BatchDb& db, Dispatcher& dispatcher)
    : opt_(std::move(options)), db_(db), dispatcher_(dispatcher) {
  if (!opt_.serving) opt_.serving = [](unsigned port, uid_t uid) { return host::processes_serving(port, uid); };
  if (!opt_.loaded) {
    opt_.loaded = [](const ServerConfig& server) -> Result<std::vector<std::string>> {
      TARMAC_TRY_ASSIGN(auto models, ollama::loaded(server, ollama::kUnloadTimeoutMs));
      std::vector<std::string> names;
      for (const auto& m : models) names.push_back(m.name);
      return names;
    };
  }
  if (!opt_.unload) {
    opt_.unload = [](const ServerConfig& server, const std::string& model) {
      return ollama::unload(server, model, ollama::kUnloadTimeoutMs);
    };
  }
  thread_ = std::thread([this] { run(); });
}

ExternalServers::~ExternalServers() {
  {
    std::lock_guard lock(mutex_);
    shared_.stop = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool ExternalServers::sending(const std::string& name, long long id, const std::string& model,
                              const std::string& window) {
  const auto config = opt_.config.servers.find(name);
  if (config == opt_.config.servers.end()) return false;
  if (auto port = yieldable(config->second); !port.ok()) {
    if (said_.insert(name).second) {
      log(util::LogLevel::Info, fmt::format("backfill: external server {} does not yield its GPUs to normal jobs: {}",
                                            name, port.error().message));
    }
    return false;
  }
  auto& s = servers_[name];
  s.name = name;
  account(s);  // the time so far is the batches' that were there
  s.batches[id] = Server::Held{.model = model, .window = window};
  if (in_window(window, dispatcher_.local_minute())) s.active.push_back(id);
  // Started paused while it yields: its reason (the dispatcher's own) is replaced at the next tick.
  if (s.yielding) s.last_note.clear();
  publish_scan_targets();
  return s.yielding;
}

void ExternalServers::not_sending(const std::string& name, long long id) {
  const auto it = servers_.find(name);
  if (it == servers_.end()) return;
  it->second.batches.erase(id);
  std::erase(it->second.active, id);
}

std::vector<sched::ExternalBackfill> ExternalServers::holders() const {
  std::lock_guard lock(mutex_);
  return shared_.found;
}

void ExternalServers::publish_scan_targets() {
  std::map<std::string, YieldTarget> targets;
  for (const auto& [name, s] : servers_) {
    // Only while a batch is inside its window (or the server yields): a batch that waits for its
    // window has nothing of its own on the server's GPUs, and is no reason to unload anyone's model.
    if (s.active.empty() && !s.yielding) continue;
    if (auto target = yieldable(opt_.config.servers.at(name)); target.ok()) targets[name] = *target;
  }
  {
    std::lock_guard lock(mutex_);
    const auto same = [](const auto& a, const auto& b) {
      return a.first == b.first && a.second.port == b.second.port && a.second.uid == b.second.uid;
    };
    if (std::equal(targets.begin(), targets.end(), shared_.scan.begin(), shared_.scan.end(), same)) return;
    shared_.scan = std::move(targets);
    // A server with no batch any more is no holder from now: nothing of it may be yielded.
    std::erase_if(shared_.found, [this](const auto& h) { return !shared_.scan.contains(h.name); });
    shared_.rescan = true;
  }
  wake_.notify_all();
}

void ExternalServers::yield(const std::string& name, const std::vector<std::string>& uuids, const sched::Job& for_job) {
  const auto it = servers_.find(name);
  if (it == servers_.end()) return;
  Server& s = it->second;
  const long long now = util::monotonic_ms();
  // Nothing more is sent and the requests in flight are cancelled (their connections closed: the
  // server stops generating) and go back to pending; the unload runs on the thread.
  account(s);  // its GPU time up to now; none while it yields
  long long interrupted = 0;
  for (const auto& [id, held] : s.batches) interrupted += dispatcher_.stop(id);
  std::vector<std::string> models;
  for (const auto& [id, held] : s.batches) {
    if (std::find(models.begin(), models.end(), held.model) == models.end()) models.push_back(held.model);
  }
  const std::string for_what =
      fmt::format("{} {}", for_job.kind == sched::JobKind::Lease ? "lease" : "job", for_job.id);
  if (!s.yielding || s.recorded) {  // a new yield (asked again after one recorded: its unload did not free the GPUs)
    s.started_ms = now;
    s.interrupted = 0;
    s.recorded = false;
  }
  s.yielding = true;
  s.accounted_ms = 0;  // counted again once it is sent to again
  s.interrupted += interrupted;
  s.for_job = for_job.id;
  s.for_what = for_what;
  s.for_jobs.insert(for_job.id);
  for (const auto& u : uuids) {
    if (std::find(s.gpus.begin(), s.gpus.end(), u) == s.gpus.end()) s.gpus.push_back(u);
  }
  {
    std::lock_guard lock(mutex_);
    shared_.unload.push_back(Shared::Unload{.server = name, .models = models, .started_ms = s.started_ms});
  }
  wake_.notify_all();
  note(s, fmt::format("yielding its GPUs to {}: sending stopped ({} requests in flight back to pending), {} being "
                      "unloaded from external server {} (tarmac does not stop a server it did not start)",
                      for_what, interrupted, fmt::join(models, ", "), name));
  log(util::LogLevel::Info, fmt::format("backfill: external server {} yields GPU {} to {}: sending stopped in {} ms, "
                                        "unloading {}",
                                        name, fmt::join(uuids, ","), for_what, util::monotonic_ms() - now,
                                        fmt::join(models, ", ")));
}

void ExternalServers::tick(sched::AgentJobs& jobs) {
  std::map<std::string, Unloaded> answered;
  {
    std::lock_guard lock(mutex_);
    answered.swap(shared_.unloaded);
  }
  bool changed = false;
  const auto found = holders();
  const int minute = dispatcher_.local_minute();
  for (auto it = servers_.begin(); it != servers_.end();) {
    Server& s = it->second;
    const auto holder = std::find_if(found.begin(), found.end(), [&s](const auto& h) { return h.name == s.name; });
    auto on = holder == found.end() ? std::set<std::string>{} : jobs.gpus_of(holder->pids);
    std::vector<long long> ended;
    std::vector<long long> active;
    for (const auto& [id, held] : s.batches) {
      if (!dispatcher_.holds(id)) {
        ended.push_back(id);  // done or cancelled
      } else if (in_window(held.window, minute)) {
        active.push_back(id);
      }
    }
    // Counted every kAccountMs, and whenever who shares it changes (a batch ended, a window opened
    // or closed) or its GPUs do: each stretch is charged to the batches active in it.
    if (!ended.empty() || active != s.active || on != s.on ||
        (s.accounted_ms != 0 && util::monotonic_ms() - s.accounted_ms >= kAccountMs)) {
      account(s);
    }
    if (active != s.active) changed = true;
    s.on = std::move(on);
    s.active = std::move(active);
    for (const long long id : ended) {
      s.go_refused.erase(id);
      s.batches.erase(id);
      changed = true;
    }
    if (s.accounted_ms == 0 && !s.yielding && !s.on.empty() && !s.active.empty()) {
      s.accounted_ms = util::monotonic_ms();
    }
    if (const auto done = answered.find(s.name);
        done != answered.end() && s.yielding && !s.recorded && done->second.started_ms == s.started_ms) {
      record(s, done->second);
    }
    if (s.yielding && s.recorded) {
      // Sent again once none of the jobs and leases it yielded to waits any more...
      std::erase_if(s.for_jobs, [&jobs](long long id) {
        const sched::Job* job = jobs.find(id);
        return job == nullptr || job->state != sched::JobState::Queued;
      });
      const bool waits = !s.for_jobs.empty();
      const auto given = jobs.given_gpus();
      const bool held = std::any_of(s.gpus.begin(), s.gpus.end(), [&given](const auto& u) { return given.contains(u); });
      if (!waits && !held) {
        resume(s);
      } else {
        note(s, fmt::format("yielded its GPUs to {}: external server {} sent to again once {} has left GPU {}",
                            s.for_what, s.name, s.for_what, fmt::join(s.gpus, ",")));
      }
    }
    if (s.batches.empty() && !s.yielding) {
      it = servers_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  if (changed) publish_scan_targets();
}

void ExternalServers::account(Server& s) {
  const long long now = util::monotonic_ms();
  if (s.accounted_ms != 0 && !s.active.empty() && !s.on.empty()) {
    const long long share = (now - s.accounted_ms) * static_cast<long long>(s.on.size()) /
                            static_cast<long long>(s.active.size());
    for (const long long id : s.active) {
      if (auto r = db_.add_gpu_ms(id, share); !r.ok()) log(util::LogLevel::Warning, r.error().message);
    }
  }
  // Counted on from now while it is sent to on GPUs; the next tick starts it once that holds.
  s.accounted_ms = !s.yielding && !s.on.empty() && !s.active.empty() ? now : 0;
}

std::vector<ExternalServers::Placement> ExternalServers::placements() const {
  std::vector<Placement> out;
  for (const auto& [name, s] : servers_) {
    if (s.yielding || s.on.empty() || s.active.empty()) continue;
    Placement p{.server = name, .batches = s.active, .gpus = s.on};
    out.push_back(std::move(p));
  }
  return out;
}

void ExternalServers::record(Server& s, const Unloaded& done) {
  s.recorded = true;
  yield_count_ += 1;
  yield_ms_ += done.ms;
  nlohmann::json detail = {{"server", s.name},         {"external", true},     {"for_job", s.for_job},
                           {"interrupted", s.interrupted}, {"ms", done.ms},        {"gpus", s.gpus},
                           {"unloaded", done.failed.empty()}, {"memory_confirmed", nullptr},
                           {"memory_freed_ms", nullptr}};
  if (auto r = db_.add_event(util::wall_ms(), "backfill_yield", util::json_text(detail)); !r.ok()) {
    log(util::LogLevel::Warning,
        fmt::format("backfill: server {}: its yield is not recorded: {}", s.name, r.error().message));
  }
  if (done.failed.empty()) {
    log(util::LogLevel::Info, fmt::format("backfill: yield: external server {} unloaded its models for {} in {} ms ({} "
                                          "requests in flight sent back to pending); the server runs on",
                                          s.name, s.for_what, done.ms, s.interrupted));
  } else {
    log(util::LogLevel::Warning, fmt::format("backfill: yield: external server {} for {}: {}; its GPUs may stay held "
                                             "(tarmac does not stop a server it did not start)",
                                             s.name, s.for_what, fmt::join(done.failed, "; ")));
  }
}

void ExternalServers::resume(Server& s) {
  bool all = true;
  for (const auto& [id, held] : s.batches) {
    if (auto r = dispatcher_.go(id); !r.ok()) {
      all = false;
      if (s.go_refused.insert(id).second) {
        log(util::LogLevel::Warning, fmt::format("backfill: batch {}: {}", id, r.error().message));
      }
    } else {
      s.go_refused.erase(id);
    }
  }
  if (!all) return;  // tried again at the next tick
  log(util::LogLevel::Info, fmt::format("backfill: external server {}: {} has left GPU {}: its batches are sent again",
                                        s.name, s.for_what, fmt::join(s.gpus, ",")));
  note(s, fmt::format("sent to external server {} again ({} has left GPU {})", s.name, s.for_what,
                      fmt::join(s.gpus, ",")));
  s.yielding = false;
  s.recorded = false;
  s.gpus.clear();
  s.for_jobs.clear();
}

void ExternalServers::note(Server& s, const std::string& reason) {
  if (reason == s.last_note) return;  // a tick every 250 ms: write only what changed
  s.last_note = reason;
  for (const auto& [id, held] : s.batches) dispatcher_.note(id, reason);
}

void ExternalServers::run() {
  std::unique_lock lock(mutex_);
  long long next_scan = 0;
  while (!shared_.stop) {
    if (!shared_.unload.empty()) {
      auto job = std::move(shared_.unload.front());
      shared_.unload.erase(shared_.unload.begin());
      lock.unlock();
      unload(job.server, job.models, job.started_ms);
      lock.lock();
      next_scan = 0;  // its processes have changed: look again at once
      continue;
    }
    const long long now = util::monotonic_ms();
    if (now >= next_scan || shared_.rescan) {
      shared_.rescan = false;
      const auto targets = shared_.scan;
      lock.unlock();
      scan(targets);
      lock.lock();
      next_scan = util::monotonic_ms() + opt_.scan_every_ms;
      continue;
    }
    wake_.wait_for(lock, std::chrono::milliseconds(next_scan - now));
  }
}

// Every model the server holds is unloaded, not only the batches': the scheduler counted all its
// runners' memory as room, and a model someone else loaded meanwhile would keep the GPU held (the
// job waiting, the yield asked again and again). A normal job outranks inference on the GPU it needs.
void ExternalServers::unload(const std::string& name, const std::vector<std::string>& models, long long started_ms) {
  Unloaded done;
  done.started_ms = started_ms;
  const auto config = opt_.config.servers.find(name);
  if (config != opt_.config.servers.end()) {
    std::vector<std::string> all = models;
    if (auto held = opt_.loaded(config->second); held.ok()) {
      // Ollama lists "tiny" as "tiny:latest": one model, unloaded once.
      const auto named = [&all](const std::string& m) {
        return std::any_of(all.begin(), all.end(), [&m](const std::string& a) { return a == m || a + ":latest" == m; });
      };
      for (auto& m : *held) {
        if (!named(m)) all.push_back(std::move(m));
      }
    } else {
      done.failed.push_back(fmt::format("its loaded models (/api/ps): {}", held.error().message));
    }
    for (const auto& model : all) {
      if (auto r = opt_.unload(config->second, model); !r.ok()) {
        done.failed.push_back(fmt::format("unload of {}: {}", model, r.error().message));
      }
    }
  }
  done.ms = util::monotonic_ms() - started_ms;
  std::lock_guard lock(mutex_);
  shared_.unloaded[name] = std::move(done);
}

void ExternalServers::scan(const std::map<std::string, YieldTarget>& targets) {
  std::vector<sched::ExternalBackfill> found;
  for (const auto& [name, target] : targets) {
    const unsigned port = target.port;
    auto pids = opt_.serving(port, target.uid);
    const std::string& user = opt_.config.servers.at(name).server_user;
    const std::string word = pids.empty()
                                 ? fmt::format("no process of its server_user {} listens on port {}", user, port)
                                 : fmt::format("listens on port {}", port);
    if (seen_[name] != word) {  // said once per change of state, not per change of its processes
      seen_[name] = word;
      log(pids.empty() ? util::LogLevel::Warning : util::LogLevel::Info,
          fmt::format("backfill: external server {}: {}{}", name, word,
                      pids.empty() ? " (or the agent may not read the processes' /proc/PID/fd): its GPUs are not "
                                     "known, it is not yielded (a server in a container, behind another "
                                     "account's proxy, is not seen)"
                                   : fmt::format(" (pid {}, {}'s): it yields its GPUs to normal jobs by unloading",
                                                 fmt::join(pids, ","), user)));
    }
    if (!pids.empty()) found.push_back(sched::ExternalBackfill{.name = name, .pids = std::move(pids)});
  }
  std::lock_guard lock(mutex_);
  std::erase_if(found, [this](const auto& h) { return !shared_.scan.contains(h.name); });  // gone meanwhile
  shared_.found = std::move(found);
}

}  // namespace tarmac::backfill
