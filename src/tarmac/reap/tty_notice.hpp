// The agent's line on a holder's own terminal (reaper.notify_tty, docs/reap.md "As a service").
// The agent runs as root and the terminal is a user's: the device is found from the holder's
// /proc/PID/stat alone (never a path anyone gives), opened without following links, without
// becoming anyone's controlling terminal and without blocking, and written only when it is the
// character device the kernel named, owned by the holder's user, and the holder shares the agent's
// mount namespace (so the number names the same terminal for both). Anything else is skipped.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tarmac/host/proc_reader.hpp"

namespace tarmac::reap {

enum class TtyOutcome {
  Written,     // the line went to the terminal
  NoTerminal,  // the holder has no controlling terminal (or it ended, or its pid is another's now)
  Skipped,     // the device is not the holder's terminal: not written
  Failed,      // it could not be opened or written (a full terminal is not waited for)
};

struct TtyNotice {
  TtyOutcome outcome = TtyOutcome::NoTerminal;
  std::string why;  // for the log: what was written to, or why not
};

// Why the open descriptor `fd` is not the terminal `tty_nr` (the kernel's encoding in
// /proc/PID/stat) owned by `uid`, or nullopt when it is.
[[nodiscard]] std::optional<std::string> terminal_mismatch(int fd, long long tty_nr, unsigned uid);

// Writes `line` (escaped with terminal_text, one line, at most 512 bytes) on the controlling
// terminal of `holder`, read from `proc`'s root, when it is a terminal owned by `uid` and the
// holder's mount namespace (root/PID/ns/mnt) is the reader's own (root/self/ns/mnt).
[[nodiscard]] TtyNotice notify_terminal(const host::ProcReader& proc, const host::ProcessIdentity& holder,
                                        unsigned uid, std::string_view line);

[[nodiscard]] const char* to_string(TtyOutcome outcome);

}  // namespace tarmac::reap
