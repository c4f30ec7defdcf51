// The one way tarmac starts a process (the scheduler's job wrapper, a job, an alert's command).
// Everything the child needs is built before it exists; between its creation and exec it makes
// only async-signal-safe system calls, and a step that fails there comes back to the caller as an
// Error ("cannot run /x: exec: No such file or directory") instead of a child that dies silently.
//
// The child is made by a vfork-like clone (CLONE_VM | CLONE_VFORK, as glibc's posix_spawn does):
// the agent that starts jobs has threads and a large heap, and copying its page tables with fork
// was most of a job's start. Unlike posix_spawn, it can change user and group, and it says which
// step failed.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tarmac/util/fd.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::util {

// A source descriptor meaning "/dev/null" (opened for reading and writing) in a ChildFd.
inline constexpr int kDevNull = -2;

// Descriptor `child` of the new process is a copy of this process's descriptor `parent` (or
// /dev/null with kDevNull). `parent` may be CLOEXEC: the copy never is.
struct ChildFd {
  int child = -1;
  int parent = -1;
};

// What the child keeps besides its ChildFds.
enum class OtherFds {
  Close,          // nothing else: every other descriptor is closed before exec
  KeepInherited,  // what this process has without FD_CLOEXEC (a job keeps what its submitter passed)
};

enum class Session {
  Inherit,     // this process's session and process group
  NewSession,  // setsid: its own session and group, no controlling terminal
  NewGroup,    // setpgid(0, 0): its own process group in this session
};

// How the child's signal dispositions start (caught ones are always reset to the default by exec).
enum class Dispositions {
  Default,      // every signal back to its default, ignored ones too
  KeepIgnored,  // signals this process ignores stay ignored, as a shell does (nohup)
};

// The user a child runs as, set before exec with its supplementary groups (never looked up: the
// caller has them, e.g. from a socket's credentials).
struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

struct ProcessSpec {
  std::string path;               // run as is: no PATH search (resolve_command does that first)
  std::vector<std::string> argv;  // argv[0] first; at least one
  std::vector<std::string> env;   // the child's whole environment, KEY=VALUE, exactly as given
  std::vector<ChildFd> fds;       // e.g. {{0, kDevNull}, {1, log}, {2, log}}
  OtherFds other_fds = OtherFds::Close;
  Session session = Session::Inherit;
  std::optional<Identity> user;   // switch to it (groups, gid, then uid) before exec
  std::string cwd;                // entered after the user switch, so as that user; "" to stay
  std::optional<sigset_t> signal_mask;  // the child's mask at exec; nullopt: nothing blocked
  Dispositions dispositions = Dispositions::Default;
  bool take_terminal = false;     // with NewGroup: make the new group the foreground of the terminal on
                                  // the child's descriptor 0
};

// A started process. It is this process's child until reaped (with wait_for, or waitpid).
struct Child {
  pid_t pid = -1;
  Fd pidfd;  // refers to exactly this process (no pid reuse); empty on a kernel without pidfds
};

// Starts `spec`: the child, or an Error saying what failed and why (Error::Code::NotFound when
// that was ENOENT: a missing program or directory; Invalid for a spec that cannot be run; Io
// otherwise). A child whose setup failed has been reaped; no descriptor is left behind.
[[nodiscard]] Result<Child> start_process(const ProcessSpec& spec);

// Waits up to `timeout_ms` (0: just looks) for `child` to end, then reaps it: its wait(2) status,
// or nullopt while it still runs.
[[nodiscard]] Result<std::optional<int>> wait_for(const Child& child, long long timeout_ms);

// Runs `spec` with its standard output and error captured into `output` (at most 64 KiB kept), for
// at most `timeout_ms`, or until `*abandon` is set: then SIGKILL. Its wait(2) status when it ended
// on its own; nullopt when it was killed for the timeout or the abandon. `spec.fds` gets 1 and 2.
[[nodiscard]] Result<std::optional<int>> run_captured(ProcessSpec spec, long long timeout_ms, std::string& output,
                                                      const std::atomic<bool>* abandon = nullptr);

// Sends `sig` to `child` (through its pidfd when it has one). Not after it has been reaped.
[[nodiscard]] Result<void> send_signal(const Child& child, int sig);

// A pidfd for the process that has `pid` now (pidfd_open): from then on it refers to that process
// alone, even once the number is reused. Whoever opens one must check afterwards, not before, that
// the process is the one they mean (its start time): only then is the check about the pidfd's process.
[[nodiscard]] Result<Fd> open_pidfd(pid_t pid);

// Sends `sig` through `pidfd` (pidfd_send_signal): to that process or to nobody, never to a reused
// pid. ESRCH (it has ended) is an Error of code NotFound.
[[nodiscard]] Result<void> signal_pidfd(const Fd& pidfd, int sig);

// Whether the process behind `pidfd` has ended (its pidfd readable), waiting up to `timeout_ms`.
[[nodiscard]] bool pidfd_ended(const Fd& pidfd, long long timeout_ms);

// Where execve would find `name`: itself when it holds a '/', else the first executable regular
// file of that name in `path` (a PATH value; empty entries mean the current directory).
[[nodiscard]] std::optional<std::string> resolve_command(const std::string& name, const std::string& path);

// This process's environment as KEY=VALUE strings.
[[nodiscard]] std::vector<std::string> own_environment();

// This machine's name (gethostname); "localhost" when it has none.
[[nodiscard]] std::string host_name();

}  // namespace tarmac::util
