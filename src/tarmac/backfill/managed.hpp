// Managed servers (docs/backfill.md "Managed servers"): an LLM server that tarmac starts, as a
// backfill job of the agent's scheduler (sched::AgentJobs), on GPUs idle for
// scheduler.backfill_idle, while a batch on it has requests to send inside its window; sends to it
// once its health path answers; and lets go of when a normal job needs its GPUs (the yield: the
// batches stop sending first, their requests in flight back to pending; an Ollama model is unloaded
// and NVML asked until the server's memory is gone (yield_memory.hpp); then the scheduler stops
// the server: SIGTERM, grace, SIGKILL) or when its batches are done.
//
// The pure part (managed_command, server_account) says what runs, as whom; ManagedServers follows
// the servers' jobs on the scheduler's thread (its tick, and the scheduler's call before a preemption).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tarmac/backfill/batch_db.hpp"
#include "tarmac/backfill/dispatch.hpp"
#include "tarmac/backfill/settings.hpp"
#include "tarmac/backfill/yield_memory.hpp"
#include "tarmac/sched/daemon.hpp"
#include "tarmac/util/log.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::backfill {

// What a managed server runs: its program (absolute), argv with {port} and {model} replaced, the
// environment beyond the scheduler's (CUDA_VISIBLE_DEVICES is the scheduler's), its health path.
struct ManagedCommand {
  std::string path;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string health_path = "/health";
};

// Finds a program on the agent's PATH; nullopt when it is not there. Tests inject one.
using FindProgram = std::function<std::optional<std::string>(const std::string& name)>;
[[nodiscard]] std::optional<std::string> find_on_path(const std::string& name);

// `server`'s command (its `command`, or its `preset` with `binary` or the preset's program found by
// `find`) for `port` and `model`. An error names a preset that is unknown, a program not found,
// or a command without a program.
[[nodiscard]] Result<ManagedCommand> managed_command(const ServerConfig& server, int port, const std::string& model,
                                                     const FindProgram& find = find_on_path);

// The account a managed server runs as: never root (uid 0, whatever its name).
struct Account {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  std::string home;
};
[[nodiscard]] Result<Account> server_account(const std::string& user);

// A loopback TCP port free now (the kernel's pick); the server binds it a moment later.
[[nodiscard]] Result<int> free_loopback_port();

// One yield: a server's job preempted for a normal job, from the call before its SIGTERM until its
// job was queued again (the server's processes gone).
struct Yield {
  std::string server;
  long long job = 0;      // the server's
  long long for_job = 0;  // the normal job's, or the lease's
  std::string for_what;   // "job 9", "lease 9": for people
  long long interrupted = 0;  // requests in flight sent back to pending
  long long ms = 0;
  // Whether NVML confirmed the server's memory gone before its SIGTERM (after Ollama's unload), and
  // the wait's length; nullopt where nothing was asked (no unload: llama-server, vLLM; an unload
  // that failed; no NVML look).
  std::optional<MemoryWait> memory;
};

struct ManagedOptions {
  BackfillConfig config;  // the managed servers among them are followed
  util::LogSink log;
  long long retry_ms = 30 * 1000;       // after a server that never became ready or ended by itself; doubled
  long long max_retry_ms = 30 * 60 * 1000;
  long long probe_every_ms = 100;       // the health path is asked this often until it answers
  // Asked on a yield after Ollama unloaded the model (keep_alive 0), before the scheduler's SIGTERM,
  // until the server's processes hold no memory on its GPUs (wait_memory_freed, bounded by
  // memory_wait_ms). Empty: the server is signalled as it is.
  ServerMemory server_memory;
  long long memory_wait_ms = kMemoryWaitMs;
  long long memory_poll_ms = kMemoryPollMs;
  std::shared_ptr<const util::Clock> clock = std::make_shared<util::SystemClock>();
  FindProgram find = find_on_path;
};

// Used on the scheduler's thread only (tick() and before_preempt()), as the Service is: they share
// its store connection and dispatcher.
class ManagedServers {
 public:
  ManagedServers(ManagedOptions options, BatchDb& db, Dispatcher& dispatcher);
  ~ManagedServers();
  ManagedServers(const ManagedServers&) = delete;
  ManagedServers& operator=(const ManagedServers&) = delete;

  [[nodiscard]] bool manages(const std::string& server) const { return servers_.count(server) > 0; }
  struct Server;
  // The managed servers as followed now (scheduler's thread).
  [[nodiscard]] const std::map<std::string, Server>& servers() const { return servers_; }
  // Starts, follows and stops the servers' jobs for the batches the dispatcher holds.
  void tick(sched::AgentJobs& jobs);
  // The scheduler preempts `job` for `for_job`: when it is a server's, its batches stop sending.
  void before_preempt(const sched::Job& job, const sched::Job& for_job);
  // The yields so far (for the log's and a test's sake).
  [[nodiscard]] const std::vector<Yield>& yields() const { return yields_; }
  // Their count and summed duration, safe from any thread (/metrics).
  [[nodiscard]] long long yield_count() const { return yield_count_; }
  [[nodiscard]] long long yield_ms() const { return yield_ms_; }

  struct Probe;  // a server's health asked on a thread of its own (managed.cpp)
  enum class Phase { Idle, Waiting, Starting, Ready, Yielding, Stopping };
  struct Server {
    std::string name;
    ServerConfig config;
    Phase phase = Phase::Idle;
    long long job = 0;           // the scheduler's job running it; 0: none
    long long run_started = 0;   // the job's started time this run (a new one after a requeue)
    int port = 0;
    std::string model;
    std::string health_path;
    std::unique_ptr<Probe> probe;
    std::set<long long> sending;  // batches sent to it now
    std::set<long long> go_refused;  // batches the dispatcher would not send now: logged once each
    long long yield_started_ms = 0;
    Yield yield;
    long long accounted_ms = 0;  // its GPU time is shared out to its batches up to then; 0: not running
    long long retry_at_ms = 0;
    int failures = 0;
    std::string last_note;  // what its batches were last told
  };

 private:
  // The batches held by the dispatcher on `s` with requests left inside their window now.
  [[nodiscard]] std::vector<Batch> wanting(const Server& s);
  void follow(Server& s, sched::AgentJobs& jobs, const std::vector<Batch>& wanted);
  void start_job(Server& s, sched::AgentJobs& jobs, const std::string& model);
  void on_running(Server& s, sched::AgentJobs& jobs, const sched::Job& job, const std::vector<Batch>& wanted);
  void finish_yield(Server& s, const std::vector<Batch>& wanted);
  void send_to(Server& s, const std::vector<Batch>& wanted);
  long long stop_sending(Server& s);
  // Shares the GPU time the server held since accounted_ms among the batches sent to it.
  void account(Server& s);
  void stop_server(Server& s, sched::AgentJobs& jobs, const std::string& why);
  void retry_later(Server& s, const std::string& why);
  void note(Server& s, const std::vector<Batch>& batches, const std::string& reason);
  // Unloads the model where the protocol can (Ollama); true when the server said it did.
  bool unload(Server& s, const std::string& url);
  // After an unload: waits for NVML to list none of the server's memory (bounded); nullopt when not asked.
  std::optional<MemoryWait> confirm_memory_freed(Server& s, const sched::Job& job);
  void log(util::LogLevel level, const std::string& message) const;

  ManagedOptions opt_;
  BatchDb& db_;
  Dispatcher& dispatcher_;
  std::map<std::string, Server> servers_;
  std::vector<Yield> yields_;
  std::atomic<long long> yield_count_{0};
  std::atomic<long long> yield_ms_{0};
  bool adopted_ = false;  // the agent's jobs left from before a restart have been stopped
};

}  // namespace tarmac::backfill
