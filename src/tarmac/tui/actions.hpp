// What `tarmac top` does to a process when asked: a signal through a pidfd, sent only after the
// pidfd's process is checked to be the row's (its pid and start time), so that a pid reused since
// the screen showed it is never signalled.
#pragma once

#include <string>

#include "tarmac/host/proc_reader.hpp"
#include "tarmac/tui/model.hpp"

namespace tarmac::tui {

// Sends `signal` to the process of `row`; the text says what happened, for the screen's message
// line. Refuses another user's process unless tarmac runs as root (the kernel would too, but the
// refusal here names the reason), a row without a start time, and one whose process changed.
[[nodiscard]] std::string send_signal(const host::ProcReader& proc, const Row& row, int signal, unsigned my_uid);

}  // namespace tarmac::tui
