// The gate on ending processes: `reap --kill` and the agent's policy both end holders only while
// it is open (docs/reap.md "Safety checks"). One function, so that lifting it is one change and
// the command and the agent can never disagree.
#pragma once

#include <optional>
#include <string>

#include "tarmac/host/device_files.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::reap {

// Whether ending processes is enabled: only with TARMAC_REAP_KILL_PREVIEW=1 until a second review
// of the fixes of the first one's findings, for the tests and for evaluation on a machine whose
// every user is trusted.
[[nodiscard]] bool kill_gate_open();

// Why it is shut, to follow "is" ("reap --kill is not enabled yet: ..."). Every way to a signal
// checks the gate (kill_candidates, reap_process), so no caller can go around it.
[[nodiscard]] const char* kill_gate_reason();
// What a candidate left while the gate is shut says.
inline constexpr const char* kKillGateClosed =
    "reap --kill is not enabled yet: the fixes for a security review of it (docs/reap.md, \"Safety checks\") await a "
    "second review";

// Tests only, and only while the gate is open: TARMAC_REAP_TEST_DEVICE_FILE, the one path besides
// NVIDIA's device files whose descriptors are stat'ed (host::ProcReader's test_device_path); "" when
// unset or the gate is shut. It goes when the gate goes.
[[nodiscard]] std::string test_device_path();

// Tests only, and only while the gate is open: the character device TARMAC_REAP_TEST_DEVICE_FILE
// names (test_device_path), taken for every GPU's own file (the tests cannot create a GPU's device node;
// GatherOptions::device_file_override). nullopt when unset or the gate is shut; an error when it
// names no character device.
[[nodiscard]] Result<std::optional<host::DeviceNumber>> test_device_file();

}  // namespace tarmac::reap
