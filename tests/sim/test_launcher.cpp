// tarmac-sim as a program: the command's environment and exit status, scenario processes as
// real processes (killing one ends it in the simulation), runtime faults, the shared clock.
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "library_fixture.hpp"
#include "proc_info.hpp"
#include "registry.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sim::test {
namespace {

TEST(Launcher, RunsTheCommandWithTheSimulatedLibraryAndItsExitStatus) {
  const RunResult r = run({launcher().string(), "run", "--scenario", "a100x4-balanced", "--", "sh", "-c",
                           "echo lib=$TARMAC_NVML_LIB; echo state=$TARMAC_SIM_STATE; echo ld=$LD_LIBRARY_PATH; "
                           "test -f $TARMAC_SIM_STATE/ready || exit 9; exit 3"});
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("lib=" + sim_library().string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ld=" + sim_library().parent_path().string()), std::string::npos) << r.out;
  const auto at = r.out.find("state=");
  ASSERT_NE(at, std::string::npos);
  const std::string state = r.out.substr(at + 6, r.out.find('\n', at) - at - 6);
  EXPECT_FALSE(fs::exists(state)) << "the temporary state directory is removed: " << state;
}

TEST(Launcher, AcceptsTheArgumentsOfTarmacSimWithoutTheWordRun) {
  const RunResult r = run({launcher().string(), "--scenario", "h100x2-log", "--speed", "10", "--", "true"});
  EXPECT_EQ(r.status, 0) << r.out;
  const RunResult signalled = run({launcher().string(), "--scenario", "h100x2-log", "--", "sh", "-c", "kill -9 $$"});
  EXPECT_EQ(signalled.status, 128 + SIGKILL);
}

TEST(Launcher, OldDriverSelectsTheOldLibrary) {
  const RunResult r = run({launcher().string(), "run", "--scenario", "h100x2-log", "--driver", "old", "--", "sh", "-c",
                           "echo $TARMAC_NVML_LIB"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find(old_sim_library().string()), std::string::npos) << r.out;
}

TEST(Launcher, ABadScenarioIsALauncherErrorNamingTheLine) {
  TempDir dir;
  write_text(dir.path() / "bad.toml", "name = \"bad\"\n\n[[gpu]]\nname = 5\n");
  const RunResult r = run({launcher().string(), "run", "--scenario", (dir.path() / "bad.toml").string(), "--", "true"});
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.out.find("bad.toml:4:"), std::string::npos) << r.out;
  const RunResult unknown = run({launcher().string(), "run", "--scenario", "no-such-scenario", "--", "true"});
  EXPECT_EQ(unknown.status, 125);
  EXPECT_NE(unknown.out.find("a100x4-balanced"), std::string::npos) << unknown.out;  // names what exists
  EXPECT_EQ(run({launcher().string(), "run", "--scenario", "h100x2-log"}).status, 2);  // no command
  EXPECT_EQ(run({launcher().string(), "run", "--scenario", "h100x2-log", "--fault", "rc=BAD", "--", "true"}).status,
            125);
}

TEST(Launcher, ListsTheBundledScenarios) {
  const RunResult r = run({launcher().string(), "list"});
  EXPECT_EQ(r.status, 0);
  for (const char* name : {"a100x4-balanced", "a100x4-gpu0-only", "a100x4-dataloader-stall", "a100x4-thermal",
                           "a100x4-near-oom", "holding-zombie", "h100x2-log", "mixed-topology-8gpu",
                           "h100x8-idle-fleet", "no-driver-container", "mixed-gpus-workstation",
                           "a100x4-memory-imbalance", "a100x4-ranks-collide", "l40s-x4-pcie", "a100x4-gpu-fault",
                           "a100x4-stall-midway", "a100x4-thermal-spike", "zombie-next-to-worker"}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
  }
}

// A held simulation of a scenario, stopped with SIGTERM at the end.
class HeldSimulation {
 public:
  explicit HeldSimulation(const std::string& scenario, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{launcher().string(), "run", "--scenario", scenario, "--state", state().string(),
                                  "--hold"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_ = spawn(argv, {}, dir_.path() / "launcher.log");
    ready_ = eventually([&] { return fs::exists(StateDir(state()).ready()); }, 10000);
  }
  ~HeldSimulation() { stop(); }
  int stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    const auto status = wait_exit(pid_, 10000);
    pid_ = -1;
    return status.value_or(-1);
  }
  [[nodiscard]] bool ready() const { return ready_; }
  [[nodiscard]] fs::path state() const { return dir_.path() / "state"; }
  [[nodiscard]] std::vector<LiveProcess> processes() const { return read_live_processes(StateDir(state()).procs()); }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  bool ready_ = false;
};

TEST(Launcher, ScenarioProcessesAreRealAndKillingOneEndsItOnItsGpu) {
  HeldSimulation sim("a100x4-balanced");
  ASSERT_TRUE(sim.ready());
  const auto procs = sim.processes();
  ASSERT_EQ(procs.size(), 4U);
  for (const LiveProcess& p : procs) {
    EXPECT_EQ(read_comm(p.pid), "python");
    const auto argv = read_cmdline(p.pid);
    ASSERT_FALSE(argv.empty());
    EXPECT_EQ(argv[0], "python");
    EXPECT_EQ(argv[1], "train.py");
  }

  ::setenv("TARMAC_SIM_STATE", sim.state().c_str(), 1);
  NvmlLibrary lib;
  ASSERT_EQ(NVML(lib, nvmlInit_v2)(), NVML_SUCCESS);
  nvmlDevice_t gpu0 = nullptr;
  ASSERT_EQ(NVML(lib, nvmlDeviceGetHandleByIndex_v2)(0, &gpu0), NVML_SUCCESS);
  nvmlProcessInfo_v2_t info[4];
  unsigned count = 4;
  ASSERT_EQ(NVML(lib, nvmlDeviceGetComputeRunningProcesses_v3)(gpu0, &count, info), NVML_SUCCESS);
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(info[0].usedGpuMemory, 38500ULL << 20);
  char name[64];
  ASSERT_EQ(NVML(lib, nvmlSystemGetProcessName)(info[0].pid, name, sizeof name), NVML_SUCCESS);
  EXPECT_STREQ(name, "python");

  ::kill(static_cast<pid_t>(info[0].pid), SIGKILL);
  EXPECT_TRUE(eventually([&] {
    count = 4;
    return NVML(lib, nvmlDeviceGetComputeRunningProcesses_v3)(gpu0, &count, info) == NVML_SUCCESS && count == 0;
  }));
  nvmlUtilization_t util{};
  ASSERT_EQ(NVML(lib, nvmlDeviceGetUtilizationRates)(gpu0, &util), NVML_SUCCESS);
  EXPECT_EQ(util.gpu, 0U);
  unsigned mw = 0;
  ASSERT_EQ(NVML(lib, nvmlDeviceGetPowerUsage)(gpu0, &mw), NVML_SUCCESS);
  EXPECT_EQ(mw, 55000U);  // idle power
  nvmlMemory_v2_t mem{};
  mem.version = nvmlMemory_v2;
  ASSERT_EQ(NVML(lib, nvmlDeviceGetMemoryInfo_v2)(gpu0, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, 400ULL << 20);  // the memory is freed
  nvmlDevice_t gpu1 = nullptr;
  ASSERT_EQ(NVML(lib, nvmlDeviceGetHandleByIndex_v2)(1, &gpu1), NVML_SUCCESS);
  ASSERT_EQ(NVML(lib, nvmlDeviceGetUtilizationRates)(gpu1, &util), NVML_SUCCESS);
  EXPECT_EQ(util.gpu, 94U);  // the others still work

  // A fault injected at run time reaches the running client.
  const RunResult f = run({launcher().string(), "fault", "--state", sim.state().string(),
                           "function=nvmlDeviceGetPowerUsage,gpu=1,return=NOT_SUPPORTED"});
  ASSERT_EQ(f.status, 0) << f.out;
  EXPECT_EQ(NVML(lib, nvmlDeviceGetPowerUsage)(gpu1, &mw), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(run({launcher().string(), "fault", "--state", sim.state().string(), "gpu=9,lost"}).status, 2);
  NVML(lib, nvmlShutdown)();
  ::unsetenv("TARMAC_SIM_STATE");

  const std::vector<LiveProcess> before = sim.processes();
  EXPECT_EQ(sim.stop(), 0);
  for (const LiveProcess& p : before) EXPECT_FALSE(process_alive(p.pid, p.starttime)) << p.pid;
}

TEST(Launcher, TheClockRunsAtTheGivenSpeedAndStartsProcessesOnTime) {
  // The fleet's first busy window opens Monday 09:00: at 10 simulated hours a second, 0.9 s in.
  HeldSimulation sim("h100x8-idle-fleet", {"--speed", "36000"});
  ASSERT_TRUE(sim.ready());
  EXPECT_TRUE(sim.processes().empty());
  ASSERT_TRUE(eventually([&] { return sim.processes().size() == 4; }, 5000));
  for (const LiveProcess& p : sim.processes()) EXPECT_LT(p.gpus.front(), 4U);
  ASSERT_TRUE(eventually([&] { return sim.processes().empty(); }, 5000));  // 17:00: the job ends
  const RunResult status = run({launcher().string(), "status", "--state", sim.state().string()});
  EXPECT_NE(status.out.find("speed 36000"), std::string::npos) << status.out;
}

// Whether `uid` may run `program` (every directory on the way must let it through).
bool user_can_exec(uid_t uid, gid_t gid, const fs::path& program) {
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(gid) != 0 || ::setuid(uid) != 0) ::_exit(2);
    ::_exit(::access(program.c_str(), X_OK) == 0 ? 0 : 1);
  }
  return wait_exit(child, 5000) == 0;
}

TEST(Launcher, ScenarioProcessesRunAsTheirUserWhenRoot) {
  const passwd* nobody = ::getpwnam("nobody");
  if (::geteuid() != 0 || nobody == nullptr) GTEST_SKIP() << "needs root and the user nobody";
  if (!user_can_exec(nobody->pw_uid, nobody->pw_gid, load_program())) {
    GTEST_SKIP() << "nobody cannot reach " << load_program();
  }
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);  // the state directory below must be reachable by nobody
  const fs::path scenario = dir.path() / "users.toml";
  write_text(scenario, read_text(test_data("mixed-models.toml")) +
                           "\n[[process]]\ngpu = 0\nname = \"jupyter\"\nuser = \"nobody\"\nmemory_mib = 10\n"
                           "\n[[process]]\ngpu = 1\nname = \"ghost\"\nuser = \"no-such-user-here\"\nmemory_mib = 10\n");
  const fs::path state = dir.path() / "state";
  const pid_t launcher_pid = spawn({launcher().string(), "run", "--scenario", scenario.string(), "--state",
                                    state.string(), "--hold"},
                                   {}, dir.path() / "log");
  ASSERT_TRUE(eventually([&] { return fs::exists(StateDir(state).ready()); }, 10000)) << read_text(dir.path() / "log");
  for (const LiveProcess& p : read_live_processes(StateDir(state).procs())) {
    struct stat st {};
    ASSERT_EQ(::stat(("/proc/" + std::to_string(p.pid)).c_str(), &st), 0);
    // A user that does not exist here falls back to whoever runs the simulation.
    EXPECT_EQ(st.st_uid, *p.scenario_process == 0 ? nobody->pw_uid : ::geteuid()) << read_comm(p.pid).value_or("?");
  }
  ::kill(launcher_pid, SIGTERM);
  EXPECT_EQ(wait_exit(launcher_pid, 10000), 0);
}

}  // namespace
}  // namespace tarmac::sim::test
