#include "tarmac/sched/daemon.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "tarmac/sched/daemon_state.hpp"

namespace tarmac::sched {

using namespace detail;

void Daemon::State::recover() {
  auto unfinished = db->unfinished();
  if (!unfinished.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot read the queue: {}", unfinished.error().message));
    return;
  }
  int reattached = 0;
  int requeued = 0;
  int ended = 0;
  for (Job& job : *unfinished) {
    const long long id = job.id;
    load_env(job);
    if (job.kind == JobKind::Lease) {
      jobs.emplace(id, std::move(job));
      continue;
    }
    std::error_code ec;
    if (job.state == JobState::Queued && !std::filesystem::exists(file(id, "lock"), ec)) {
      jobs.emplace(id, std::move(job));
      continue;
    }
    const WrapperProbe wrapper = probe_wrapper(id);
    if (wrapper.alive) {
      // The wrapper writes "pid starttime" into its lock as its first act; one started an instant
      // before the agent died may not have yet: then the loop reads it later (never waiting here).
      job.shim_pid = wrapper.pid;
      job.shim_start = wrapper.start;
      if (job.state == JobState::Queued) job.state = JobState::Running;
      if (job.started_ms == 0) job.started_ms = now_ms();
      auto& stored = jobs.emplace(id, std::move(job)).first->second;
      persist(stored);
      watch(stored, false);
      ++reattached;
      continue;
    }
    auto& stored = jobs.emplace(id, std::move(job)).first->second;
    const bool ran = std::filesystem::exists(file(id, "run"), ec) || std::filesystem::exists(file(id, "exit"), ec);
    if (ran) {
      on_wrapper_gone(stored);
      ++ended;
      continue;
    }
    // Never got as far as starting CMD: queue it again.
    remove_job_files(id);
    remove_leases(stored);
    stored.state = JobState::Queued;
    stored.gpus.clear();
    stored.gpu_uuids.clear();
    stored.started_ms = 0;
    stored.shim_pid = 0;
    stored.stopping_for = StopReason::None;
    stored.reason = "queued again: the agent stopped before it started";
    persist(stored);
    ++requeued;
  }
  if (!unfinished->empty()) {
    log(util::LogLevel::Info,
        fmt::format("scheduler: read back {} unfinished jobs and leases: {} re-attached, {} ended while the agent was "
                    "away, {} queued again",
                    unfinished->size(), reattached, ended, requeued));
  }
}

void Daemon::State::run() {
  while (!stop.load()) {
    // What to wait for: the wake-up, new connections (unless out of descriptors), each client's
    // next request or, while its answer waits, its reading (never both), and each wrapper's end.
    const long long before = clock();
    std::vector<pollfd> fds;
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({before >= accept_after_ms ? listener.fd() : -1, POLLIN, 0});
    std::vector<Client*> polled;
    for (const auto& c : clients) {
      fds.push_back({c->conn().fd(), static_cast<short>(c->has_output() ? POLLOUT : POLLIN), 0});
      polled.push_back(c.get());
    }
    std::vector<long long> pid_jobs;
    for (const auto& [id, rt] : runtime) {
      if (rt.pidfd < 0) continue;
      fds.push_back({rt.pidfd, POLLIN, 0});
      pid_jobs.push_back(id);
    }
    long long timeout = kTickMs;
    if (recheck_at_ms != 0) timeout = std::min(timeout, recheck_at_ms - before);
    if (dirty) timeout = std::min(timeout, last_pass_ms + kMinPassGapMs - before);
    timeout = std::min(timeout, next_client_deadline() - before);
    if (accept_after_ms > before) timeout = std::min(timeout, accept_after_ms - before);
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max(0LL, timeout))) < 0 && errno != EINTR) {
      log(util::LogLevel::Error, fmt::format("scheduler: poll: {}", std::strerror(errno)));
    }
    if (fds[0].revents != 0) {
      std::uint64_t v = 0;
      (void)!::read(wake_fd, &v, sizeof v);
    }
    const std::size_t first_client = 2;
    for (std::size_t i = 0; i < polled.size(); ++i) {
      if (fds[first_client + i].revents == 0) continue;
      Client& c = *polled[i];
      if (c.has_output()) c.flush(clock());
      serve_client(c);  // its answer was read: the next request, if any is buffered or arrives
    }
    for (std::size_t i = 0; i < pid_jobs.size(); ++i) {
      if (fds[first_client + polled.size() + i].revents == 0) continue;
      if (auto it = jobs.find(pid_jobs[i]); it != jobs.end()) on_wrapper_gone(it->second);
    }
    if (fds[1].revents != 0) accept_clients();
    close_clients();
    publish_given();
    const long long now = clock();
    if (now - last_slow_tick_ms >= kTickMs) slow_tick();
    const bool recheck = recheck_at_ms != 0 && now >= recheck_at_ms;
    if (recheck) recheck_at_ms = 0;
    // A burst of submissions is one pass, not one each; a job's end (recheck) is seen at once.
    if ((dirty && now - last_pass_ms >= kMinPassGapMs) || recheck || now - last_pass_ms >= kRetryMs) pass();
  }
}

Daemon::Daemon(std::unique_ptr<State> state) : state_(std::move(state)) {}

Daemon::~Daemon() {
  state_->stop.store(true);
  const std::uint64_t one = 1;
  (void)!::write(state_->wake_fd, &one, sizeof one);
  if (state_->thread.joinable()) state_->thread.join();
}

Result<std::unique_ptr<Daemon>> Daemon::start(DaemonOptions options) {
  auto s = std::make_unique<State>();
  s->opt = std::move(options);
  s->jobs_dir = s->opt.state_dir + "/jobs";
  s->logs_dir = s->opt.state_dir + "/logs";
  for (const auto& [dir, mode] : {std::pair{s->jobs_dir, 0700}, std::pair{s->logs_dir, 0755}}) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return make_error(Error::Code::Io, fmt::format("cannot create {}: {}", dir, ec.message()));
    // jobs/ holds the submitters' environments: never leave it readable to others.
    if (::chmod(dir.c_str(), static_cast<mode_t>(mode)) != 0) {
      return make_error(Error::Code::Io, fmt::format("cannot set the mode of {}: {}", dir, std::strerror(errno)));
    }
  }
  TARMAC_TRY_ASSIGN(auto db, JobDb::open(s->opt.db_path));
  s->db.emplace(std::move(db));
  TARMAC_TRY_ASSIGN(auto dir, LeaseDir::open(s->opt.lock_dir));
  s->dir.emplace(std::move(dir));
  TARMAC_TRY_ASSIGN(auto listener, Listener::open(s->opt.socket_path));
  s->listener = std::move(listener);
  s->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd < 0) return make_error(Error::Code::Io, fmt::format("cannot make an eventfd: {}", std::strerror(errno)));
  if (auto usage = s->db->usage(now_ms() - s->opt.config.fair_window_ms, now_ms()); usage.ok()) s->usage = *usage;
  s->recover();
  State* raw = s.get();
  s->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<Daemon>(new Daemon(std::move(s)));
}

std::set<std::string> Daemon::given_gpus() const {
  std::lock_guard lock(state_->use_mutex);
  return state_->given;
}

void Daemon::observe(const gpu::Snapshot& merged, const std::map<unsigned, gpu::Activity>& classes) {
  const long long now = now_ms();
  std::lock_guard lock(state_->use_mutex);
  state_->gpu_count = static_cast<unsigned>(merged.devices.size());
  for (const auto& d : merged.devices) {
    if (!d.id.uuid) continue;
    GpuUse& g = state_->use[*d.id.uuid];
    g.index = d.id.index;
    g.util = d.sample.util_gpu_pct;
    g.pids.clear();
    for (const auto& p : d.processes) g.pids.push_back(p.pid);
    const auto c = classes.find(d.id.index);
    const bool idle = c != classes.end() && (c->second == gpu::Activity::Idle || c->second == gpu::Activity::ReservedIdle);
    if (!idle) g.idle_since_ms = 0;
    else if (g.idle_since_ms == 0) g.idle_since_ms = now;
  }
}

}  // namespace tarmac::sched
