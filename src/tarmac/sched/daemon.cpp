// The agent's scheduler (daemon.hpp, daemon_state.hpp): its start, its loop, and reading the queue
// back after a crash.
#include "tarmac/sched/daemon.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tarmac/sched/daemon_common.hpp"
#include "tarmac/sched/daemon_state.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::sched {

namespace {
constexpr long long kTickMs = 250;  // the loop's longest sleep, and how often leases and flags are checked
}  // namespace

Daemon::State::State(DaemonOptions options, JobDb db, LeaseDir dir, Listener listener, util::Fd wake)
    : opt(std::move(options)),
      table(std::move(db), opt.state_dir + "/jobs", opt.state_dir + "/logs", opt.log),
      wrappers(opt.log),
      gpus(opt.open_backend, opt.log),
      files(std::move(dir), opt.log),
      idle(opt.config, table, files, opt.notify, opt.log),
      outside(table, opt.log),
      pass(opt.config, table, gpus, files, wrappers,
           [this](Job& job, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids) {
             return start_job(job, chosen, uuids);
           },
           opt.log),
      requests(opt.config, table, wrappers, gpus, files, idle, pass, [this] { return clock(); }, opt.log,
               opt.more_requests),
      clients(std::move(listener),
              ClientLimits{.idle_timeout_ms = opt.config.connection_idle_timeout_ms,
                           .user_connection_cap = opt.config.user_connection_cap},
              [this] { return clock(); },
              [this](Client& c, const nlohmann::json& req, const Defer& defer) {
                return requests.answer(c, req, defer);
              },
              [this](long long id) { return table.find(id) != nullptr; }, opt.log, wake.get()),
      wake_fd(std::move(wake)) {
  table.on_event([this](const Job& job, JobEvent event) { on_job_event(job, event); });
  pass.before_preempt(opt.before_preempt);
  pass.external(opt.external_backfill, opt.yield_external);
  pass.awaited([this](long long id) { return clients.follows(id); });
}

void Daemon::State::on_job_event(const Job& job, JobEvent event) {
  clients.tell_followers(job, event);
  if (job.agent) agent_tick_due = true;  // its part hears of it in this turn of the loop, not a tick later
  if (event == JobEvent::Ended) wrappers.forget(job.id);
  if (event != JobEvent::Started) pass.want();
}

void Daemon::State::recover() {
  auto unfinished = table.unfinished();
  if (!unfinished.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot read the queue: {}", unfinished.error().message));
    return;
  }
  std::map<Recovered, int> count;
  for (Job& job : *unfinished) ++count[recover(std::move(job))];
  if (!unfinished->empty()) {
    log(util::LogLevel::Info,
        fmt::format("scheduler: read back {} unfinished jobs and leases: {} re-attached, {} ended while the agent was "
                    "away, {} queued again",
                    unfinished->size(), count[Recovered::Reattached], count[Recovered::Ended],
                    count[Recovered::Requeued]));
  }
}

void Daemon::State::read_spec_gpus(Job& job) const {
  const auto text = detail::read_small(file(job.id, "json"));
  const auto spec = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
  if (!spec.is_object()) return;
  const auto indices = spec.find("gpus");
  const auto uuids = spec.find("gpu_uuids");
  if (indices == spec.end() || uuids == spec.end() || !indices->is_array() || !uuids->is_array() ||
      indices->size() != uuids->size()) {
    return;
  }
  std::vector<unsigned> chosen;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < indices->size(); ++i) {
    if (!(*indices)[i].is_number_unsigned() || !(*uuids)[i].is_string()) return;
    chosen.push_back((*indices)[i].template get<unsigned>());
    names.push_back((*uuids)[i].template get<std::string>());
  }
  job.gpus = std::move(chosen);
  job.gpu_uuids = std::move(names);
}

Daemon::State::Recovered Daemon::State::recover(Job job) {
  const long long id = job.id;
  table.load_env(job);
  std::error_code ec;
  if (job.kind == JobKind::Lease || (job.state == JobState::Queued && !std::filesystem::exists(file(id, "lock"), ec))) {
    table.add(std::move(job));
    return Recovered::Waiting;
  }
  const WrapperProbe wrapper = probe_wrapper(file(id, "lock"));
  if (wrapper.alive) {
    // The wrapper writes "pid starttime" into its lock as its first act; one started an instant
    // before the agent died may not have yet: then the loop reads it later (never waiting here).
    job.shim_pid = wrapper.pid;
    job.shim_start = wrapper.start;
    // Killed between the wrapper's start and record_start: the row still says queued, with no
    // GPUs. The spec the wrapper runs names them; without them the job's GPUs would look free and
    // be given out again.
    if (job.state == JobState::Queued) {
      job.state = JobState::Running;
      read_spec_gpus(job);
      if (auto r = files.write_for(job, wrapper.pid, wrapper.start); !r.ok()) {
        log(util::LogLevel::Warning, fmt::format("scheduler: job {}: cannot write its leases: {}", id, r.error().message));
      }
    }
    if (job.started_ms == 0) job.started_ms = util::wall_ms();
    Job& stored = table.add(std::move(job));
    table.persist(stored);
    wrappers.watch(stored, false);
    return Recovered::Reattached;
  }
  Job& stored = table.add(std::move(job));
  if (std::filesystem::exists(file(id, "run"), ec) || std::filesystem::exists(file(id, "exit"), ec)) {
    on_wrapper_gone(stored);
    return Recovered::Ended;
  }
  // Never got as far as starting CMD: queue it again.
  files.remove_for(stored, clock());
  table.back_to_queue(stored, "queued again: the agent stopped before it started");
  return Recovered::Requeued;
}

void Daemon::State::run() {
  while (!stop.load()) {
    // What to wait for: the wake-up, new connections (unless out of descriptors), each client's
    // next request or, while its answer waits, its reading (never both), and each wrapper's end.
    const long long before = clock();
    std::vector<pollfd> fds{{wake_fd.get(), POLLIN, 0}};
    const Clients::Polled polled = clients.add_to_poll(fds, before);
    const std::size_t first_wrapper = fds.size();
    const auto watched = wrappers.pidfds();
    for (const auto& [id, fd] : watched) fds.push_back({fd, POLLIN, 0});
    const long long next = std::min({before + kTickMs, pass.next_due(), clients.next_deadline(before)});
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max(0LL, next - before))) < 0 && errno != EINTR) {
      log(util::LogLevel::Error, fmt::format("scheduler: poll: {}", std::strerror(errno)));
    }
    if (fds[0].revents != 0) {
      std::uint64_t v = 0;
      (void)!::read(wake_fd.get(), &v, sizeof v);
    }
    clients.deliver_posted();  // answers another thread finished (before the wake-up was read, or since)
    clients.serve_ready(fds, polled);
    for (std::size_t i = 0; i < watched.size(); ++i) {
      if (fds[first_wrapper + i].revents == 0) continue;
      if (Job* job = table.find(watched[i].first)) on_wrapper_gone(*job);
    }
    clients.accept_ready(fds, polled);
    clients.close_idle();
    gpus.publish_given(table.given_gpus());
    const long long now = clock();
    if (now - last_slow_tick_ms >= kTickMs) slow_tick();
    pass.run_if_due(now, util::wall_ms());
    if (agent_tick_due) tick_agent();
  }
}

void Daemon::State::slow_tick() {
  last_slow_tick_ms = clock();
  const auto seen = gpus.seen();
  idle.check(seen, last_slow_tick_ms, util::wall_ms());
  outside.check(seen);
  for (long long id : wrappers.ended_without_pidfd(table)) on_wrapper_gone(table.jobs().at(id));
  tick_agent();
}

void Daemon::State::tick_agent() {
  agent_tick_due = false;
  if (opt.agent_tick) opt.agent_tick(*this);
}

Daemon::Daemon(std::unique_ptr<State> state) : state_(std::move(state)) {}

Daemon::~Daemon() {
  state_->stop.store(true);
  const std::uint64_t one = 1;
  (void)!::write(state_->wake_fd.get(), &one, sizeof one);
  if (state_->thread.joinable()) state_->thread.join();
}

namespace {

// The state directory's jobs/ (0700: specs, environments, locks, results) and logs/ (0755: detached
// jobs' output, each file owned by its job's user).
Result<void> make_state_dirs(const std::string& state_dir) {
  for (const auto& [dir, mode] : {std::pair{state_dir + "/jobs", 0700}, std::pair{state_dir + "/logs", 0755}}) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return make_error(Error::Code::Io, fmt::format("cannot create {}: {}", dir, ec.message()));
    // jobs/ holds the submitters' environments: never leave it readable to others.
    if (::chmod(dir.c_str(), static_cast<mode_t>(mode)) != 0) {
      return make_error(Error::Code::Io, fmt::format("cannot set the mode of {}: {}", dir, std::strerror(errno)));
    }
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::start(DaemonOptions options) {
  TARMAC_TRY(make_state_dirs(options.state_dir));
  TARMAC_TRY_ASSIGN(auto db, JobDb::open(options.db_path));
  TARMAC_TRY_ASSIGN(auto dir, LeaseDir::open(options.lock_dir, options.config.max_hold_ms));
  TARMAC_TRY_ASSIGN(auto listener, Listener::open(options.socket_path));
  util::Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return make_error(Error::Code::Io, fmt::format("cannot make an eventfd: {}", std::strerror(errno)));
  auto s = std::make_unique<State>(std::move(options), std::move(db), std::move(dir), std::move(listener),
                                   std::move(wake));
  s->table.load_usage(s->opt.config.fair_window_ms, util::wall_ms());
  s->recover();
  State* raw = s.get();
  s->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<Daemon>(new Daemon(std::move(s)));
}

std::set<std::string> Daemon::given_gpus() const { return state_->gpus.given(); }

void Daemon::observe(const gpu::Snapshot& merged, const std::map<unsigned, gpu::Activity>& classes) {
  state_->gpus.observe(merged, classes, state_->clock());
}

}  // namespace tarmac::sched
