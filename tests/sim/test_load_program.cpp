// tarmac-sim-load: it shows up with its memory on the GPUs that CUDA_VISIBLE_DEVICES names
// (indices in CUDA's order, PCI_BUS_ID order, UUIDs), until it exits or is killed.
#include <signal.h>

#include "library_fixture.hpp"
#include "proc_info.hpp"

namespace tarmac::sim::test {
namespace {

class LoadProgram : public LibraryTest {
 protected:
  // Starts the load program; returns its pid once it is registered.
  pid_t start(const std::map<std::string, std::string>& env, std::vector<std::string> args) {
    std::map<std::string, std::string> full = env;
    full["TARMAC_SIM_STATE"] = dir_.path().string();
    args.insert(args.begin(), load_program().string());
    const pid_t pid = spawn(args, full, dir_.path() / fmt_log(++started_));
    EXPECT_TRUE(eventually([&] { return fs::exists(StateDir(dir_.path()).procs() / std::to_string(pid)); }))
        << read_text(dir_.path() / fmt_log(started_));
    children_.push_back(pid);
    return pid;
  }
  // Waits for a started load program to exit (and forgets it).
  std::optional<int> reap(pid_t pid, int timeout_ms) {
    const auto status = wait_exit(pid, timeout_ms);
    if (status) std::erase(children_, pid);
    return status;
  }
  void TearDown() override {
    for (pid_t pid : children_) {
      ::kill(pid, SIGKILL);
      (void)wait_exit(pid, 5000);
    }
    LibraryTest::TearDown();
  }
  // The compute processes NVML lists on a GPU, as (pid, MiB).
  std::vector<std::pair<unsigned, unsigned long long>> on_gpu(unsigned gpu) {
    nvmlProcessInfo_v2_t info[8];
    unsigned count = 8;
    EXPECT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(device(gpu), &count, info), NVML_SUCCESS);
    std::vector<std::pair<unsigned, unsigned long long>> out;
    for (unsigned i = 0; i < count; ++i) out.emplace_back(info[i].pid, info[i].usedGpuMemory >> 20);
    return out;
  }
  static std::string fmt_log(int n) { return "load" + std::to_string(n) + ".log"; }

  std::vector<pid_t> children_;
  int started_ = 0;
};

using Procs = std::vector<std::pair<unsigned, unsigned long long>>;

TEST_F(LoadProgram, IndexZeroIsTheFastestGpuByDefault) {
  const pid_t pid = start({{"CUDA_VISIBLE_DEVICES", "0"}}, {"--mem", "2GiB", "--util", "40"});
  EXPECT_EQ(on_gpu(1), (Procs{{pid, 2048}}));  // the H100
  EXPECT_TRUE(on_gpu(0).empty());
  nvmlUtilization_t util{};
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetUtilizationRates)(device(1), &util), NVML_SUCCESS);
  EXPECT_EQ(util.gpu, 80U);  // 40 % of the timeline plus the load's 40 %
}

TEST_F(LoadProgram, PciBusIdOrderMatchesNvml) {
  const pid_t pid = start({{"CUDA_VISIBLE_DEVICES", "0"}, {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}}, {"--mem", "512"});
  EXPECT_EQ(on_gpu(0), (Procs{{pid, 512}}));
  EXPECT_TRUE(on_gpu(1).empty());
}

TEST_F(LoadProgram, UuidsAndPrefixesSelectGpus) {
  const pid_t a = start({{"CUDA_VISIBLE_DEVICES", "GPU-bbbb2222-2222-3333-4444-555555555555"}}, {"--mem", "1GiB"});
  const pid_t b = start({{"CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb1"}}, {"--mem", "100"});
  EXPECT_EQ(on_gpu(2), (Procs{{a, 1024}}));
  EXPECT_EQ(on_gpu(0), (Procs{{b, 100}}));
  EXPECT_EQ(on_gpu(1), (Procs{{b, 100}}));
}

TEST_F(LoadProgram, WithoutCudaVisibleDevicesItUsesEveryGpuUntilKilled) {
  const pid_t pid = start({{"CUDA_VISIBLE_DEVICES", ""}}, {"--mem", "300"});  // "" unsets it
  for (unsigned g = 0; g < 3; ++g) EXPECT_EQ(on_gpu(g), (Procs{{pid, 300}})) << g;
  ::kill(pid, SIGTERM);
  EXPECT_EQ(reap(pid, 5000), 128 + SIGTERM);  // dies of the signal, as a CUDA program would
  EXPECT_TRUE(eventually([&] { return on_gpu(0).empty(); }));
  EXPECT_FALSE(fs::exists(StateDir(dir_.path()).procs() / std::to_string(pid)));
}

TEST_F(LoadProgram, ExitsWithItsCodeAfterItsTime) {
  const pid_t pid = start({}, {"--seconds", "0.2", "--exit-code", "7", "--mem", "10"});
  EXPECT_EQ(reap(pid, 5000), 7);
  EXPECT_TRUE(eventually([&] { return on_gpu(2).empty(); }));
}

TEST_F(LoadProgram, IgnoringSigtermNeedsSigkill) {
  const pid_t pid = start({}, {"--ignore-sigterm", "--mem", "10"});
  const auto starttime = read_proc_stat(pid)->starttime;
  ::kill(pid, SIGTERM);
  EXPECT_FALSE(reap(pid, 200).has_value());
  EXPECT_TRUE(process_alive(pid, starttime));
  ::kill(pid, SIGKILL);
  EXPECT_EQ(reap(pid, 5000), 128 + SIGKILL);
  EXPECT_TRUE(fs::exists(StateDir(dir_.path()).procs() / std::to_string(pid)));  // left behind ...
  EXPECT_TRUE(eventually([&] { return on_gpu(0).empty(); }));                    // ... but not counted
}

TEST_F(LoadProgram, CudaErrorsAndMisuse) {
  const auto env = [&](std::map<std::string, std::string> extra) {
    extra["TARMAC_SIM_STATE"] = dir_.path().string();
    return extra;
  };
  const RunResult oom = run({load_program().string(), "--mem", "100GiB"}, env({{"CUDA_VISIBLE_DEVICES", "2"}}));
  EXPECT_EQ(oom.status, 3);
  EXPECT_NE(oom.out.find("out of memory"), std::string::npos) << oom.out;
  const RunResult none = run({load_program().string()}, env({{"CUDA_VISIBLE_DEVICES", "7"}}));
  EXPECT_EQ(none.status, 3);
  EXPECT_NE(none.out.find("no CUDA-capable device"), std::string::npos) << none.out;
  const RunResult outside = run({load_program().string()}, {{"TARMAC_SIM_STATE", ""}});
  EXPECT_EQ(outside.status, 2);
  EXPECT_NE(outside.out.find("TARMAC_SIM_STATE"), std::string::npos) << outside.out;
  EXPECT_EQ(run({load_program().string(), "--util", "150"}, env({})).status, 2);
}

}  // namespace
}  // namespace tarmac::sim::test
