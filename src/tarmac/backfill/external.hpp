// External servers' yield (docs/backfill.md "External servers"): an LLM server already running
// (Ollama's systemd service), that tarmac neither started nor may stop, gives its GPUs back to a
// normal job or a lease as far as tarmac can make it: its batches stop sending (the requests in
// flight closed, back to pending) and its models are unloaded (Ollama: keep_alive 0), so its
// runners leave the GPUs; the server itself runs on. Its batches are sent again once the job has
// left those GPUs.
//
// Which GPUs it is on: the processes that listen on its loopback port and their descendants
// (host/tcp_listeners.hpp), found on a thread of this class's own every few seconds, matched by the
// scheduler with NVML's processes at each pass (sched::ExternalBackfill); the scheduler decides
// when a waiting job or lease would fit if it unloaded, and asks (yield()). Only a loopback url
// of Ollama's protocol takes part: llama-server and vLLM have no unload (stopping sending frees
// none of their memory), and a server on another machine holds none of this one's GPUs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tarmac/backfill/batch_db.hpp"
#include "tarmac/backfill/dispatch.hpp"
#include "tarmac/backfill/settings.hpp"
#include "tarmac/sched/daemon.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::backfill {

struct ExternalOptions {
  BackfillConfig config;
  util::LogSink log;
  long long scan_every_ms = 2000;  // how often the servers' processes are looked for
  // The processes of `uid` serving a loopback port (host::processes_serving); tests inject one.
  std::function<std::set<unsigned>(unsigned port, uid_t uid)> serving;
  // The models `server` holds loaded (ollama::loaded), and the unload of one (ollama::unload); tests
  // inject them.
  std::function<Result<std::vector<std::string>>(const ServerConfig& server)> loaded;
  std::function<Result<void>(const ServerConfig& server, const std::string& model)> unload;
};

// Where an external server that can yield listens, and as whom.
struct YieldTarget {
  unsigned port = 0;
  uid_t uid = 0;
};

// Whether external server `server` can yield: its protocol can unload (Ollama), its url is this
// machine's loopback, and its `server_user` names the account that runs it (whose sockets and
// processes alone are taken for the server's: a user who takes its port is not). Else why not.
[[nodiscard]] Result<YieldTarget> yieldable(const ServerConfig& server);

class ExternalServers {
 public:
  ExternalServers(ExternalOptions options, BatchDb& db, Dispatcher& dispatcher);
  ~ExternalServers();  // ends the thread (an unload in flight ends with its timeout)
  ExternalServers(const ExternalServers&) = delete;
  ExternalServers& operator=(const ExternalServers&) = delete;

  // Batch `id` (for `model`) is being sent to external server `name` from now on (Service::send,
  // on the scheduler's thread). True when the server is yielding now: the batch is to wait, paused,
  // until its batches are sent again.
  bool sending(const std::string& name, long long id, const std::string& model, const std::string& window);
  // Batch `id` was not taken by the dispatcher after all (its start failed): forgotten.
  void not_sending(const std::string& name, long long id);

  // The servers whose processes were found, for the scheduler's pass (any thread; a copy).
  [[nodiscard]] std::vector<sched::ExternalBackfill> holders() const;

  // The scheduler asks server `name` to give back GPUs `uuids` to `for_job` (its thread): its batches
  // stop sending now, and its models are unloaded on this class's thread.
  void yield(const std::string& name, const std::vector<std::string>& uuids, const sched::Job& for_job);

  // The scheduler's thread, about every 250 ms: ended batches forgotten, yields recorded once their
  // unload answered, and a yielded server's batches sent again once no job or lease holds its GPUs.
  void tick(sched::AgentJobs& jobs);

  // Where each server's batches run now (the dashboard's cards, Service::publish_on_gpus): the GPUs
  // its processes were last seen on, while it is sent to (not yielding). The scheduler's thread.
  struct Placement {
    std::string server;
    std::vector<long long> batches;
    std::set<std::string> gpus;
  };
  [[nodiscard]] std::vector<Placement> placements() const;

  // Yields so far and their durations (until the unload answered), for /metrics; any thread.
  [[nodiscard]] long long yield_count() const { return yield_count_.load(); }
  [[nodiscard]] long long yield_ms() const { return yield_ms_.load(); }

 private:
  struct Unloaded {
    long long started_ms = 0;    // the yield's (Server::started_ms): an older yield's answer is not this one's
    long long ms = 0;            // from the yield until the last unload answered
    std::vector<std::string> failed;  // "model: why", one per unload that failed
  };
  // Scheduler's thread only.
  struct Server {
    std::string name;
    struct Held {
      std::string model;
      std::string window;  // --window: outside it the batch sends nothing, and is neither charged nor shown
    };
    std::map<long long, Held> batches;  // held by the dispatcher (sent, or paused by a yield)
    std::vector<long long> active;      // of those, the ones inside their window at the last tick
    bool yielding = false;
    long long started_ms = 0;  // monotonic: when the yield was asked
    std::vector<std::string> gpus;  // given back
    long long for_job = 0;
    std::string for_what;  // "job 7", "lease 8": the latest it yielded to
    std::set<long long> for_jobs;  // every job and lease it yielded to (sent again once none waits)
    std::string last_note;  // the reason last written (a tick every 250 ms writes only a change)
    long long interrupted = 0;
    bool recorded = false;  // the yield's unload answered and its event was written
    std::set<long long> go_refused;  // batches whose go() was refused (said once)
    std::set<std::string> on;  // the GPUs its processes were last seen on (tick)
    long long accounted_ms = 0;  // monotonic: its GPU time is counted up to then; 0: not being counted
  };
  // Shared with the thread, under mutex_.
  struct Shared {
    std::map<std::string, YieldTarget> scan;  // server -> where it listens: those with batches
    std::vector<sched::ExternalBackfill> found;
    struct Unload {
      std::string server;
      std::vector<std::string> models;  // its batches'; those it holds loaded then are added
      long long started_ms = 0;
    };
    std::vector<Unload> unload;  // to do
    std::map<std::string, Unloaded> unloaded;  // server -> its yield's unloads, answered
    bool rescan = false;  // the servers to look for changed
    bool stop = false;
  };

  void run();
  void scan(const std::map<std::string, YieldTarget>& targets);
  void unload(const std::string& name, const std::vector<std::string>& models, long long started_ms);
  void publish_scan_targets();
  void record(Server& s, const Unloaded& done);
  // Shares the GPU time since accounted_ms among its batches (add_gpu_ms), and counts anew from now
  // while it is sent to on GPUs (else not at all).
  void account(Server& s);
  void resume(Server& s);
  void note(Server& s, const std::string& reason);
  void log(util::LogLevel level, const std::string& message) const {
    if (opt_.log) opt_.log(level, message);
  }

  ExternalOptions opt_;
  BatchDb& db_;
  Dispatcher& dispatcher_;
  std::map<std::string, Server> servers_;  // scheduler's thread
  std::set<std::string> said_;             // servers whose "not yielded" was logged (scheduler's thread)
  std::map<std::string, std::string> seen_;  // the thread's last word on each server's processes
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  Shared shared_;
  std::atomic<long long> yield_count_{0};
  std::atomic<long long> yield_ms_{0};
  std::thread thread_;
};

}  // namespace tarmac::backfill
