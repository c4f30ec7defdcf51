// Fault rules and the fault book: parsing specs, matching a function and GPU, the next N calls
// (shared by every process of a simulation), time windows, lost GPUs and injected events.
#include <gtest/gtest.h>

#include "faults.hpp"
#include "scenario_parser.hpp"
#include "tarmac/nvml/nvml_types.hpp"
#include "test_support.hpp"

namespace tarmac::sim::test {
namespace {

namespace nv = tarmac::nvml;

TEST(FaultSpec, ParsesEveryKey) {
  auto r = parse_fault_spec("fn=nvmlDeviceGetPowerUsage, gpu=1, rc=NOT_SUPPORTED, calls=3, from=1m, until=1h", 4, 0);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->function, "nvmlDeviceGetPowerUsage");
  EXPECT_EQ(r->gpu, 1U);
  EXPECT_EQ(r->rc, nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(r->calls, 3U);
  EXPECT_EQ(r->from, 60.0);
  EXPECT_EQ(r->until, 3600.0);
  auto lost = parse_fault_spec("gpu=2,lost", 4, 125.0);
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(lost->lost_at, 125.0);  // "lost" means now
  auto xid = parse_fault_spec("gpu=0,xid=48", 4, 7.0);
  ASSERT_TRUE(xid.ok());
  ASSERT_TRUE(xid->event.has_value());
  EXPECT_EQ(xid->event->type, nv::nvmlEventTypeXidCriticalError);
  EXPECT_EQ(xid->event->data, 48U);
  EXPECT_EQ(xid->event->at, 7.0);
  EXPECT_EQ(return_code_by_name("NVML_ERROR_GPU_IS_LOST"), 15);
  EXPECT_EQ(return_code_by_name("timeout"), 10);
  EXPECT_EQ(return_code_by_name("999"), 999);
}

TEST(FaultSpec, RejectsWhatCannotWork) {
  EXPECT_FALSE(parse_fault_spec("fn=nvmlDeviceGetPowerUsage", 4, 0).ok());  // does nothing
  EXPECT_FALSE(parse_fault_spec("fn=nvmlNoSuchThing,rc=UNKNOWN", 4, 0).ok());
  EXPECT_FALSE(parse_fault_spec("gpu=4,rc=UNKNOWN", 4, 0).ok());
  EXPECT_FALSE(parse_fault_spec("rc=UNKNOWN,colour=red", 4, 0).ok());
  EXPECT_FALSE(parse_fault_spec("rc=UNKNOWN,from=2h,until=1h", 4, 0).ok());
  EXPECT_FALSE(parse_fault_spec("lost", 4, 0).ok());  // which GPU?
  auto r = parse_fault_spec("rc=EXPLODED", 4, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("EXPLODED"), std::string::npos);
}

TEST(FaultSpec, FormatsToASpecThatParsesBack) {
  auto r = parse_fault_spec("function=nvmlDeviceGetUUID,gpu=3,return=TIMEOUT,delay_ms=20,calls=2,from=30", 4, 0);
  ASSERT_TRUE(r.ok());
  auto again = parse_fault_spec(format_fault_rule(*r), 4, 0);
  ASSERT_TRUE(again.ok()) << format_fault_rule(*r);
  EXPECT_EQ(format_fault_rule(*again), format_fault_rule(*r));
}

class FaultBookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = load_scenario_file(test_data("mixed-models.toml").string());
    ASSERT_TRUE(s.ok());
    scenario_ = std::move(*s);
    make_state_dir(dir_.path(), test_data("mixed-models.toml"));
  }
  void add(const std::string& spec, double now = 0) {
    auto rule = parse_fault_spec(spec, scenario_.gpus.size(), now);
    ASSERT_TRUE(rule.ok()) << rule.error().message;
    ASSERT_TRUE(append_runtime_fault(StateDir(dir_.path()), *rule).ok());
  }
  TempDir dir_;
  Scenario scenario_;
};

TEST_F(FaultBookTest, ReturnCodeForOneFunctionOnOneGpu) {
  add("fn=nvmlDeviceGetPowerUsage,gpu=1,rc=NOT_SUPPORTED");
  FaultBook book(scenario_, StateDir(dir_.path()));
  EXPECT_EQ(book.on_call("nvmlDeviceGetPowerUsage", 1U, 0).rc, nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_FALSE(book.on_call("nvmlDeviceGetPowerUsage", 0U, 0).rc.has_value());
  EXPECT_FALSE(book.on_call("nvmlDeviceGetTemperature", 1U, 0).rc.has_value());
  EXPECT_FALSE(book.on_call("nvmlDeviceGetPowerUsage", std::nullopt, 0).rc.has_value());
}

TEST_F(FaultBookTest, WithoutAGpuEveryGpuAndEveryCallMatch) {
  add("fn=*,rc=UNKNOWN,delay_ms=5");
  FaultBook book(scenario_, StateDir(dir_.path()));
  EXPECT_EQ(book.on_call("nvmlDeviceGetCount_v2", std::nullopt, 0).rc, nv::NVML_ERROR_UNKNOWN);
  const FaultDecision d = book.on_call("nvmlDeviceGetName", 2U, 0);
  EXPECT_EQ(d.rc, nv::NVML_ERROR_UNKNOWN);
  EXPECT_EQ(d.delay_ms, 5U);
}

TEST_F(FaultBookTest, NextNCallsAreSharedByEveryProcess) {
  add("fn=nvmlDeviceGetUUID,rc=TIMEOUT,calls=3");
  FaultBook first(scenario_, StateDir(dir_.path()));
  FaultBook second(scenario_, StateDir(dir_.path()));  // another process of the simulation
  EXPECT_TRUE(first.on_call("nvmlDeviceGetUUID", 0U, 0).rc.has_value());
  EXPECT_TRUE(second.on_call("nvmlDeviceGetUUID", 1U, 0).rc.has_value());
  EXPECT_TRUE(first.on_call("nvmlDeviceGetUUID", 2U, 0).rc.has_value());
  EXPECT_FALSE(second.on_call("nvmlDeviceGetUUID", 0U, 0).rc.has_value());
  EXPECT_FALSE(first.on_call("nvmlDeviceGetUUID", 0U, 0).rc.has_value());
}

TEST_F(FaultBookTest, TimeWindows) {
  add("fn=nvmlDeviceGetTemperature,rc=UNKNOWN,from=1m,until=2m");
  FaultBook book(scenario_, StateDir(dir_.path()));
  EXPECT_FALSE(book.on_call("nvmlDeviceGetTemperature", 0U, 59).rc.has_value());
  EXPECT_TRUE(book.on_call("nvmlDeviceGetTemperature", 0U, 60).rc.has_value());
  EXPECT_FALSE(book.on_call("nvmlDeviceGetTemperature", 0U, 120).rc.has_value());
}

TEST_F(FaultBookTest, RuntimeFileIsReReadWhenItChanges) {
  FaultBook book(scenario_, StateDir(dir_.path()));
  EXPECT_FALSE(book.on_call("nvmlDeviceGetName", 0U, 0).rc.has_value());
  add("fn=nvmlDeviceGetName,gpu=0,rc=GPU_IS_LOST");
  book.refresh();
  EXPECT_EQ(book.on_call("nvmlDeviceGetName", 0U, 0).rc, nv::NVML_ERROR_GPU_IS_LOST);
  ASSERT_TRUE(clear_runtime_faults(StateDir(dir_.path())).ok());
  book.refresh();
  EXPECT_FALSE(book.on_call("nvmlDeviceGetName", 0U, 0).rc.has_value());
}

TEST_F(FaultBookTest, LostGpuRaisesXid79AndEventsCountAsEcc) {
  add("gpu=2,lost_at=10m");
  add("gpu=1,ecc=single_bit", 30);
  add("gpu=1,ecc=single_bit", 40);
  FaultBook book(scenario_, StateDir(dir_.path()));
  EXPECT_EQ(book.lost_at(2), 600.0);
  EXPECT_FALSE(book.lost_at(1).has_value());
  bool xid79 = false;
  for (const EventSpec& e : book.events()) {
    xid79 |= e.gpu == 2 && e.type == nv::nvmlEventTypeXidCriticalError && e.data == 79 && e.at == 600.0;
  }
  EXPECT_TRUE(xid79);
  EXPECT_EQ(book.ecc_events(1, nv::nvmlEventTypeSingleBitEccError, 35), 1U);
  EXPECT_EQ(book.ecc_events(1, nv::nvmlEventTypeSingleBitEccError, 45), 2U);
  EXPECT_EQ(book.ecc_events(1, nv::nvmlEventTypeDoubleBitEccError, 45), 0U);
}

TEST(FaultBookScenario, ScenarioFaultsApplyWithoutAStateDirectory) {
  auto s = parse_scenario(std::string(R"([[gpu]]
name = "x"
architecture = "ampere"
uuid = "GPU-16aaab6a-6e43-4884-a60d-b64116853b1d"
pci_bus_id = "07:00.0"
memory_mib = 1000
[[fault]]
function = "nvmlDeviceGetSerial"
return = "CORRUPTED_INFOROM"
calls = 1
)"),
                          "f.toml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  FaultBook book(*s, std::nullopt);
  EXPECT_EQ(book.on_call("nvmlDeviceGetSerial", 0U, 0).rc, nv::NVML_ERROR_CORRUPTED_INFOROM);
  EXPECT_FALSE(book.on_call("nvmlDeviceGetSerial", 0U, 0).rc.has_value());
}

}  // namespace
}  // namespace tarmac::sim::test
