// Small file-system helpers.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tarmac::util {

// The whole file, or nullopt when it cannot be opened or read. Reads to EOF rather than trusting
// the size, since /proc files report a size of 0.
[[nodiscard]] std::optional<std::string> read_file(const std::string& path);
// The same for `relative` under the directory open as `dir_fd` (openat): a scan of many files in
// one directory, /proc's, need not walk the directory's path for each.
[[nodiscard]] std::optional<std::string> read_file_at(int dir_fd, const char* relative);

// Writes `text` to `path` through "<path>.tmp" and a rename, so that a reader never sees half a
// file; on failure removes the temporary file and returns false.
[[nodiscard]] bool write_file_atomically(const std::string& path, std::string_view text);

}  // namespace tarmac::util
