// Per-GPU leases in a lock directory shared by every user (docs/scheduler.md): the agentless way
// that concurrent `tarmac pick --hold` and `tarmac run` never hand out the same GPU twice.
//
// One file per leased GPU, `<dir>/gpu-<uuid>.lease`, holding one line:
//   pid starttime expires_unix_ms job_id user
// A lease is live while its owner runs (pid 0: no owner) and it has not expired (0: no expiry).
// Every "read the leases, choose, write the leases" happens under an exclusive flock of
// `<dir>/.lock`, so it is atomic across processes.
//
// The directory is shared with every user, so everything in it is hostile (docs/security.md): it
// is used only when root or the caller owns it (sticky when others may write it), and every file
// in it is opened relative to the directory's descriptor, never through a symlink, never blocking
// (a FIFO), checked with fstat (a regular file, its owner, its size) before it is believed.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "tarmac/util/fd.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sched {

struct Lease {
  std::string uuid;                      // the GPU's "GPU-..." UUID
  int pid = 0;                           // owner; 0 for none (only the expiry ends the lease)
  unsigned long long starttime = 0;      // the owner's start time (/proc/PID/stat field 22): PID reuse guard
  long long expires_unix_ms = 0;         // 0: no expiry (it lives as long as its owner)
  std::string job_id;                    // TARMAC_JOB_ID of the job, no spaces
  std::string user;                      // who leased it, no spaces
  uid_t file_uid = 0;                    // the owner of the lease file (set when read from one)
  // When the file was last written (its ctime, which its owner cannot set back; set when read from
  // one): what bounds a lease without an owner process (scheduler.max_hold).
  long long written_unix_ms = 0;
};

// The lease file's line (without the UUID, which is in the file's name), and back; nullopt when
// the text is not a lease (also when its pid is 1 or below 0: only 0, "no owner", or a real
// process of 2 and above can own a lease).
[[nodiscard]] std::string format_lease(const Lease& lease);
[[nodiscard]] std::optional<Lease> parse_lease(std::string_view uuid, std::string_view text);

// A process id read from a file or the database: a whole decimal number of 2 and above (0 would
// make kill() signal the caller's process group, 1 is init); nullopt otherwise.
[[nodiscard]] std::optional<int> parse_pid(std::string_view text);

// The start time of `pid` from /proc/PID/stat; nullopt when no such process runs (or a zombie).
[[nodiscard]] std::optional<unsigned long long> process_starttime(int pid);

// The effective uid of `pid` (/proc/PID/status); nullopt when it cannot be read.
[[nodiscard]] std::optional<uid_t> process_uid(int pid);

// "by alice, job J, until 2026-12-01 14:02:11 UTC" / "by alice, job J, pid 123": who holds a lease.
[[nodiscard]] std::string describe(const Lease& lease);

// Whether `lease` still holds at `now_unix_ms`: not expired, and its owner (if any) alive with the
// recorded start time and run by the user who owns the lease file (file_uid), so that nobody can
// hold a GPU by naming someone else's long-lived process (PID 1 and its public start time). A
// lease with no owner process (`pick --hold`) in a file that is not root's holds at most
// `max_hold_ms` after it was written (0: no bound), whatever expiry it names: a user cannot hold
// GPUs away from everyone for a year with one command. Root's own (the agent's) are its to bound.
[[nodiscard]] bool lease_is_live(const Lease& lease, long long now_unix_ms, long long max_hold_ms = 0);

// The lock directory: $TARMAC_LOCK_DIR when set, else `configured` (scheduler.lock_dir) when not
// empty, else /run/tarmac/locks (kDefaultLockDir).
inline constexpr const char* kDefaultLockDir = "/run/tarmac/locks";
[[nodiscard]] std::string lock_dir(const std::string& configured);

// A lease directory, held open: every file in it is reached through its descriptor, so renaming or
// replacing the path after open changes nothing for this process.
class LeaseDir {
 public:
  // The exclusive lock of the whole directory, released when destroyed.
  class [[nodiscard]] DirLock {
   public:
    explicit DirLock(util::Fd fd) : fd_(std::move(fd)) {}

   private:
    util::Fd fd_;  // closing the last descriptor releases the flock
  };

  // Opens `dir`. A missing directory is created when its parent is safe (owned by root or the
  // caller, and sticky if others may write it): by root mode 1777 with its `.lock`, shared by every
  // user; by anyone else mode 0700, theirs alone. An existing one is refused, with a message naming
  // it, unless it is a directory (not a symlink) owned by root or by the caller, and sticky when
  // group or others may write it.
  // `max_hold_ms`: lease_is_live's bound on leases without an owner process (0: none).
  [[nodiscard]] static Result<LeaseDir> open(std::string dir, long long max_hold_ms = 0);

  [[nodiscard]] const std::string& path() const { return dir_; }
  // The directory's owner: root's shared directory, or the caller's own.
  [[nodiscard]] uid_t owner() const { return owner_; }

  // Waits until this process holds the directory's lock: forever when `wait_ms` is negative, else
  // at most `wait_ms` (an Error naming the lock when someone holds it longer). `.lock` must be a
  // regular file owned by the directory's owner, so no user can swap it for one of their own.
  [[nodiscard]] Result<DirLock> lock(long long wait_ms = -1) const;

  // What a listing does with the stale lease files it finds.
  enum class StaleFiles {
    Remove,  // the scheduler's own listing, under the lock
    Keep,    // a reader's (reap): no lock taken, nothing removed
  };

  // The live leases. Stale lease files (owner gone, PID reused, expired, unreadable, not a regular
  // file, a pid its file's owner does not run) are ignored, and with StaleFiles::Remove (call with
  // the lock held) removed where permissions allow. StaleFiles::Keep needs no lock: writers
  // replace a lease file by rename, so a lockless read sees a whole file, old or new; and it
  // removes nothing, so a root reader never deletes what it judged (N5 of reap's second review).
  [[nodiscard]] Result<std::vector<Lease>> live_leases(long long now_unix_ms,
                                                       StaleFiles stale = StaleFiles::Remove) const;

  // Writes each lease's file, mode 0644, atomically: a new temporary file of a random name made
  // with O_EXCL, then renamed over the lease (call with the lock held).
  [[nodiscard]] Result<void> write(const std::vector<Lease>& leases) const;

  // Removes the lease files of `uuids` that still belong to `job_id` (call with the lock held).
  void remove(const std::vector<std::string>& uuids, const std::string& job_id) const;

 private:
  LeaseDir(std::string dir, util::Fd fd, uid_t owner, long long max_hold_ms)
      : dir_(std::move(dir)), fd_(std::move(fd)), owner_(owner), max_hold_ms_(max_hold_ms) {}
  std::string dir_;
  util::Fd fd_;
  uid_t owner_ = 0;
  long long max_hold_ms_ = 0;
};

}  // namespace tarmac::sched
