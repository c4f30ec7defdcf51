#include "tarmac/sched/supervise.hpp"

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

TEST(ResolveCommand, PathLookupAndExplicitPaths) {
  EXPECT_EQ(resolve_command("sh", "/nonexistent:/bin:/usr/bin"), std::optional<std::string>("/bin/sh"));
  EXPECT_EQ(resolve_command("/bin/sh", ""), std::optional<std::string>("/bin/sh"));
  EXPECT_FALSE(resolve_command("no-such-command-here", "/bin:/usr/bin"));
  EXPECT_FALSE(resolve_command("/etc/passwd", "")) << "not executable";
  EXPECT_FALSE(resolve_command("", "/bin"));
}

TEST(ShellStatus, ExitCodeOrSignal) {
  EXPECT_EQ(shell_status(7 << 8), 7);
  EXPECT_EQ(shell_status(SIGKILL), 128 + SIGKILL);
}

// Runs `argv` under supervise in a forked child (supervise takes signals synchronously and reaps
// every child, which must not disturb the test runner) and returns the child's exit status.
int supervised(std::vector<std::string> argv, Limits limits, int signal_after_ms = -1) {
  const pid_t runner = ::fork();
  if (runner == 0) {
    const sigset_t handled = handled_signals();
    sigset_t original;
    ::sigprocmask(SIG_BLOCK, &handled, &original);
    (void)::prctl(PR_SET_CHILD_SUBREAPER, 1);
    SpawnSpec spec;
    spec.path = argv.front();
    spec.argv = argv;
    spec.env = {"PATH=/bin:/usr/bin"};
    const pid_t pid = spawn(spec, original);
    if (signal_after_ms >= 0) {
      ::usleep(static_cast<useconds_t>(signal_after_ms) * 1000);
      ::kill(::getpid(), SIGTERM);  // as the agent cancelling a job signals its wrapper
    }
    ::_exit(shell_status(supervise(pid, argv.front(), limits, handled)));
  }
  int status = 0;
  ::waitpid(runner, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Supervise, ReturnsTheCommandsExitCode) {
  EXPECT_EQ(supervised({"/bin/sh", "-c", "exit 5"}, Limits{}), 5);
}

TEST(Supervise, WallClockLimitKillsAGroupThatIgnoresSigterm) {
  const long long start = monotonic_ms();
  const int code = supervised({"/bin/sh", "-c", "trap '' TERM; sleep 30 & sleep 30; wait"},
                              Limits{.time_ms = 200, .grace_ms = 300});
  EXPECT_EQ(code, 128 + SIGKILL);
  EXPECT_LT(monotonic_ms() - start, 10000);
}

TEST(Supervise, AStopSignalIsPassedOnThenEscalatedAfterTheGrace) {
  const long long start = monotonic_ms();
  EXPECT_EQ(supervised({"/bin/sh", "-c", "sleep 30"}, Limits{.grace_ms = 5000}, 100), 128 + SIGTERM);
  EXPECT_EQ(supervised({"/bin/sh", "-c", "trap '' TERM; sleep 30"}, Limits{.grace_ms = 300}, 100), 128 + SIGKILL);
  EXPECT_LT(monotonic_ms() - start, 10000);
}

TEST(Supervise, ACommandThatCannotStartExits127) {
  EXPECT_EQ(supervised({"/nonexistent/command"}, Limits{}), 127);
}

}  // namespace
}  // namespace tarmac::sched
