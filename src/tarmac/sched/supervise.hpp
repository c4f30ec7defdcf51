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

namespace tarmac::sched {

// Where execve would find `name`: itself when it holds a '/', else the first executable regular
// file of that name in `path` (a PATH value; empty entries mean the current directory).
[[nodiscard]] std::optional<std::string> resolve_command(const std::string& name, const std::string& path);

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

// This process's environment as KEY=VALUE strings.
[[nodiscard]] std::vector<std::string> own_environment();

struct SpawnSpec {
  std::string path;               // resolved executable
  std::vector<std::string> argv;  // argv[0] first
  std::vector<std::string> env;
  std::string cwd;                // "" to stay where we are
  std::optional<uid_t> uid;       // switch to this user (with gid and groups) before exec
  gid_t gid = 0;
  std::vector<gid_t> groups;
  bool terminal = false;          // hand the terminal on stdin to the new group
};

// Starts the command as the leader of a new process group with `original_mask` as its signal mask;
// returns its pid, or -1 (errno set) when fork fails. In the child a failed chdir, user switch or
// exec prints "tarmac: CMD: why" and exits 127 (not found) or 126.
[[nodiscard]] pid_t spawn(const SpawnSpec& spec, const sigset_t& original_mask);

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
