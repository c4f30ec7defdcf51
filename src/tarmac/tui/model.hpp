// `tarmac top`'s data (docs/top.md): what each host last said, the history its graphs draw, and
// the process rows in the order, filter and tree the user chose. Pure: the sources (sources.hpp)
// read NVML, /proc and agents on their own threads and hand over a HostData; nothing here blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tarmac/diagnose/verdicts.hpp"
#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"

namespace tarmac::tui {

// What /proc says of a process beyond host::ProcessInfo: its CPU use since the previous read and
// its resident memory (the local host only; an agent does not report them).
struct ProcUsage {
  std::optional<double> cpu_pct;  // of one core, since the previous read; nullopt on the first
  std::optional<std::uint64_t> rss_bytes;
};

// An ancestor of a GPU process (its launcher, a shell), for the tree view.
struct Ancestor {
  unsigned parent_pid = 0;
  std::string name;     // comm
  std::string command;  // its command line ("" when unreadable)
  std::optional<std::string> user;
  std::optional<long long> start_time_unix;
  std::optional<unsigned> uid;
  unsigned long long start_ticks = 0;  // /proc/PID/stat field 22: with the pid, who it is
};

// A bounded series of one value, one point per refresh; missing readings are skipped.
class Series {
 public:
  explicit Series(std::size_t capacity = 512) : capacity_(capacity) {}
  void add(double value);
  // Puts `older`'s points before these (as many as fit, the newest of them).
  void prepend(const Series& older);
  [[nodiscard]] const std::deque<double>& points() const { return points_; }

 private:
  std::size_t capacity_;
  std::deque<double> points_;
};

struct GpuHistory {
  Series util_pct, mem_pct, power_w, temp_c;
};

// One host as its source last saw it.
struct HostData {
  std::string name;                       // "" for this machine; "b:9478" for an agent
  std::optional<gpu::Snapshot> snapshot;  // the last one read; nullopt until the first
  std::vector<gpu::Activity> classes;     // per device of snapshot, in order
  // Per device of snapshot, the class of each of its MIG devices (docs/mig.md); empty when none.
  std::vector<std::vector<gpu::MigActivity>> mig_classes;
  std::map<unsigned, ProcUsage> usage;    // by pid
  std::map<unsigned, Ancestor> ancestors;  // by pid: parents (and theirs) of the GPU processes
  // GPU index -> the scheduler's lease on it ("job 12 alice", and the agent job `tarmac cancel` takes)
  std::map<unsigned, diagnose::GpuLease> leases;
  // Per device of snapshot, the lease on each of its MIG devices (label "" for none); empty when none.
  std::vector<std::vector<diagnose::GpuLease>> mig_leases;
  // Per device of snapshot, the backfill batches the agent sent it (through the agent only).
  std::vector<std::vector<diagnose::Backfill>> backfill;
  std::map<unsigned, std::string> jobs;    // pid -> the tarmac job it runs in ("job 12"): its lease's owner is it or a parent
  // Descendants of GPU processes that hold an NVIDIA device file without being listed by the
  // driver (a DataLoader worker that inherited the descriptors), by pid; parent_pid says whose.
  std::map<unsigned, Ancestor> hidden;
  long long received_ms = 0;              // steady-clock ms when snapshot arrived
  std::optional<std::string> problem;     // the source's last failure, while it lasts
  long long problem_since_ms = 0;         // steady-clock ms of the first failure in a row
  bool remote = false;                    // an agent's view (read-only, no /proc facts)
  bool via_agent = false;                 // this machine's data came from its agent's socket
  std::string agent_problem;              // why this machine's agent is no longer asked ("" if it is, or none runs)
  // Older points for the graphs, by GPU index (an agent's history), applied once by Model::update.
  std::map<unsigned, GpuHistory> history_prefill;
};

struct ProcessHistory {
  Series sm_pct, mem_mib;
};

// The process table's columns; Command is the one that takes what width is left.
enum class Column { Host, Gpu, Pid, User, Where, Mem, Sm, Cpu, Rss, Age, State, Command };

inline constexpr Column kSortable[] = {Column::Gpu, Column::Pid, Column::User, Column::Mem, Column::Sm,
                                       Column::Cpu, Column::Rss, Column::Age,  Column::Command};

[[nodiscard]] const char* column_title(Column column);

// One line of the process table: a GPU process, or (tree view) a launcher without a GPU of its own.
struct Row {
  std::size_t host = 0;  // index into the hosts
  std::string host_name;
  std::optional<unsigned> gpu;  // nullopt: a launcher row
  std::optional<unsigned> mig;  // its MIG device's index under the GPU (shown "4:1", as status does)
  unsigned pid = 0;
  std::optional<long long> start_time_unix;  // with pid, who it is (checked before a signal)
  std::optional<unsigned long long> start_ticks;  // the same to the clock tick, where known
  std::string user;                          // "" when unknown
  std::optional<unsigned> uid;
  bool others = false;  // another user's process (shown dimmed)
  std::string where;    // container, pod, Slurm job
  std::optional<std::uint64_t> mem_bytes;
  std::optional<unsigned> sm_pct;  // nullopt: unknown, never 0
  std::optional<double> cpu_pct;
  std::optional<std::uint64_t> rss_bytes;
  std::optional<long long> age_s;
  std::string state;  // "busy", "idle 4m", "unknown", "no /proc"
  std::string name;   // comm
  std::string command;
  unsigned depth = 0;     // tree indentation
  bool launcher = false;  // a tree row that holds no GPU itself
  bool remote = false;
};

// How the table is ordered and what it keeps.
struct TableOptions {
  Column sort = Column::Mem;
  bool descending = true;
  bool tree = false;
  std::string text;                    // kept when user, command, pid or where contains it (any case)
  bool only_mine = false;
  std::optional<unsigned> viewer_uid;  // "mine"
  std::optional<std::pair<std::size_t, unsigned>> gpu;  // host index, GPU index
};

// The screen's data: every host's last view, the graphs' history, each process's idle clock.
class Model {
 public:
  explicit Model(gpu::ActivityThresholds thresholds = {}) : thresholds_(thresholds) {}

  // Adds a host (in the order the screen shows them); returns its index.
  std::size_t add_host(std::string name, bool remote);

  // What the source of host `index` read now: its graphs advance by one point when it carries a
  // new snapshot. `now_ms` is the steady clock.
  void update(std::size_t index, HostData data, long long now_ms);

  // Fills the graphs of GPU `gpu` of host `index` with older points (an agent's history), oldest
  // first, before anything this run recorded.
  void prefill(std::size_t index, unsigned gpu, const GpuHistory& older);

  [[nodiscard]] const std::vector<HostData>& hosts() const { return hosts_; }
  [[nodiscard]] const GpuHistory* history(std::size_t host, unsigned gpu) const;
  // Per-process history of SM % (where known) and memory, by host and pid.
  [[nodiscard]] const ProcessHistory* process_history(std::size_t host, unsigned pid) const;

  // The verdicts of every host (a host's own when it is the only one; "host: ..." otherwise).
  [[nodiscard]] std::vector<diagnose::Verdict> verdicts() const;

  // The process rows, filtered and sorted (and in tree order when asked); `now_unix_s` for ages.
  [[nodiscard]] std::vector<Row> rows(const TableOptions& options, long long now_unix_s, long long now_ms) const;

  [[nodiscard]] const gpu::ActivityThresholds& thresholds() const { return thresholds_; }

 private:
  gpu::ActivityThresholds thresholds_;
  std::vector<HostData> hosts_;
  std::map<std::pair<std::size_t, unsigned>, GpuHistory> gpu_history_;
  std::map<std::pair<std::size_t, unsigned>, ProcessHistory> proc_history_;
  // When each process (host, pid, start) was first seen at 0 % SM in a row; erased when it works.
  std::map<std::tuple<std::size_t, unsigned, long long>, long long> idle_since_ms_;
};

// Whether `row` passes the filters of `options` (the GPU filter aside for launcher rows).
[[nodiscard]] bool keeps(const Row& row, const TableOptions& options);

// Orders `rows` by options.sort (missing values last, ties by host, GPU, pid).
void sort_rows(std::vector<Row>& rows, const TableOptions& options);

// `rows` (GPU processes) grouped under their launchers (torchrun, accelerate, deepspeed, mpirun,
// srun, or a parent with several GPU children), each group in sort order, launcher rows added from
// `ancestors` of their host: the tree view.
[[nodiscard]] std::vector<Row> tree_rows(const std::vector<Row>& rows, const std::vector<HostData>& hosts,
                                         const TableOptions& options);

// Whether a process with this name and command line launches ranks of a distributed job.
[[nodiscard]] bool is_launcher(const std::string& name, const std::string& command);

// "4s", "12m", "3h", "2d": an age as top shows it.
[[nodiscard]] std::string short_age(long long seconds);

}  // namespace tarmac::tui
