#include "tarmac/sched/supervise.hpp"

#include <errno.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace tarmac::sched {
namespace {

TEST(JobEnvironment, ReplacesInheritedValues) {
  const auto env = job_environment({"PATH=/bin", "CUDA_VISIBLE_DEVICES=7", "TARMAC_JOB_ID=old", "HOME=/root"}, "4,5",
                                   false, "12", "train");
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/bin", "HOME=/root", "CUDA_VISIBLE_DEVICES=4,5",
                                           "CUDA_DEVICE_ORDER=PCI_BUS_ID", "TARMAC_JOB_ID=12", "TARMAC_JOB_NAME=train"}));
  const auto uuids = job_environment({"CUDA_DEVICE_ORDER=FASTEST_FIRST"}, "GPU-a", true, "1", "");
  EXPECT_EQ(uuids, (std::vector<std::string>{"CUDA_VISIBLE_DEVICES=GPU-a", "TARMAC_JOB_ID=1"}));
}

TEST(ShellStatus, ExitCodeOrSignal) {
  EXPECT_EQ(shell_status(7 << 8), 7);
  EXPECT_EQ(shell_status(SIGKILL), 128 + SIGKILL);
}

// The descriptor a command writes a byte to once it is ready to be supervised (e.g. after its
// `trap`): the runner below starts supervising, and signals, only then. A command that never writes
// is supervised once it closes the descriptor (exits or execs something that does not keep it).
constexpr int kReadyFd = 9;
constexpr const char* kReady = "echo >&9; ";  // in a shell command

enum class StopSignal { None, Sigterm };

// Runs `argv` under supervise in a forked child (supervise takes signals synchronously and reaps
// every child, which must not disturb the test runner) and returns the child's exit status. With
// StopSignal::Sigterm the runner sends itself SIGTERM, as the agent cancelling a job signals its
// wrapper, once the command is ready; blocked, it waits for supervise to take it.
int supervised(std::vector<std::string> argv, Limits limits, StopSignal stop = StopSignal::None) {
  const pid_t runner = ::fork();
  if (runner == 0) {
    const sigset_t handled = handled_signals();
    sigset_t original;
    ::sigprocmask(SIG_BLOCK, &handled, &original);
    (void)::prctl(PR_SET_CHILD_SUBREAPER, 1);
    int ready[2];
    if (::pipe(ready) != 0 || ::dup2(ready[1], kReadyFd) < 0) ::_exit(200);
    ::close(ready[1]);
    util::ProcessSpec spec;
    spec.path = argv.front();
    spec.argv = argv;
    spec.env = {"PATH=/bin:/usr/bin"};
    const auto child = spawn(spec, original);
    ::close(kReadyFd);
    if (!child.ok()) ::_exit(not_started_code(child.error()));
    char byte = 0;
    while (::read(ready[0], &byte, 1) < 0 && errno == EINTR) {
    }
    ::close(ready[0]);
    if (stop == StopSignal::Sigterm) ::kill(::getpid(), SIGTERM);
    ::_exit(shell_status(supervise(child->pid, argv.front(), limits, handled)));
  }
  int status = 0;
  ::waitpid(runner, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Supervise, ReturnsTheCommandsExitCode) {
  EXPECT_EQ(supervised({"/bin/sh", "-c", "exit 5"}, Limits{}), 5);
}

// Without the SIGKILL the shell, which ignores SIGTERM, would wait 30 s for its sleeps and exit 0.
TEST(Supervise, WallClockLimitKillsAGroupThatIgnoresSigterm) {
  const int code = supervised({"/bin/sh", "-c", std::string("trap '' TERM; ") + kReady + "sleep 30 & sleep 30; wait"},
                              Limits{.time_ms = 200, .grace_ms = 300});
  EXPECT_EQ(code, 128 + SIGKILL);
}

TEST(Supervise, AStopSignalIsPassedOnThenEscalatedAfterTheGrace) {
  EXPECT_EQ(supervised({"/bin/sh", "-c", std::string(kReady) + "sleep 30"}, Limits{.grace_ms = 5000},
                       StopSignal::Sigterm),
            128 + SIGTERM);
  EXPECT_EQ(supervised({"/bin/sh", "-c", std::string("trap '' TERM; ") + kReady + "sleep 30"}, Limits{.grace_ms = 300},
                       StopSignal::Sigterm),
            128 + SIGKILL);
}

TEST(Supervise, ACommandThatCannotStartExits127) {
  EXPECT_EQ(supervised({"/nonexistent/command"}, Limits{}), 127);
}

}  // namespace
}  // namespace tarmac::sched
