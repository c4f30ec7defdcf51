// Where `tarmac top`'s data comes from. Each host is read on a thread of its own (a Poller), so a
// driver call or an agent that hangs never freezes the screen: the screen shows how long the read
// has been waiting, and the other hosts go on updating.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "tarmac/gpu/backend.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/tui/model.hpp"

namespace tarmac::tui {

// Runs `read` every `interval` on its own thread; each result is kept for take(), and `wake` (an
// eventfd, or -1) is written so that the screen's loop wakes for it.
class Poller {
 public:
  using Read = std::function<HostData()>;
  Poller(Read read, std::chrono::milliseconds interval, int wake_fd);
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // The newest result since the last take, if any.
  [[nodiscard]] std::optional<HostData> take();
  // How long the read in progress has run, in ms (0: none runs).
  [[nodiscard]] long long busy_for_ms() const;
  // Asks the thread to stop and waits up to `wait` for it: false when a read still hangs (the
  // thread is then left to the process's exit; it holds only what it shares with nobody else).
  bool stop(std::chrono::milliseconds wait);

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

// Reads this machine: a snapshot, the activity classes, each GPU process's CPU use and resident
// size, and the parents of the GPU processes (the tree view). Meant to run on a Poller's thread.
class LocalReader {
 public:
  // One of the scheduler's live leases.
  struct Lease {
    std::string uuid;                  // the GPU's
    std::string label;                 // "job 12 alice", "lease alice"
    std::string cancel_id;             // the agent's job `tarmac cancel` takes ("12"); "" when none may be named
    std::string job;                   // "job 12"; "" for none
    unsigned owner_pid = 0;            // the process that holds it (0: none)
    unsigned long long owner_ticks = 0;  // its start time (/proc/PID/stat field 22)
  };
  // The scheduler's live leases, read on the reader's thread (they are files).
  using Leases = std::function<std::vector<Lease>()>;
  LocalReader(std::shared_ptr<gpu::Backend> backend, gpu::ActivityThresholds thresholds, Leases leases = {},
              std::string proc_root = "/proc");
  [[nodiscard]] HostData read();

  // This machine as its agent sees it (docs/top.md "Through the agent"): the snapshot, its
  // processes' host facts read here, and the classes the agent measured over time.
  struct AgentLive {
    gpu::Snapshot snapshot;
    std::vector<gpu::Activity> classes;
    std::vector<std::vector<gpu::MigActivity>> mig_classes;
    std::vector<std::vector<diagnose::Backfill>> backfill;  // per device
  };
  // nullopt when the agent does not answer, with `problem` set when that is news.
  using AgentView = std::function<std::optional<AgentLive>(std::string& problem)>;
  using OpenBackend = std::function<Result<std::shared_ptr<gpu::Backend>>()>;
  // Reads through `agent` while it answers; once it does not, NVML for good (opened with `open`
  // when the reader was given no backend).
  void use_agent(AgentView agent, OpenBackend open);
  // Why the agent is not asked (it did not answer before the reader was made), shown with the data.
  void set_agent_problem(std::string problem) { agent_problem_ = std::move(problem); }

 private:
  [[nodiscard]] Result<gpu::Snapshot> read_nvml();
  [[nodiscard]] std::map<unsigned, Ancestor> hidden_holders(const gpu::Snapshot& snap) const;

  std::shared_ptr<gpu::Backend> backend_;
  AgentView agent_;
  OpenBackend open_;
  std::string agent_problem_;
  gpu::ActivityThresholds thresholds_;
  Leases leases_;
  std::vector<Lease> last_leases_;
  // The memory-error counters of each GPU as last read, and when (read less often than the rest).
  std::map<unsigned, gpu::DeviceSample> last_errors_;
  long long errors_read_ms_ = 0;
  static constexpr long long kErrorsEveryMs = 5000;
  long long leases_read_ms_ = 0;
  host::ProcReader proc_;
  std::string proc_root_;
  long ticks_per_s_ = 100;
  long page_bytes_ = 4096;
  // The previous CPU times, by pid and start time, with when they were read (steady ms).
  std::map<std::pair<unsigned, unsigned long long>, std::pair<unsigned long long, long long>> cpu_before_;
  // Ancestors read before, by pid and start time: a command line is read once per process.
  std::map<std::pair<unsigned, unsigned long long>, Ancestor> ancestors_;
  // The hidden holders found by the last scan, and when it ran (a scan of every process's parent
  // and of the GPU processes' descendants' descriptors: every kHiddenScanMs, not every reading).
  std::map<unsigned, Ancestor> hidden_;
  long long hidden_scanned_ms_ = 0;
  static constexpr long long kHiddenScanMs = 5000;
};

// Reads an agent's JSON API (/api/v1/gpus and /api/v1/processes; docs/metrics.md) at `address`
// ("host:port", or a URL): what it shows is its GPUs, classes and processes, read-only.
class AgentReader {
 public:
  explicit AgentReader(std::string address, long long timeout_ms = 2000);
  [[nodiscard]] HostData read();
  // The agent's history of each GPU over the last `seconds` (/api/v1/history), for the graphs;
  // empty when it cannot be had.
  [[nodiscard]] std::map<unsigned, GpuHistory> history(long long seconds, long long step_ms);
  [[nodiscard]] const std::string& base_url() const { return base_; }

 private:
  std::string base_;
  long long timeout_ms_;
};

// "b:9478" -> "http://b:9478"; a URL stays as it is (less a trailing "/").
[[nodiscard]] std::string agent_url(const std::string& address);

// The snapshot an agent's /api/v1/gpus and /api/v1/processes answers describe, with the class of
// each GPU; an error names what is wrong with them. Parsed as hostile input.
[[nodiscard]] Result<HostData> parse_agent(std::string_view gpus_json, std::string_view processes_json);

// An agent's /api/v1/history answer as graph points per GPU.
[[nodiscard]] Result<std::map<unsigned, GpuHistory>> parse_agent_history(std::string_view history_json);

// The variables of a process's environment the detail screen shows (CUDA_VISIBLE_DEVICES, RANK,
// LOCAL_RANK, WORLD_SIZE, TARMAC_JOB_ID...), or why they could not be read.
[[nodiscard]] Result<std::vector<std::pair<std::string, std::string>>> interesting_environment(const host::ProcReader& proc,
                                                                                             unsigned pid);

}  // namespace tarmac::tui
