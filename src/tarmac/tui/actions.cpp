#include "tarmac/tui/actions.hpp"

#include <fmt/format.h>

#include "tarmac/tui/view.hpp"
#include "tarmac/util/process.hpp"

namespace tarmac::tui {

std::string send_signal(const host::ProcReader& proc, const Row& row, int signal, unsigned my_uid) {
  const std::string who = fmt::format("PID {} ({})", row.pid, row.name.empty() ? "?" : row.name);
  if (row.remote) return who + ": a process of another host; nothing sent";
  if (!row.start_time_unix) return who + ": its start time is unknown, so it cannot be told from a reused pid; nothing sent";
  if (my_uid != 0 && (!row.uid || *row.uid != my_uid)) {
    return who + ": another user's process; only root may signal it; nothing sent";
  }
  auto fd = util::open_pidfd(static_cast<pid_t>(row.pid));
  if (!fd.ok()) return who + ": " + fd.error().message + "; nothing sent";
  // Checked after the pidfd is open: from here the pidfd names this process or nobody.
  const auto now = proc.stat(row.pid);
  if (!now || now->start_time_unix != row.start_time_unix || (!row.name.empty() && now->name != row.name)) {
    return who + ": it has ended, or its pid now names another process; nothing sent";
  }
  const auto sent = util::signal_pidfd(*fd, signal);
  if (!sent.ok()) return who + ": " + sent.error().message;
  return fmt::format("SIG{} sent to {}", signal_name(signal), who);
}

}  // namespace tarmac::tui
