// A job's process group (docs/scheduler.md): start a command as the leader of a new group, as a
// given user, and supervise it to its end: the wall-clock limit (SIGTERM, a grace period, SIGKILL
// of the group), stop signals passed on (and escalated after the grace period), and what the
// command leaves running in its group. Shared by the agentless `tarmac run` and the agent's job
// wrapper, `tarmac job-shim`; both are single-threaded when they use it.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "tarmac/util/process.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sched {

// A shell's exit status for a wait(2) status: the exit code, or 128 + the signal.
[[nodiscard]] int shell_status(int wait_status);

// The signals a supervisor takes synchronously (SIGINT, SIGTERM, SIGHUP, SIGCHLD). Block them from
// the start (threads a library may start inherit the mask) and take them with wait_signal.
[[nodiscard]] sigset_t handled_signals();
// The next handled signal within `ms`, or 0.
[[nodiscard]] int wait_signal(const sigset_t& set, long long ms);
[[nodiscard]] bool is_stop_signal(int sig);

[[nodiscard]] long long monotonic_ms();

// `base` (KEY=VALUE strings) with the job's CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER=PCI_BUS_ID
// (unless `uuids`), TARMAC_JOB_ID and TARMAC_JOB_NAME (when named) in place of any inherited.
[[nodiscard]] std::vector<std::string> job_environment(const std::vector<std::string>& base,
                                                       const std::string& visible, bool uuids,
                                                       const std::string& job_id, const std::string& name);

// Starts a job's command (path, argv, env, cwd, user and take_terminal from `spec`) as the leader of
// a new process group, as a shell starts a command: it keeps the descriptors this process passes
// on (those without FD_CLOEXEC) and the signals it ignores, with `original_mask` as its signal mask.
// Returns the child, or why it could not start (util::start_process names the step).
[[nodiscard]] Result<util::Child> spawn(util::ProcessSpec spec, const sigset_t& original_mask);

// A shell's exit code for a command that could not start: 127 when it (or its directory) was not
// found, else 126.
[[nodiscard]] int not_started_code(const Error& error);

// Gives the terminal on stdin to process group `pgid`.
void give_terminal(pid_t pgid);
// Whether this process owns the terminal on stdin.
[[nodiscard]] bool owns_terminal();

struct Limits {
  std::optional<long long> time_ms;  // wall-clock limit
  long long grace_ms = 10000;        // between SIGTERM and SIGKILL
};

// Waits for the process group `pgid` (led by the child `pgid`) to end. At the wall-clock limit:
// SIGTERM to the group, SIGKILL after the grace period. A stop signal this process receives is
// passed on to the group, and the group is SIGKILLed if it still runs a grace period later. When the
// leader ends, what it left in its group gets SIGTERM, then SIGKILL. Messages go to stderr naming
// `what`. Reaps every child (the caller should be a child subreaper). Returns the leader's status.
[[nodiscard]] int supervise(pid_t pgid, const std::string& what, const Limits& limits, const sigset_t& handled);

}  // namespace tarmac::sched
