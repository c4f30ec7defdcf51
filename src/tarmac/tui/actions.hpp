// What `tarmac top` does to a process when asked: a signal through a pidfd, sent only after the
// pidfd's process is checked to be the row's (its pid and start time), so that a pid reused since
// the screen showed it is never signalled.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tarmac/host/proc_reader.hpp"
#include "tarmac/tui/model.hpp"

namespace tarmac::tui {

// Sends `signal` to the process of `row`; the text says what happened, for the screen's message
// line. Refuses another user's process unless tarmac runs as root (the kernel would too, but the
// refusal here names the reason), a row without a start time, and one whose process changed.
[[nodiscard]] std::string send_signal(const host::ProcReader& proc, const Row& row, int signal, unsigned my_uid);

// A tarmac command run in the background for the screen (`doctor --pid N`, `cancel ID`): its
// output (stdout and stderr, at most 64 KiB) comes back through take() once it ends, and `wake`
// is written then. It runs as the person running top, so the scheduler's rights apply to it.
class Task {
 public:
  struct Outcome {
    std::string title;
    int status = -1;  // the exit status; -1 when it could not run or was killed
    std::vector<std::string> lines;
  };
  // Starts `program` (tarmac itself) with `args`, stdin from /dev/null, at most `timeout_ms`.
  Task(std::string title, std::string program, std::vector<std::string> args, int wake_fd, long long timeout_ms = 60000);
  ~Task();
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  [[nodiscard]] std::optional<Outcome> take();
  [[nodiscard]] const std::string& title() const { return title_; }

 private:
  struct Shared;
  std::string title_;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace tarmac::tui
