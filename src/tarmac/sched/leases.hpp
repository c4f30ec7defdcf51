// Per-GPU leases in a lock directory shared by every user (docs/scheduler.md): the agentless way
// that concurrent `tarmac pick --hold` and `tarmac run` never hand out the same GPU twice.
//
// One file per leased GPU, `<dir>/gpu-<uuid>.lease`, holding one line:
//   pid starttime expires_unix_ms job_id user
// A lease is live while its owner runs (pid 0: no owner) and it has not expired (0: no expiry).
// Every "read the leases, choose, write the leases" happens under an exclusive flock of
// `<dir>/.lock`, so it is atomic across processes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/util/result.hpp"

namespace tarmac::sched {

struct Lease {
  std::string uuid;                      // the GPU's "GPU-..." UUID
  int pid = 0;                           // owner; 0 for none (only the expiry ends the lease)
  unsigned long long starttime = 0;      // the owner's start time (/proc/PID/stat field 22): PID reuse guard
  long long expires_unix_ms = 0;         // 0: no expiry (it lives as long as its owner)
  std::string job_id;                    // TARMAC_JOB_ID of the job, no spaces
  std::string user;                      // who leased it, no spaces
};

// The lease file's line (without the UUID, which is in the file's name), and back; nullopt when
// the text is not a lease.
[[nodiscard]] std::string format_lease(const Lease& lease);
[[nodiscard]] std::optional<Lease> parse_lease(std::string_view uuid, std::string_view text);

// The start time of `pid` from /proc/PID/stat; nullopt when no such process runs (or a zombie).
[[nodiscard]] std::optional<unsigned long long> process_starttime(int pid);

// "by alice, job J, until 2026-12-01 14:02:11 UTC" / "by alice, job J, pid 123": who holds a lease.
[[nodiscard]] std::string describe(const Lease& lease);

// Whether `lease` still holds at `now_unix_ms`: not expired, and its owner (if any) alive with the
// recorded start time.
[[nodiscard]] bool lease_is_live(const Lease& lease, long long now_unix_ms);

// The lock directory: $TARMAC_LOCK_DIR when set, else `configured` (scheduler.lock_dir) when not
// empty, else /run/lock/tarmac.
[[nodiscard]] std::string lock_dir(const std::string& configured);

// A lease directory. Holding a DirLock serializes every process that uses the same directory.
class LeaseDir {
 public:
  // The exclusive lock of the whole directory, released when destroyed.
  class [[nodiscard]] DirLock {
   public:
    explicit DirLock(int fd) : fd_(fd) {}
    DirLock(DirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    DirLock& operator=(DirLock&&) = delete;
    DirLock(const DirLock&) = delete;
    ~DirLock();

   private:
    int fd_ = -1;
  };

  // Opens `dir`, creating it (mode 1777: sticky and world-writable, as /run/lock) when missing.
  [[nodiscard]] static Result<LeaseDir> open(std::string dir);

  [[nodiscard]] const std::string& path() const { return dir_; }

  // Blocks until this process holds the directory's lock.
  [[nodiscard]] Result<DirLock> lock() const;

  // The live leases (call with the lock held). Stale lease files (owner gone, PID reused, expired,
  // unreadable) are removed where permissions allow, and ignored either way.
  [[nodiscard]] Result<std::vector<Lease>> live_leases(long long now_unix_ms) const;

  // Writes each lease's file, mode 0644, atomically (call with the lock held).
  [[nodiscard]] Result<void> write(const std::vector<Lease>& leases) const;

  // Removes the lease files of `uuids` that still belong to `job_id` (call with the lock held).
  void remove(const std::vector<std::string>& uuids, const std::string& job_id) const;

 private:
  explicit LeaseDir(std::string dir) : dir_(std::move(dir)) {}
  [[nodiscard]] std::string file_of(std::string_view uuid) const;
  std::string dir_;
};

}  // namespace tarmac::sched
