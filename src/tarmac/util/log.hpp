// Logging for libraries: they hand their lines to a sink the top level chooses (the agent's is
// stderr, with journald priorities under systemd), and never print themselves.
#pragma once

#include <functional>
#include <string>

namespace tarmac::util {

enum class LogLevel { Info, Warning, Error };

// Where a library's log lines go; an empty sink drops them.
using LogSink = std::function<void(LogLevel, const std::string&)>;

}  // namespace tarmac::util
