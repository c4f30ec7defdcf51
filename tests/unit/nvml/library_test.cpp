// The real loader against the project's simulator library (and against libraries that are not
// NVML at all): every way loading can go wrong, and the fallbacks for an older driver.
#include "tarmac/nvml/library.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "tarmac/gpu/backend.hpp"

namespace tarmac::nvml {
namespace {

const std::string kSimLib = TARMAC_SIM_LIB;          // build/sim/libnvidia-ml.so.1
const std::string kOldSimLib = TARMAC_OLD_SIM_LIB;   // build/sim/old-driver/libnvidia-ml.so.1

class LibraryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("TARMAC_SIM_STATE");
    unsetenv("TARMAC_NVML_LIB");
    setenv("TARMAC_SIM_SCENARIO", "a100x4-balanced", 1);
  }
};

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST_F(LibraryTest, MissingLibrarySaysWhatToCheck) {
  auto lib = Library::open({"/nonexistent/libnvidia-ml.so.1"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.error().code, Error::Code::NotFound);
  const std::string& m = lib.error().message;
  EXPECT_NE(m.find("NVIDIA driver library was not found"), std::string::npos) << m;
  EXPECT_NE(m.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << m;
  EXPECT_NE(m.find("--gpus all"), std::string::npos) << m;
  EXPECT_NE(m.find("TARMAC_NVML_LIB"), std::string::npos) << m;
}

TEST_F(LibraryTest, EnvironmentChoosesTheLibraryWhenNoPathIsGiven) {
  setenv("TARMAC_NVML_LIB", "/nonexistent/from-env.so", 1);
  auto lib = Library::open({});
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.error().message.find("/nonexistent/from-env.so"), std::string::npos);
}

TEST_F(LibraryTest, ALibraryWithoutNvmlIsRefusedByName) {
  auto lib = Library::open({"libm.so.6"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.error().code, Error::Code::Unsupported);
  EXPECT_NE(lib.error().message.find("nvmlInit"), std::string::npos) << lib.error().message;
  EXPECT_NE(lib.error().message.find("nvmlDeviceGetCount"), std::string::npos) << lib.error().message;
}

TEST_F(LibraryTest, TheSimulatorExportsEveryEntryPointOfTheTable) {
  auto lib = Library::open({kSimLib});
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  EXPECT_TRUE((*lib)->missing_optional().empty()) << (*lib)->missing_optional().front();
  EXPECT_NE((*lib)->fn().nvmlInitWithFlags, nullptr);
  EXPECT_NE((*lib)->fn().nvmlErrorString, nullptr);
}

TEST_F(LibraryTest, AnOlderDriverLacksNewerEntryPointsAndTheyAreReportedMissing) {
  auto lib = Library::open({kOldSimLib});
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  const auto& missing = (*lib)->missing_optional();
  for (const char* name : {"nvmlInitWithFlags", "nvmlDeviceGetCount_v2", "nvmlDeviceGetMemoryInfo_v2",
                           "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlGpmSampleGet"}) {
    EXPECT_TRUE(contains(missing, name)) << name;
  }
  EXPECT_EQ((*lib)->fn().nvmlDeviceGetCount_v2, nullptr);
  EXPECT_NE((*lib)->fn().nvmlDeviceGetCount, nullptr);
}

TEST_F(LibraryTest, ReturnCodesHaveNamesAndSentences) {
  EXPECT_EQ(return_code_name(NVML_ERROR_GPU_IS_LOST), "NVML_ERROR_GPU_IS_LOST");
  EXPECT_NE(return_code_message(NVML_ERROR_GPU_IS_LOST).find("fallen off the bus"), std::string::npos);
  EXPECT_EQ(return_code_name(4242), "NVML_ERROR_4242");
  EXPECT_NE(return_code_message(NVML_ERROR_DRIVER_NOT_LOADED).find("kernel driver"), std::string::npos);
}

// A failed initialisation keeps NVML's return code and the library's own words for it, as
// nvidia-smi prints them; through the backend they reach the CLI without an NVML type.
TEST_F(LibraryTest, AFailedInitCarriesTheReturnCodeAndTheLibrarysText) {
  setenv("TARMAC_SIM_SCENARIO", "no-driver-container", 1);
  auto lib = Library::open({kSimLib});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.error().code, Error::Code::External);
  EXPECT_NE(lib.error().message.find("failed: the NVIDIA kernel driver is not loaded"), std::string::npos)
      << lib.error().message;
  const Failure* failure = failure_of(lib.error());
  ASSERT_NE(failure, nullptr);
  EXPECT_EQ(failure->code, NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_EQ(failure->library_text, "Driver Not Loaded");

  auto backend = gpu::open_nvml_backend(kSimLib);
  ASSERT_FALSE(backend.ok());
  const auto driver = gpu::driver_failure(backend.error());
  ASSERT_TRUE(driver.has_value());
  EXPECT_EQ(driver->code, 9);
  EXPECT_EQ(driver->text, "Driver Not Loaded");
}

TEST_F(LibraryTest, ErrorsNotFromNvmlCarryNoDriverFailure) {
  auto lib = Library::open({"/nonexistent/libnvidia-ml.so.1"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(failure_of(lib.error()), nullptr);
  auto backend = gpu::open_nvml_backend("libm.so.6");
  ASSERT_FALSE(backend.ok());
  EXPECT_FALSE(gpu::driver_failure(backend.error()).has_value());
}

// The whole backend through both libraries: the old driver's fallbacks give the same values.
class BackendTest : public LibraryTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(BackendTest, ReadsTheScenarioThroughTheNewestEntryPointsPresent) {
  auto backend = gpu::open_nvml_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto snap = (*backend)->snapshot(gpu::SnapshotOptions{.processes = true, .slow = true, .topology = true});
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  ASSERT_EQ(snap->devices.size(), 4U);
  const unsigned used_mib[] = {38900, 38850, 39010, 38790};
  const unsigned util[] = {96, 94, 95, 93};
  const unsigned temp[] = {68, 67, 69, 66};
  const unsigned power_w[] = {250, 248, 251, 247};
  for (unsigned i = 0; i < 4; ++i) {
    const auto& d = snap->devices[i];
    SCOPED_TRACE(i);
    EXPECT_EQ(d.id.index, i);
    EXPECT_EQ(d.id.name, "NVIDIA A100-SXM4-40GB");
    EXPECT_EQ(d.id.mem_total_bytes, 40960ULL * 1024 * 1024);
    EXPECT_EQ(d.sample.mem_used_bytes, used_mib[i] * 1024ULL * 1024);
    EXPECT_EQ(d.sample.util_gpu_pct, util[i]);
    EXPECT_EQ(d.sample.temp_c, temp[i]);
    EXPECT_EQ(d.sample.power_mw, power_w[i] * 1000);
    EXPECT_TRUE(d.id.uuid && d.id.uuid->starts_with("GPU-"));
    EXPECT_FALSE(d.lost);
    EXPECT_TRUE(d.errors.empty()) << d.errors.front().what << ": " << d.errors.front().message;
  }
  ASSERT_TRUE(snap->topology);
  EXPECT_EQ(snap->topology->links.size(), 4U);
}

INSTANTIATE_TEST_SUITE_P(CurrentAndOldDriver, BackendTest, ::testing::Values(kSimLib, kOldSimLib));

// Per-process utilization through nvmlDeviceGetProcessesUtilizationInfo (current driver) and its
// fallback nvmlDeviceGetProcessUtilization (old driver), on processes of another PID namespace
// (listed without a launcher): the contract of gpu/model.hpp, end to end.
constexpr const char* kUtilizationScenario = R"toml(
name = "per-process-utilization"
[gpu_defaults]
name = "NVIDIA A100-SXM4-40GB"
architecture = "ampere"
memory_mib = 40960
mig_mode = false
[[gpu]]
pci_bus_id = "00000000:07:00.0"
uuid = "GPU-00000000-0000-4000-8000-000000000000"
[[gpu]]
pci_bus_id = "00000000:0F:00.0"
uuid = "GPU-00000000-0000-4000-8000-000000000001"
[[gpu]]
pci_bus_id = "00000000:47:00.0"
uuid = "GPU-00000000-0000-4000-8000-000000000002"
[[gpu]]
pci_bus_id = "00000000:4E:00.0"
uuid = "GPU-00000000-0000-4000-8000-000000000003"
mig_mode = true
[[timeline]]
util_gpu = 90
[[process]]
gpu = 0
name = "worker"
host_pid = 4200001
memory_mib = 30720
sm_util = 92
mem_util = 38
[[process]]
gpu = 0
name = "zombie"
host_pid = 4200002
memory_mib = 6144
sm_util = 0
mem_util = 0
[[process]]
gpu = 1
name = "garbled"
host_pid = 4200003
memory_mib = 1024
util_sample = "garbage"
[[process]]
gpu = 1
name = "idle"
host_pid = 4200004
memory_mib = 1024
sm_util = 0
mem_util = 0
[[process]]
gpu = 2
name = "unreadable"
host_pid = 4200005
memory_mib = 1024
util_sample = "unreadable"
[[process]]
gpu = 2
name = "beside"
host_pid = 4200006
memory_mib = 1024
sm_util = 0
[[process]]
gpu = 3
name = "mig"
host_pid = 4200007
memory_mib = 1024
sm_util = 50
)toml";

class ProcessUtilizationTest : public BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    char dir[] = "/tmp/tarmac-nvml-util-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    const std::string path = dir_ + "/per-process-utilization.toml";
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(kUtilizationScenario, f);
    std::fclose(f);
    setenv("TARMAC_SIM_SCENARIO", path.c_str(), 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

const gpu::GpuProcess* process(const gpu::Snapshot& snap, unsigned gpu, unsigned pid) {
  for (const auto& p : snap.devices.at(gpu).processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

TEST_P(ProcessUtilizationTest, IdleIsZeroAndWhatCannotBeReadIsUnknown) {
  auto backend = gpu::open_nvml_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto snap = (*backend)->snapshot(gpu::SnapshotOptions{.processes = true});
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  ASSERT_EQ(snap->devices.size(), 4U);
  struct Want {
    unsigned gpu, pid;
    std::optional<unsigned> sm, mem;
  };
  const Want wants[] = {
      {0, 4200001, 92, 38},                    // works
      {0, 4200002, 0, 0},                      // listed, no sample: known idle (was unknown before issue 15)
      {1, 4200003, std::nullopt, std::nullopt},  // a garbage sample: unknown
      {1, 4200004, 0, 0},                      // idle beside it
      {2, 4200005, std::nullopt, std::nullopt},  // the GPU's samples cannot be read: unknown, never idle
      {2, 4200006, std::nullopt, std::nullopt},
      {3, 4200007, std::nullopt, std::nullopt},  // MIG: no per-process rates
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.pid);
    const gpu::GpuProcess* p = process(*snap, w.gpu, w.pid);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->sm_util_pct, w.sm);
    EXPECT_EQ(p->mem_util_pct, w.mem);
  }
  // The failed read is reported next to the values that did read; MIG is not an error.
  EXPECT_FALSE(snap->devices[2].errors.empty());
  EXPECT_TRUE(snap->devices[3].errors.empty()) << snap->devices[3].errors.front().message;
}

// N2 of reap's second review: two snapshots closer together than the driver's sample period
// (1/6 s in the simulator, which answers NVML_ERROR_NOT_FOUND for "nothing newer than the cursor"):
// the second must still read the busy process as busy, never as a known-idle 0.
TEST_P(ProcessUtilizationTest, ASnapshotRightAfterAnotherStillSeesTheBusyProcess) {
  auto backend = gpu::open_nvml_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    auto snap = (*backend)->snapshot(gpu::SnapshotOptions{.processes = true});
    ASSERT_TRUE(snap.ok()) << snap.error().message;
    const gpu::GpuProcess* worker = process(*snap, 0, 4200001);
    ASSERT_NE(worker, nullptr);
    EXPECT_EQ(worker->sm_util_pct, 92U);
  }
}

INSTANTIATE_TEST_SUITE_P(CurrentAndOldDriver, ProcessUtilizationTest, ::testing::Values(kSimLib, kOldSimLib));

}  // namespace
}  // namespace tarmac::nvml
