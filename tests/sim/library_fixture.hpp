// A simulation of tests/sim/data/mixed-models.toml with the built library dlopen'ed and
// initialised against it (through TARMAC_SIM_STATE, as under the launcher).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>

#include "clock.hpp"
#include "faults.hpp"
#include "registry.hpp"
#include "test_support.hpp"

namespace tarmac::sim::test {

using namespace tarmac::nvml;

class LibraryTest : public ::testing::Test {
 protected:
  // Override before SetUp runs (in the test's constructor) to change the simulation.
  double speed_ = 1.0;
  std::vector<std::string> faults_;
  fs::path scenario_ = test_data("mixed-models.toml");

  void SetUp() override {
    make_state_dir(dir_.path(), scenario_, speed_, faults_);
    ::setenv("TARMAC_SIM_STATE", dir_.path().c_str(), 1);
    lib_ = std::make_unique<NvmlLibrary>();
    ASSERT_EQ(NVML(*lib_, nvmlInit_v2)(), NVML_SUCCESS);
  }
  void TearDown() override {
    if (lib_) NVML(*lib_, nvmlShutdown)();
    ::unsetenv("TARMAC_SIM_STATE");
  }

  nvmlDevice_t device(unsigned index) {
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(NVML(*lib_, nvmlDeviceGetHandleByIndex_v2)(index, &d), NVML_SUCCESS);
    return d;
  }
  // Adds a runtime fault, as `tarmac-sim fault` does.
  void inject(const std::string& spec, double now = 0) {
    auto rule = parse_fault_spec(spec, 3, now);
    ASSERT_TRUE(rule.ok()) << rule.error().message;
    ASSERT_TRUE(append_runtime_fault(StateDir(dir_.path()), *rule).ok());
  }
  // Registers a child process as a load on `gpu` (what tarmac-sim-load does).
  void register_load(const Sleeper& child, unsigned gpu, unsigned long long mib, unsigned sm_util) {
    LiveProcess p;
    p.pid = child.pid();
    p.gpus = {gpu};
    p.memory_mib = mib;
    p.sm_util = sm_util;
    p.mem_util = sm_util / 2;
    ASSERT_TRUE(register_process(StateDir(dir_.path()).procs(), p).ok());
  }

  TempDir dir_;
  std::unique_ptr<NvmlLibrary> lib_;
};

}  // namespace tarmac::sim::test
