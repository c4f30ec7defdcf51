// Faults as a client of the library sees them: a return code for one function on one GPU, the
// next N calls only, a GPU falling off the bus, slow calls, a failing init, faults added while
// the client runs.
#include <chrono>

#include "library_fixture.hpp"

namespace tarmac::sim::test {
namespace {

class PowerFault : public LibraryTest {
 public:
  PowerFault() { faults_ = {"function=nvmlDeviceGetPowerUsage,gpu=1,return=NOT_SUPPORTED"}; }
};

TEST_F(PowerFault, ReturnCodeForOneFunctionOnOneGpu) {
  unsigned mw = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetPowerUsage)(device(1), &mw), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetPowerUsage)(device(0), &mw), NVML_SUCCESS);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetEnforcedPowerLimit)(device(1), &mw), NVML_SUCCESS);
}

class CountedFault : public LibraryTest {
 public:
  CountedFault() { faults_ = {"function=nvmlDeviceGetTemperature,return=UNKNOWN,calls=2"}; }
};

TEST_F(CountedFault, OnlyTheNextNCallsFail) {
  unsigned temp = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetTemperature)(device(0), NVML_TEMPERATURE_GPU, &temp), NVML_ERROR_UNKNOWN);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetTemperature)(device(2), NVML_TEMPERATURE_GPU, &temp), NVML_ERROR_UNKNOWN);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetTemperature)(device(0), NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
  EXPECT_EQ(temp, 50U);
}

class LostGpu : public LibraryTest {
 public:
  LostGpu() {
    speed_ = 20;  // lost at 10 simulated seconds: half a real second
    faults_ = {"gpu=2,lost_at=10s"};
  }
};

TEST_F(LostGpu, EveryCallOnALostGpuAnswersGpuIsLostAndItStaysCounted) {
  const nvmlDevice_t gpu2 = device(2);
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(NVML(*lib_, nvmlEventSetCreate)(&set), NVML_SUCCESS);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceRegisterEvents)(gpu2, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  nvmlEventData_t data{};
  ASSERT_EQ(NVML(*lib_, nvmlEventSetWait_v2)(set, &data, 5000), NVML_SUCCESS);  // XID 79 at the loss
  EXPECT_EQ(data.eventData, 79U);
  EXPECT_EQ(data.device, gpu2);

  char name[96];
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetName)(gpu2, name, sizeof name), NVML_ERROR_GPU_IS_LOST);
  unsigned mw = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetPowerUsage)(gpu2, &mw), NVML_ERROR_GPU_IS_LOST);
  nvmlDevice_t again = nullptr;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetHandleByIndex_v2)(2, &again), NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetHandleByUUID)("GPU-bbbb2222-2222-3333-4444-555555555555", &again),
            NVML_ERROR_GPU_IS_LOST);
  unsigned count = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetCount_v2)(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 3U);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetPowerUsage)(device(1), &mw), NVML_SUCCESS);  // the rest works
  nvmlGpuTopologyLevel_t level = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetTopologyCommonAncestor)(device(1), gpu2, &level), NVML_ERROR_GPU_IS_LOST);
  NVML(*lib_, nvmlEventSetFree)(set);
}

class SlowCall : public LibraryTest {
 public:
  SlowCall() { faults_ = {"function=nvmlDeviceGetName,gpu=0,delay_ms=200"}; }
};

TEST_F(SlowCall, TheCallTakesAtLeastItsDelay) {
  char name[96];
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetName)(device(0), name, sizeof name), NVML_SUCCESS);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  EXPECT_STREQ(name, "NVIDIA RTX A6000");
}

class InitFault : public LibraryTest {
 public:
  InitFault() { faults_ = {"function=nvmlInitWithFlags,return=DRIVER_NOT_LOADED"}; }
};

TEST_F(InitFault, AnInitFunctionCanFail) {
  EXPECT_EQ(NVML(*lib_, nvmlInitWithFlags)(0), NVML_ERROR_DRIVER_NOT_LOADED);
  unsigned count = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetCount_v2)(&count), NVML_SUCCESS);  // nvmlInit_v2 of SetUp still holds
}

TEST_F(LibraryTest, FaultsAddedWhileTheClientRuns) {
  char uuid[96];
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetUUID)(device(1), uuid, sizeof uuid), NVML_SUCCESS);
  inject("function=nvmlDeviceGetUUID,gpu=1,return=TIMEOUT");
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetUUID)(device(1), uuid, sizeof uuid), NVML_ERROR_TIMEOUT);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetUUID)(device(0), uuid, sizeof uuid), NVML_SUCCESS);
  ASSERT_TRUE(clear_runtime_faults(StateDir(dir_.path())).ok());
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetUUID)(device(1), uuid, sizeof uuid), NVML_SUCCESS);
}

}  // namespace
}  // namespace tarmac::sim::test
