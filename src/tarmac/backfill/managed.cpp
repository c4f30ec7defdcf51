// Managed servers (managed.hpp, docs/backfill.md "Managed servers").
#include "tarmac/backfill/managed.hpp"

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <system_error>

#include "tarmac/backfill/ollama.hpp"
#include "tarmac/host/tcp_owner.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::backfill {

namespace {

constexpr long long kProbeTimeoutMs = 2000;  // one health request; a server loading its model may be slow

std::string replace_all(std::string word, std::string_view from, const std::string& to) {
  for (std::size_t at = word.find(from); at != std::string::npos; at = word.find(from, at + to.size())) {
    word.replace(at, from.size(), to);
  }
  return word;
}

std::string substituted(const std::string& word, int port, const std::string& model) {
  return replace_all(replace_all(word, "{port}", std::to_string(port)), "{model}", model);
}

// A preset's argv (its program first, found later), environment and health path.
Result<ManagedCommand> preset_command(const ServerConfig& server) {
  ManagedCommand c;
  if (server.preset == "llama-server") {
    c.argv = {"llama-server", "-m", "{model}", "--port", "{port}", "--host", "127.0.0.1"};
  } else if (server.preset == "ollama") {
    // Ollama reads its address and its behaviour from the environment; tarmac unloads the model itself
    // on a yield, so it stays loaded meanwhile. Vulkan off: only the GPUs given are used.
    c.argv = {"ollama", "serve"};
    c.env = {"OLLAMA_HOST=127.0.0.1:{port}", "OLLAMA_KEEP_ALIVE=24h",
             fmt::format("OLLAMA_NUM_PARALLEL={}", server.max_parallel), "OLLAMA_VULKAN=0"};
    c.health_path = "/";
  } else if (server.preset == "vllm") {
    c.argv = {"vllm", "serve", "{model}", "--port", "{port}", "--host", "127.0.0.1"};
  } else {
    return make_error(Error::Code::Invalid, fmt::format("unknown preset '{}' (llama-server, ollama or vllm)",
                                                        server.preset));
  }
  return c;
}

}  // namespace

std::optional<std::string> find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t from = 0;
  while (from <= dirs.size()) {
    const std::size_t to = std::min(dirs.find(':', from), dirs.size());
    const std::string dir = dirs.substr(from, to - from);
    from = to + 1;
    if (dir.empty() || dir.front() != '/') continue;  // a relative PATH entry depends on the cwd: never
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

Result<ManagedCommand> managed_command(const ServerConfig& server, int port, const std::string& model,
                                       const FindProgram& find) {
  ManagedCommand c;
  if (!server.command.empty()) {
    c.argv = server.command;
  } else {
    TARMAC_TRY_ASSIGN(c, preset_command(server));
    if (!server.binary.empty()) {
      c.argv.front() = server.binary;
    } else if (auto found = find(c.argv.front())) {
      c.argv.front() = *found;
    } else {
      return make_error(Error::Code::NotFound, fmt::format("{} is not on the agent's PATH: set binary to its path",
                                                           c.argv.front()));
    }
  }
  for (auto& word : c.argv) word = substituted(word, port, model);
  for (auto& var : c.env) var = substituted(var, port, model);
  c.path = c.argv.front();
  if (c.path.empty() || c.path.front() != '/') {
    return make_error(Error::Code::Invalid, fmt::format("the server's program '{}' is not an absolute path", c.path));
  }
  return c;
}

Result<Account> server_account(const std::string& user) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return make_error(Error::Code::NotFound, fmt::format("no account '{}' (the managed server's user)", user));
  }
  if (found->pw_uid == 0) {
    return make_error(Error::Code::Invalid, fmt::format("account '{}' is root (uid 0): a managed server runs users' "
                                                        "prompts and never as root",
                                                        user));
  }
  Account a{.uid = found->pw_uid, .gid = found->pw_gid, .groups = {}, .home = found->pw_dir ? found->pw_dir : "/"};
  int n = 64;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  if (::getgrouplist(found->pw_name, found->pw_gid, groups.data(), &n) < 0 && n > 64 && n <= 65536) {
    groups.resize(static_cast<std::size_t>(n));
    (void)::getgrouplist(found->pw_name, found->pw_gid, groups.data(), &n);
  }
  groups.resize(static_cast<std::size_t>(std::clamp(n, 0, static_cast<int>(groups.size()))));
  a.groups = std::move(groups);
  return a;
}

Result<int> free_loopback_port() {
  util::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return make_error(Error::Code::Io, fmt::format("cannot make a socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return make_error(Error::Code::Io, fmt::format("cannot find a free loopback port: {}", std::strerror(errno)));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

// A server's health path asked every probe_every_ms on a thread of its own (the scheduler's thread
// never waits on a server) until it answers 200, or ready_timeout passes, or it is let go. Only
// the server's account's listener counts (review T, M1): another user who took the port first
// and answers the health path does not make the server look ready.
struct ManagedServers::Probe {
  net::Cancel cancel;            // its request's sockets are shut down when it is set
  std::atomic<int> result{0};  // 0: asking; 1: ready; -1: not within ready_timeout
  std::thread thread;

  Probe(std::string url, long long timeout_ms, long long every_ms, uid_t owner) {
    try {
      thread = std::thread([this, url = std::move(url), timeout_ms, every_ms, owner] {
        ask(url, timeout_ms, every_ms, owner);
      });
    } catch (const std::system_error&) {
      result = -1;  // the system will not make a thread now (its task limit): not ready, tried again later
    }
  }
  ~Probe() {
    cancel.set();
    if (thread.joinable()) thread.join();
  }
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  void ask(const std::string& url, long long timeout_ms, long long every_ms, uid_t owner) {
    const long long deadline = util::monotonic_ms() + timeout_ms;
    net::Request get;
    get.method = "GET";
    get.url = url;
    get.timeout_ms = kProbeTimeoutMs;
    get.cancel = &cancel;
    get.max_body_bytes = 64 << 10;
    get.check_connection = [owner](const net::Connection& c) {
      return host::tcp_owner({c.peer_ip, c.peer_port}, {c.local_ip, c.local_port}) == owner;
    };
    while (!cancel.is_set() && util::monotonic_ms() < deadline) {
      const auto answer = net::perform(get);
      if (answer.ok() && answer->status == 200) {
        result = 1;
        return;
      }
      for (long long waited = 0; waited < every_ms && !cancel.is_set(); waited += 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (!cancel.is_set()) result = -1;
  }
};

ManagedServers::ManagedServers(ManagedOptions options, BatchDb& db, Dispatcher& dispatcher)
    : opt_(std::move(options)), db_(db), dispatcher_(dispatcher) {
  for (const auto& [name, config] : opt_.config.servers) {
    if (config.kind != ServerKind::Managed) continue;
    Server s;
    s.name = name;
    s.config = config;
    servers_.emplace(name, std::move(s));
  }
}

ManagedServers::~ManagedServers() = default;

void ManagedServers::log(util::LogLevel level, const std::string& message) const {
  if (opt_.log) opt_.log(level, message);
}

std::vector<Batch> ManagedServers::wanting(const Server& s) {
  std::vector<Batch> out;
  auto unfinished = db_.batches(BatchDb::Which::Unfinished);
  if (!unfinished.ok()) {
    log(util::LogLevel::Warning, fmt::format("backfill: server {}: {}", s.name, unfinished.error().message));
    return out;
  }
  const int minute = dispatcher_.local_minute();
  for (auto& b : *unfinished) {
    if (b.server != s.name || !dispatcher_.holds(b.id) || !in_window(b.window, minute)) continue;
    const auto left = db_.unanswered(b.id);
    if (left.ok() && *left) out.push_back(std::move(b));
  }
  return out;
}

void ManagedServers::tick(sched::AgentJobs& jobs) {
  if (!adopted_) {
    // Jobs of a managed server from before the agent restarted: nothing follows them now (their
    // port, their batches' sending): stop them; a server is started afresh when a batch wants one.
    adopted_ = true;
    for (const long long id : jobs.unfinished()) jobs.cancel(id, "the agent restarted: its servers start afresh");
  }
  for (auto& [name, s] : servers_) {
    // Shared out every kAccountMs, and before a batch that ended leaves `sending`.
    const bool one_ended = std::any_of(s.sending.begin(), s.sending.end(), [&](long long id) {
      return !dispatcher_.holds(id);
    });
    if (one_ended || (s.accounted_ms != 0 && util::monotonic_ms() - s.accounted_ms >= kAccountMs)) account(s);
    for (auto it = s.sending.begin(); it != s.sending.end();) {
      it = dispatcher_.holds(*it) ? std::next(it) : s.sending.erase(it);  // done or cancelled
    }
    follow(s, jobs, wanting(s));
  }
}

void ManagedServers::follow(Server& s, sched::AgentJobs& jobs, const std::vector<Batch>& wanted) {
  const sched::Job* job = s.job != 0 ? jobs.find(s.job) : nullptr;
  if (s.job != 0 && job == nullptr) {
    // Its job ended: stopped by us, or the server exited by itself (a crash, a bad command).
    const bool expected = s.phase == Phase::Stopping;
    stop_sending(s);
    s.job = 0;
    s.probe.reset();
    s.phase = Phase::Idle;
    if (!expected) retry_later(s, fmt::format("server {} ended by itself (its log: the scheduler's job log)", s.name));
  }
  const long long now = util::monotonic_ms();
  if (s.job == 0) {
    if (!wanted.empty() && now >= s.retry_at_ms) start_job(s, jobs, wanted.front().model);
    return;
  }
  if (wanted.empty() && s.phase != Phase::Stopping) {
    stop_server(s, jobs, "its batches have nothing left to send now");
    return;
  }
  switch (job->state) {
    case sched::JobState::Queued:
      if (s.phase == Phase::Yielding) {
        finish_yield(s, wanted);
      } else {
        note(s, wanted, fmt::format("waiting for server {} (job {}): {}", s.name, s.job, job->reason));
      }
      s.phase = Phase::Waiting;
      return;
    case sched::JobState::Running:
      // Queued again and started on other idle GPUs between two ticks: the yield ended all the same.
      if (s.phase == Phase::Yielding) finish_yield(s, wanted);
      on_running(s, jobs, *job, wanted);
      return;
    default: return;  // being stopped: its end is seen on a later tick
  }
}

// The server's job is queued again after its preemption: its processes are gone, the GPUs given back.
void ManagedServers::finish_yield(Server& s, const std::vector<Batch>& wanted) {
  s.yield.ms = util::monotonic_ms() - s.yield_started_ms;
  yields_.push_back(s.yield);
  ++yield_count_;
  yield_ms_ += s.yield.ms;
  nlohmann::json detail = {{"server", s.name},        {"job", s.yield.job},
                           {"for_job", s.yield.for_job}, {"interrupted", s.yield.interrupted},
                           {"ms", s.yield.ms},          {"gpus", s.config.gpus}};
  detail["memory_confirmed"] = nullptr;  // not asked: no unload (llama-server, vLLM), a failed one, or no NVML look
  detail["memory_freed_ms"] = nullptr;
  if (s.yield.memory) {
    detail["memory_confirmed"] = s.yield.memory->outcome == MemoryOutcome::Freed;
    if (s.yield.memory->outcome == MemoryOutcome::Freed) detail["memory_freed_ms"] = s.yield.memory->ms;
  }
  if (auto r = db_.add_event(util::wall_ms(), "backfill_yield", util::json_text(detail)); !r.ok()) {
    log(util::LogLevel::Warning, fmt::format("backfill: server {}: its yield is not recorded: {}", s.name,
                                             r.error().message));
  }
  log(util::LogLevel::Info, fmt::format("backfill: yield: server {} (job {}) gave its GPUs to {} in {} ms ({} "
                                        "requests in flight sent back to pending)",
                                        s.name, s.job, s.yield.for_what, s.yield.ms, s.yield.interrupted));
  note(s, wanted, fmt::format("yielded its GPUs to {} in {:.2f} s; waiting for idle GPUs to start server {} again",
                              s.yield.for_what, static_cast<double>(s.yield.ms) / 1000, s.name));
  s.phase = Phase::Waiting;
}

void ManagedServers::start_job(Server& s, sched::AgentJobs& jobs, const std::string& model) {
  const auto failed = [&](const Error& e) {
    retry_later(s, fmt::format("server {} cannot be started: {}", s.name, e.message));
  };
  auto account = server_account(s.config.user);
  if (!account.ok()) return failed(account.error());
  auto port = free_loopback_port();
  if (!port.ok()) return failed(port.error());
  auto command = managed_command(s.config, *port, model, opt_.find);
  if (!command.ok()) return failed(command.error());
  sched::Job job;
  job.uid = account->uid;
  job.gid = account->gid;
  job.groups = account->groups;
  job.name = fmt::format("backfill-server-{}", s.name);
  job.path = command->path;
  job.argv = command->argv;
  // The server's environment is its own, not the agent's (root's): a plain PATH, its account's home.
  job.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + account->home, "LANG=C.UTF-8"};
  job.env.insert(job.env.end(), command->env.begin(), command->env.end());
  job.cwd = "/";
  job.request.n = s.config.gpus;
  job.backfill = true;
  job.uuids = true;  // CUDA_VISIBLE_DEVICES as the GPUs' UUIDs: indices differ between tools
  // Between SIGTERM and SIGKILL: a server has nothing to save (its batches stopped sending first), and
  // llama-server at times ignores a SIGTERM with slots just cancelled (one yield in 15 took the
  // whole 5 s it had then): the grace bounds the yield (issue 16: p99 under 5 s).
  job.grace_ms = 2000;
  auto id = jobs.submit(std::move(job));
  if (!id.ok()) return failed(id.error());
  s.job = *id;
  s.port = *port;
  s.model = model;
  s.health_path = command->health_path;
  s.run_started = 0;
  s.phase = Phase::Waiting;
  log(util::LogLevel::Info, fmt::format("backfill: server {}: job {} queued for model {} on port {} (backfill: runs "
                                        "on idle GPUs)",
                                        s.name, s.job, model, s.port));
}

void ManagedServers::on_running(Server& s, sched::AgentJobs& jobs, const sched::Job& job,
                                const std::vector<Batch>& wanted) {
  const std::string url = fmt::format("http://127.0.0.1:{}", s.port);
  if (job.started_ms != s.run_started) {
    // A new run (the first, or after a yield): ask its health until it answers.
    s.run_started = job.started_ms;
    s.phase = Phase::Starting;
    s.accounted_ms = util::monotonic_ms();  // its GPUs are held from now: the batches it serves pay for its start
    s.probe = std::make_unique<Probe>(url + s.health_path, s.config.ready_timeout_ms, opt_.probe_every_ms, job.uid);
    note(s, wanted, fmt::format("server {} starting on GPU {} (job {}): waiting for {} to answer", s.name,
                                fmt::join(job.gpus, ","), s.job, s.health_path));
    return;
  }
  if (s.phase == Phase::Starting && s.probe) {
    const int result = s.probe->result.load();
    if (result == 0) return;
    s.probe.reset();
    if (result < 0) {
      const std::string why = fmt::format("server {} did not answer {} within its ready_timeout {}", s.name,
                                          s.health_path, util::format_duration_ms(s.config.ready_timeout_ms));
      stop_server(s, jobs, why);
      retry_later(s, why);
      return;
    }
    s.phase = Phase::Ready;
    s.failures = 0;
    log(util::LogLevel::Info, fmt::format("backfill: server {} ready at {} (job {}, GPU {})", s.name, url, s.job,
                                          fmt::join(job.gpus, ",")));
  }
  if (s.phase == Phase::Ready) send_to(s, wanted);
}

void ManagedServers::send_to(Server& s, const std::vector<Batch>& wanted) {
  const std::string url = fmt::format("http://127.0.0.1:{}", s.port);
  for (const auto& b : wanted) {
    if (s.sending.count(b.id) > 0 || b.model != s.model) continue;  // another model waits for its own run
    if (auto r = dispatcher_.go(b.id, url); !r.ok()) {
      // Tried again at each tick: said once, not four times a second.
      if (s.go_refused.insert(b.id).second) {
        log(util::LogLevel::Warning, fmt::format("backfill: batch {}: {}", b.id, r.error().message));
      }
      continue;
    }
    s.go_refused.erase(b.id);
    s.sending.insert(b.id);
  }
}

void ManagedServers::account(Server& s) {
  const long long now = util::monotonic_ms();
  if (s.accounted_ms == 0 || s.sending.empty()) return;  // not running, or nothing to charge yet
  const long long share = (now - s.accounted_ms) * static_cast<long long>(s.config.gpus) /
                          static_cast<long long>(s.sending.size());
  for (const long long id : s.sending) {
    if (auto r = db_.add_gpu_ms(id, share); !r.ok()) log(util::LogLevel::Warning, r.error().message);
  }
  s.accounted_ms = now;
}

long long ManagedServers::stop_sending(Server& s) {
  account(s);
  s.accounted_ms = 0;  // its GPUs are being given back (a server that runs on is accounted again by on_running)
  long long interrupted = 0;
  for (const long long id : s.sending) interrupted += dispatcher_.stop(id);
  s.sending.clear();
  return interrupted;
}

void ManagedServers::stop_server(Server& s, sched::AgentJobs& jobs, const std::string& why) {
  stop_sending(s);
  s.probe.reset();
  jobs.cancel(s.job, fmt::format("backfill server {}: {}", s.name, why));
  s.phase = Phase::Stopping;
  log(util::LogLevel::Info, fmt::format("backfill: server {} (job {}) stopped: {}", s.name, s.job, why));
}

void ManagedServers::retry_later(Server& s, const std::string& why) {
  s.failures += 1;
  long long wait = opt_.retry_ms;
  for (int i = 1; i < s.failures && wait < opt_.max_retry_ms; ++i) wait *= 2;
  wait = std::min(wait, opt_.max_retry_ms);
  s.retry_at_ms = util::monotonic_ms() + wait;
  log(util::LogLevel::Warning, fmt::format("backfill: {}; tried again in {}", why, util::format_duration_ms(wait)));
  auto unfinished = db_.batches(BatchDb::Which::Unfinished);
  if (!unfinished.ok()) return;
  std::vector<Batch> mine;
  for (auto& b : *unfinished) {
    if (b.server == s.name) mine.push_back(std::move(b));
  }
  note(s, mine, fmt::format("{}; tried again in {}", why, util::format_duration_ms(wait)));
}

void ManagedServers::note(Server& s, const std::vector<Batch>& batches, const std::string& reason) {
  if (reason == s.last_note) return;  // a tick every 250 ms: write only what changed
  s.last_note = reason;
  for (const auto& b : batches) dispatcher_.note(b.id, reason);
}

// Where the protocol has one, the model is unloaded before the server is signalled (Ollama: a
// request with keep_alive 0), so its GPU memory is given back by the server itself. llama-server
// and vLLM have no unload: they go straight to the SIGTERM.
bool ManagedServers::unload(Server& s, const std::string& url) {
  if (s.config.protocol != ServerProtocol::Ollama || s.phase != Phase::Ready) return false;
  ServerConfig server = s.config;
  server.url = url;
  if (auto r = ollama::unload(server, s.model, ollama::kUnloadTimeoutMs); !r.ok()) {
    log(util::LogLevel::Warning, fmt::format("backfill: server {}: unload of {}: {}", s.name, s.model,
                                             r.error().message));
    return false;
  }
  return true;
}

std::optional<MemoryWait> ManagedServers::confirm_memory_freed(Server& s, const sched::Job& job) {
  if (!opt_.server_memory) return std::nullopt;
  const MemoryWait w = wait_memory_freed(opt_.server_memory, job, *opt_.clock, opt_.memory_wait_ms,
                                         opt_.memory_poll_ms);
  if (w.outcome == MemoryOutcome::Freed) {
    log(util::LogLevel::Info, fmt::format("backfill: server {} (job {}): NVML lists none of its memory on GPU {} "
                                          "{} ms after the unload",
                                          s.name, job.id, fmt::join(job.gpus, ","), w.ms));
  } else {
    const std::string why = w.outcome == MemoryOutcome::Held
                                ? fmt::format("NVML still lists {} of it", util::format_bytes(w.held_bytes))
                                : std::string("NVML could not be read");
    log(util::LogLevel::Warning, fmt::format("backfill: server {} (job {}): its memory is not confirmed gone {} ms "
                                             "after the unload ({}); signalled all the same",
                                             s.name, job.id, w.ms, why));
  }
  return w;
}

void ManagedServers::before_preempt(const sched::Job& job, const sched::Job& for_job) {
  for (auto& [name, s] : servers_) {
    if (s.job != job.id) continue;
    s.yield_started_ms = util::monotonic_ms();
    // First nothing more is sent and the requests in flight are cancelled (their connections
    // closed: the server stops generating) and go back to pending; then the model is unloaded
    // where the protocol can; only then does the scheduler signal the server.
    const std::vector<long long> batches(s.sending.begin(), s.sending.end());
    const long long interrupted = stop_sending(s);
    s.probe.reset();
    const std::string url = fmt::format("http://127.0.0.1:{}", s.port);
    // Only then is NVML asked until the server's processes hold none of it (issue 16: "confirm
    // through NVML that the server's memory is gone; only then escalate").
    std::optional<MemoryWait> memory;
    if (unload(s, url)) memory = confirm_memory_freed(s, job);
    const std::string for_what =
        fmt::format("{} {}", for_job.kind == sched::JobKind::Lease ? "lease" : "job", for_job.id);
    s.yield = Yield{.server = s.name, .job = job.id, .for_job = for_job.id, .for_what = for_what,
                    .interrupted = interrupted, .ms = 0, .memory = memory};
    s.phase = Phase::Yielding;
    s.last_note.clear();
    for (const long long id : batches) {
      dispatcher_.note(id, fmt::format("yielding its GPUs to {}: sending stopped ({} requests in flight back "
                                       "to pending), server {} stopping",
                                       for_what, interrupted, s.name));
    }
    log(util::LogLevel::Info, fmt::format("backfill: server {} (job {}) yields to {}: sending stopped in {} ms",
                                          s.name, job.id, for_what, util::monotonic_ms() - s.yield_started_ms));
  }
}

}  // namespace tarmac::backfill
