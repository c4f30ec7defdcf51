// Reading a file that decides what a privileged process does (root's configuration): the file and
// every directory above it must be such that only the trusted owner could have written them.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "tarmac/util/result.hpp"

namespace tarmac::util {

// Who must have been the only one able to write a file for its contents to be used.
enum class Writers {
  Anyone,     // no ownership checks (a user reading their own files)
  OwnerOnly,  // owned by `owner`, not group- or world-writable, in directories only `owner` or root can change
};

// The whole of the regular file at `path`, read from the one descriptor that was checked, so that
// nothing can be swapped in between the check and the read.
//
// Always: the file is opened without blocking (a FIFO cannot hang the caller), must be a regular
// file, and must hold at most `max_bytes`. With Writers::OwnerOnly, additionally each directory
// from / down to the file's own is opened relative to the one above it and, by fstat, must be
// owned by `owner` or root and not writable by group or others unless sticky (as /tmp: only an
// entry's owner may replace it there), and the file must be owned by `owner` and not be group- or
// world-writable. Fails naming `path` and why.
[[nodiscard]] Result<std::string> read_trusted_file(const std::string& path, Writers writers, uid_t owner,
                                                    std::size_t max_bytes);

// Whether the Unix socket at `path` can only have been put there by `owner` or root: every
// directory from / down is checked as read_trusted_file checks them, none may be a symbolic link
// (whose target's own directories the walk would not check: resolve the path first), and the
// socket itself must be a socket owned by `owner` or root. A client that connects to the same path
// after this check cannot be redirected by anyone else. Fails naming `path` and why.
[[nodiscard]] Result<void> check_trusted_socket(const std::string& path, uid_t owner);

}  // namespace tarmac::util
