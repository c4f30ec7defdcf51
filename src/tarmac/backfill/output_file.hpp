// What the agent (root) checks of an output a user hands over, beyond owner and type
// (docs/backfill.md "Security"): the file system it is on, learned without asking that file system
// (a FUSE daemon asked GETATTR may never answer, and the scheduler's thread would wait with it);
// which file it is (an inode number is soon reused: its birth time and the last line recorded in
// it say more); and a description of the file that is the agent's alone (the user cannot set
// O_APPEND on it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/backfill/batch.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::backfill {

// The file system type ("ext4") of mount `mnt_id` in `mountinfo` (the text of /proc/self/mountinfo);
// nullopt when it is not there (the file comes from another mount namespace) or the text is garbled.
[[nodiscard]] std::optional<std::string> mount_type(std::string_view mountinfo, std::uint64_t mnt_id);

// Whether a batch's output may live on file system `type`: local disks and NFS only. Not FUSE (a
// write can wait forever), nor procfs, cgroupfs or tmpfs (root's writes there reach kernel files
// or are charged to the agent's memory), nor anything unknown.
[[nodiscard]] bool output_file_system_allowed(std::string_view type);

// Refuses `fd` unless it is on an allowed file system; asks statx with AT_STATX_DONT_SYNC for the
// mount id and reads /proc/self/mountinfo, so the file system itself is never contacted. Call it
// before any other call on the descriptor.
[[nodiscard]] Result<void> check_output_file_system(int fd);

// The birth time of `fd`'s file in ns since the epoch; 0 when its file system keeps none (NFS).
[[nodiscard]] long long birth_time_ns(int fd);

// Whether the last line `rows` place inside the file's first `size` bytes is there and names its
// request (`id` batch_req_<batch>_<index>): a file that is not the batch's output fails this even
// when it has the inode number of the one submitted. Nothing to check when no line is recorded.
[[nodiscard]] Result<void> check_last_recorded_line(int fd, long long size, long long batch,
                                                    const std::vector<RequestRow>& rows);

// A new open file description of `fd`'s file (through /proc/self/fd), read-write, that no other
// process shares: the submitter keeps theirs, and setting O_APPEND on it no longer reaches the
// agent's writes. Refused when the file reopened is not the same (device and inode).
[[nodiscard]] Result<util::Fd> private_description(int fd);

}  // namespace tarmac::backfill
