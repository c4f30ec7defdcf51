// Small file-system helpers.
#pragma once

#include <optional>
#include <string>

namespace tarmac::util {

// The whole file, or nullopt when it cannot be opened or read. Reads to EOF rather than trusting
// the size, since /proc files report a size of 0.
[[nodiscard]] std::optional<std::string> read_file(const std::string& path);

}  // namespace tarmac::util
