// The gate on ending processes: `reap --kill` and the agent's policy both end holders only while
// it is open (docs/reap.md "Before --kill is enabled"). One function, so that lifting it is one
// change and the command and the agent can never disagree.
#pragma once

namespace tarmac::reap {

// Whether ending processes is enabled: only with TARMAC_REAP_KILL_PREVIEW=1 until the review's
// defects are fixed, for the tests and for evaluation on a machine whose every user is trusted.
[[nodiscard]] bool kill_gate_open();

// Why it is shut, for the command's error and the agent's log.
[[nodiscard]] const char* kill_gate_reason();

}  // namespace tarmac::reap
