// Reads of /proc files that can block for as long as another user wants. Reading
// /proc/PID/cmdline or /proc/PID/environ takes the target's memory map lock (mmap_lock), and a
// thread of the target can keep that lock held without end: a page fault on a FUSE-backed mapping
// whose daemon its owner runs and never answers. Root's pass over every process (the agent's
// sampler and reaper, `tarmac reap --kill`) must not wait on it. Such a read runs on a helper
// thread and is waited for until a deadline; one that misses it is "late", and its helper stays
// stuck until the target lets go (nothing can interrupt it but SIGKILL to tarmac). So that a user
// cannot pile up stuck helpers, at most `max_stuck` may be stuck at once: past that, and for a
// file whose earlier read is still stuck, a read is refused at once. Late and refused both mean
// "unknown", which every caller must treat as such (docs/reap.md "Safety checks").
//
// The files that do not take the lock (stat, status, comm, cgroup, the fd links) are read directly.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tarmac::host {

// What a bounded read gave.
enum class ReadOutcome {
  Read,     // the file's content (text)
  Failed,   // no such file or not readable: the process ended, or another user's environ
  Late,     // not finished by the deadline; it goes on on its helper thread, its result unused
  Refused,  // not tried: too many reads are stuck, or one of this same file is
};

struct BoundedRead {
  ReadOutcome outcome = ReadOutcome::Failed;
  std::optional<std::string> text;  // set when Read

  // Neither read nor known to be unreadable: whatever the file would say is unknown.
  [[nodiscard]] bool unknown() const { return outcome == ReadOutcome::Late || outcome == ReadOutcome::Refused; }
};

struct BoundedReadLimits {
  // A read of a process that does not hold its lock takes microseconds; one that misses this
  // only makes a fact unknown for one pass.
  long long deadline_ms = 250;
  // Helpers stuck at once; a pass is stalled by at most max_stuck deadlines (then reads are refused).
  unsigned max_stuck = 4;
};

class BoundedReader {
 public:
  // Reads a whole file; nullopt when it cannot be read. May block without end.
  using ReadFn = std::function<std::optional<std::string>(const std::string& path)>;
  using Limits = BoundedReadLimits;

  // `read` is the plain read (util::read_file); tests give one that blocks.
  explicit BoundedReader(Limits limits = {}, ReadFn read = {});
  // Never waits for a stuck read: its helper finishes (or dies with the process) on its own.
  ~BoundedReader();
  BoundedReader(const BoundedReader&) = delete;
  BoundedReader& operator=(const BoundedReader&) = delete;

  // Reads `path` within the deadline (safe from any thread).
  [[nodiscard]] BoundedRead read(const std::string& path);

  // Reads every one of `paths`, in order, handed to the helpers at once, the caller woken once
  // when the last is read (one wake-up each way for the lot rather than one per file: a status of
  // 128 GPU processes made 256 round trips to a helper before). Each read has the deadline of a single read, counted from when the one before it
  // finished; one that misses it is Late (stuck, as above), and those after it are handed over
  // again, to another helper. Safe from any thread.
  [[nodiscard]] std::vector<BoundedRead> read_many(const std::vector<std::string>& paths);

  // How many reads are past their deadline and still running.
  [[nodiscard]] unsigned stuck() const;
  [[nodiscard]] const Limits& limits() const { return limits_; }

  // The process-wide reader every ProcReader uses unless given another: stuck helpers are the
  // process's threads, so their cap must be the process's too (a reader per pass would let each
  // pass add max_stuck more).
  [[nodiscard]] static BoundedReader& shared();

 private:
  struct State;
  // One helper thread: takes reads until told to close or enough others wait.
  static void help(const std::shared_ptr<State>& state);

  Limits limits_;
  std::shared_ptr<State> state_;  // shared with the helpers, which may outlive this reader
};

}  // namespace tarmac::host
