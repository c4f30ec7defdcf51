// Reads a /proc tree to attribute the PIDs NVML reports to users, containers and Slurm jobs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tarmac/host/bounded_read.hpp"
#include "tarmac/host/device_files.hpp"
#include "tarmac/host/process_info.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::host {

// The user name of `uid` (the number as text when it has none), remembered for a minute.
[[nodiscard]] std::string user_name(unsigned uid);

// Who a process is, fixed when it is first seen: a pid names another process once this one ends
// and the number is reused, but no two processes of one boot share a pid and a start time.
struct ProcessIdentity {
  unsigned pid = 0;
  unsigned long long starttime_ticks = 0;  // /proc/<pid>/stat field 22: clock ticks after boot
  std::string boot_id;                     // /proc/sys/kernel/random/boot_id; "" when unreadable
  friend bool operator==(const ProcessIdentity&, const ProcessIdentity&) = default;
};

// What one read of /proc/PID/stat says: the identity and the facts that come with it, so that a
// pass that needs several of them reads the file once.
struct ProcessStat {
  ProcessIdentity identity;
  std::optional<long long> start_time_unix;  // seconds since the epoch; nullopt when the boot time is unknown
  std::string name;                          // comm
  char state = '?';
  unsigned parent_pid = 0;
  std::optional<std::string> tty;            // the controlling terminal's name ("pts/3"); nullopt for none
};

// Who is whose parent at one moment: one scan of every /proc/*/stat. A pass that asks about many
// processes takes one (ProcReader::parent_index) instead of a scan per question, which made reap's
// survey quadratic in the machine's processes.
class ParentIndex {
 public:
  // Direct children of `pid` in ascending order.
  [[nodiscard]] std::vector<unsigned> children(unsigned pid) const;
  // All descendants of `pid`, breadth-first (children before grandchildren), each once.
  [[nodiscard]] std::vector<unsigned> descendants(unsigned pid) const;

 private:
  friend class ProcReader;
  std::unordered_map<unsigned, std::vector<unsigned>> kids_;  // ascending
};

// Reads process facts under a /proc root; the root is injectable so tests use a fake tree.
class ProcReader {
 public:
  // Reads the boot time and clock tick rate once: neither changes while tarmac runs.
  // `test_device_path`: the one path besides NVIDIA's device files whose descriptors holds_device
  // may stat (TARMAC_REAP_TEST_DEVICE_FILE, only while reap's preview gate is open; "" otherwise).
  explicit ProcReader(std::string proc_root = "/proc", std::string test_device_path = {});
  // The same, reading the files that take a process's memory map lock (cmdline, environ) through
  // `memory_reads` instead of BoundedReader::shared() (tests: another deadline, a read that blocks).
  ProcReader(std::string proc_root, std::string test_device_path, BoundedReader& memory_reads);

  // Everything readable about `pid`; never fails: missing pieces stay nullopt, and a PID absent
  // from the root is NotInNamespace. Its command line and environment are read within a deadline
  // (BoundedReader); when they could not be, `unread` says so.
  [[nodiscard]] ProcessInfo read(unsigned pid) const;
  // The same for several processes, their command lines (then environments) read in one hand-over
  // to the bounded reader (BoundedReader::read_many): what a snapshot of many GPU processes uses.
  // `stat_texts`, when given (one per pid), are their /proc/PID/stat as the caller just read it
  // (ProcessCache reads it first to know whom it has): not read again.
  [[nodiscard]] std::vector<ProcessInfo> read_many(const std::vector<unsigned>& pids,
                                                   const std::vector<std::optional<std::string>>& stat_texts = {}) const;

  // Direct children of `pid` in ascending order, found by scanning the ppid of every /proc/*/stat.
  [[nodiscard]] std::vector<unsigned> children(unsigned pid) const;

  // All descendants of `pid`, breadth-first (children before grandchildren), each once.
  [[nodiscard]] std::vector<unsigned> descendants(unsigned pid) const;

  // Every process's parent now, from one scan: for many children/descendants questions.
  [[nodiscard]] ParentIndex parent_index() const;

  // `pid`'s identity now (a zombie's too); nullopt when no such process is visible.
  [[nodiscard]] std::optional<ProcessIdentity> identity(unsigned pid) const;

  // `pid`'s identity with what else its stat says (one read); nullopt when no such process is visible.
  [[nodiscard]] std::optional<ProcessStat> stat(unsigned pid) const;

  // `pid`'s effective uid (/proc/PID/status); nullopt when unreadable.
  [[nodiscard]] std::optional<unsigned> owner_uid(unsigned pid) const;

  // How many of `pid`'s threads (/proc/PID/task/*) are not defunct: a thread-group leader that has
  // exited shows Z while its other threads still run (and hold what the process holds). nullopt
  // when the task directory cannot be read; at most kMaxThreadsRead threads are read.
  [[nodiscard]] std::optional<unsigned> live_threads(unsigned pid) const;
  static constexpr unsigned kMaxThreadsRead = 1U << 16;

  // Whether `pid` has the character device `device` open (host::holds_device under this root,
  // statting only NVIDIA's device files and the test device path). A
  // defunct leader's own fd directory is empty: then its first live thread's descriptors are read.
  [[nodiscard]] Holding holds_device(unsigned pid, DeviceNumber device) const;

  // The value of `key` in the environment `pid` was started with; nullopt when it has none or
  // the file cannot be read (only its owner and root may); an error when the read did not finish
  // in time (BoundedReader): then whether it has one is unknown.
  [[nodiscard]] Result<std::optional<std::string>> environ_value(unsigned pid, std::string_view key) const;

  // The controlling terminal's name ("pts/3"); nullopt for none or an unreadable stat.
  [[nodiscard]] std::optional<std::string> tty(unsigned pid) const;

  // /proc/<pid>/cgroup as it is (compared, not parsed, to find a process's cgroup-mates).
  [[nodiscard]] std::optional<std::string> cgroup_text(unsigned pid) const;

  // Whether this process runs in the host's PID namespace (NSpid has one entry), where the pids
  // NVML reports are the ones /proc shows; nullopt when the kernel does not say.
  [[nodiscard]] std::optional<bool> in_host_pid_namespace() const;

  [[nodiscard]] const std::string& root() const { return root_; }

 private:
  [[nodiscard]] std::string pid_path(unsigned pid, const char* file) const;
  // A start time in clock ticks after boot as seconds since the epoch; nullopt without a boot time.
  [[nodiscard]] std::optional<long long> unix_start(unsigned long long starttime_ticks) const;

  // /proc/PID/task/TID of `pid`'s threads that are not defunct, at most `at_most`; nullopt when
  // the task directory cannot be read.
  [[nodiscard]] std::optional<std::vector<std::string>> live_thread_dirs(unsigned pid, unsigned at_most) const;

  // A file of `pid`'s that takes its memory map lock, through memory_reads_; when the read did not
  // finish in time, `unread` says why.
  [[nodiscard]] BoundedRead read_memory_file(unsigned pid, const char* file, std::optional<std::string>& unread) const;
  // What a memory file's read that gave `got` leaves unknown, said in `unread`.
  void note_unread(const BoundedRead& got, const std::string& path, std::optional<std::string>& unread) const;
  // The files of `pid` that do not take its memory map lock (stat, status, cgroup).
  [[nodiscard]] ProcessInfo read_plain(unsigned pid, const std::optional<std::string>& stat_text) const;

  std::string root_;
  std::string test_device_path_;
  BoundedReader* memory_reads_;  // not owned: the shared one, or a test's that outlives this reader
  std::string boot_id_;
  std::optional<long long> boot_time_unix_;
  long clock_ticks_per_s_ = 0;
};

}  // namespace tarmac::host
