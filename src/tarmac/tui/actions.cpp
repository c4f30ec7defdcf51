#include "tarmac/tui/actions.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fmt/format.h>
#include <mutex>

#include "tarmac/util/clock.hpp"
#include "tarmac/util/fd.hpp"

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
  const bool same = now && now->start_time_unix == row.start_time_unix &&
                    (!row.start_ticks || now->identity.starttime_ticks == *row.start_ticks) &&
                    (row.name.empty() || now->name == row.name);
  if (!same) {
    return who + ": it has ended, or its pid now names another process; nothing sent";
  }
  const auto sent = util::signal_pidfd(*fd, signal);
  if (!sent.ok()) return who + ": " + sent.error().message;
  return fmt::format("SIG{} sent to {}", signal_name(signal), who);
}

}  // namespace tarmac::tui

namespace tarmac::tui {

struct Task::Shared {
  std::mutex m;
  std::optional<Outcome> outcome;
  std::atomic<bool> abandon{false};
  util::Fd wake;
};

Task::Task(std::string title, std::string program, std::vector<std::string> args, int wake_fd, long long timeout_ms)
    : title_(std::move(title)), shared_(std::make_shared<Shared>()) {
  if (wake_fd >= 0) shared_->wake = util::Fd(::fcntl(wake_fd, F_DUPFD_CLOEXEC, 0));
  thread_ = std::thread([shared = shared_, title = title_, program = std::move(program), args = std::move(args), timeout_ms] {
    Outcome out;
    out.title = title;
    util::ProcessSpec spec;
    spec.path = program;
    spec.argv.push_back(program);
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.env = util::own_environment();
    spec.fds = {{0, util::kDevNull}};
    spec.session = util::Session::NewGroup;  // the terminal's Ctrl-C is top's, not its
    std::string text;
    auto status = util::run_captured(std::move(spec), timeout_ms, text, &shared->abandon);
    if (!status.ok()) {
      out.lines.push_back(status.error().message);
    } else {
      if (*status && WIFEXITED(**status)) out.status = WEXITSTATUS(**status);
      if (!*status) text += "\n(stopped: it took too long)";
      std::size_t start = 0;
      while (start < text.size()) {
        const std::size_t end = text.find('\n', start);
        out.lines.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
        if (end == std::string::npos) break;
        start = end + 1;
      }
    }
    std::lock_guard<std::mutex> lock(shared->m);
    shared->outcome = std::move(out);
    if (shared->wake) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const auto n = ::write(shared->wake.get(), &one, sizeof one);
    }
  });
}

Task::~Task() {
  shared_->abandon = true;
  if (thread_.joinable()) thread_.join();
}

std::optional<Task::Outcome> Task::take() {
  std::lock_guard<std::mutex> lock(shared_->m);
  std::optional<Outcome> out = std::move(shared_->outcome);
  shared_->outcome.reset();
  return out;
}

}  // namespace tarmac::tui
