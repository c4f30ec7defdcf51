// The field tables' value groups against the real NVML backend and the simulator: for every field,
// a snapshot that reads only that field's groups gives the value a full snapshot gives. A field
// added without its group (or with the wrong one) reads as missing here and fails.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "clock.hpp"
#include "registry.hpp"
#include "state_dir.hpp"

#include "tarmac/fields/apps.hpp"
#include "tarmac/fields/select.hpp"
#include "tarmac/fields/table.hpp"
#include "tarmac/gpu/backend.hpp"

namespace tarmac::fields {
namespace {

const std::string kSimLib = TARMAC_SIM_LIB;
// Between them, these scenarios support every --query-gpu field but the Windows-only ones.
const std::vector<std::string> kScenarios = {"a100x4-balanced", "h100x2-log", TARMAC_MIXED_MODELS_SCENARIO,
                                             "h200x1-captured"};  // driver 580: display_attached

// One snapshot from a freshly opened backend (identity is kept per backend, so
// every snapshot that must read by itself opens its own).
// `where` is a scenario (a bundled name or a file), or the state directory of a running simulation.
gpu::Snapshot snapshot_of(const std::string& where, const gpu::SnapshotOptions& options) {
  const bool state = std::filesystem::is_directory(where);
  ::setenv(state ? "TARMAC_SIM_STATE" : "TARMAC_SIM_SCENARIO", where.c_str(), 1);
  ::unsetenv(state ? "TARMAC_SIM_SCENARIO" : "TARMAC_SIM_STATE");
  auto backend = gpu::open_nvml_backend(kSimLib);
  EXPECT_TRUE(backend.ok()) << (backend.ok() ? "" : backend.error().message);
  if (!backend.ok()) return {};
  auto snap = (*backend)->snapshot(options);
  EXPECT_TRUE(snap.ok()) << (snap.ok() ? "" : snap.error().message);
  return snap.ok() ? std::move(*snap) : gpu::Snapshot{};
}

// The field's CSV text on every device.
std::vector<std::string> texts(const FieldSpec& field, const gpu::Snapshot& snap) {
  std::vector<std::string> out;
  for (const auto& d : snap.devices) out.push_back(read_field(field, {snap, d, snap.devices.size()}).to_csv(field.unit));
  return out;
}

// A --query-compute-apps field's CSV text for every process.
std::vector<std::string> app_texts(const FieldSpec& field, const gpu::Snapshot& snap) {
  std::vector<std::string> out;
  for (const auto& d : snap.devices) {
    for (const auto& p : d.processes) out.push_back(read_field(field, {snap, d, snap.devices.size(), &p}).to_csv(field.unit));
  }
  return out;
}

bool is_marker(const std::string& text) { return !text.empty() && text.front() == '['; }

TEST(FieldGroups, EveryDeviceFieldNamesItsGroups) {
  for (const auto table : {all_fields(), all_app_fields()}) {
    for (const auto& f : table) {
      if (f.scope == Scope::Device) EXPECT_FALSE(f.groups.empty()) << f.name;
    }
  }
  for (const auto& f : all_fields()) {
    if (f.scope == Scope::System) EXPECT_TRUE(f.groups.empty()) << f.name;
  }
}

TEST(FieldGroups, EachGpuFieldReadsAloneWhatAFullSnapshotReads) {
  const gpu::SnapshotOptions full{.processes = false};
  for (const auto& scenario : kScenarios) {
    const gpu::Snapshot all = snapshot_of(scenario, full);
    ASSERT_FALSE(all.devices.empty()) << scenario;
    for (const auto& f : all_fields()) {
      if (f.read == nullptr || f.name == "timestamp") continue;
      const FieldSpec* one[] = {&f};
      gpu::SnapshotOptions only{.processes = false};
      only.values = value_groups(one);
      EXPECT_EQ(texts(f, snapshot_of(scenario, only)), texts(f, all)) << scenario << ": " << f.name;
    }
  }
}

TEST(FieldGroups, TheScenariosGiveEveryDeviceFieldAValueSomewhere) {
  // Otherwise the test above would compare two markers and could not see a missing group.
  std::vector<gpu::Snapshot> full;
  for (const auto& scenario : kScenarios) full.push_back(snapshot_of(scenario, {.processes = false}));
  for (const auto& f : all_fields()) {
    if (f.scope != Scope::Device) continue;
    bool seen = false;
    for (const auto& snap : full) {
      for (const auto& text : texts(f, snap)) seen = seen || !is_marker(text);
    }
    EXPECT_TRUE(seen) << f.name << " has no value in any test scenario";
  }
}

// A simulation in a state directory, as under the launcher, in which this test process is
// registered as a GPU process on GPU 1: listed by NVML, visible in /proc, with a command line.
class LiveSimulation {
 public:
  LiveSimulation() {
    char tmpl[] = "/tmp/tarmac-groups-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    const sim::StateDir state(dir_);
    EXPECT_TRUE(state.create().ok());
    std::filesystem::copy_file(std::filesystem::path(TARMAC_SIM_SCENARIO_DIR) / "a100x4-balanced.toml", state.scenario());
    const long long now = sim::realtime_ns();
    EXPECT_TRUE(sim::write_clock_file(state.clock(), sim::ClockSpec{now, 1.0, now}).ok());
    sim::LiveProcess self;
    self.pid = ::getpid();
    self.gpus = {1};
    self.memory_mib = 1000;
    self.sm_util = 20;
    EXPECT_TRUE(sim::register_process(state.procs(), self).ok());
  }
  ~LiveSimulation() { std::filesystem::remove_all(dir_); }
  LiveSimulation(const LiveSimulation&) = delete;
  LiveSimulation& operator=(const LiveSimulation&) = delete;
  [[nodiscard]] std::string state() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

TEST(FieldGroups, EachAppFieldReadsAloneWhatAFullSnapshotReads) {
  const LiveSimulation live;
  const gpu::Snapshot all = snapshot_of(live.state(), {.processes = true});
  ASSERT_EQ(all.devices.size(), 4U);
  ASSERT_EQ(all.devices[1].processes.size(), 1U) << "this test process should be listed on GPU 1";
  for (const auto& f : all_app_fields()) {
    if (f.name == "timestamp") continue;
    const FieldSpec* one[] = {&f};
    gpu::SnapshotOptions only{.processes = true};
    only.values = value_groups(one);
    EXPECT_EQ(app_texts(f, snapshot_of(live.state(), only)), app_texts(f, all)) << f.name;
  }
  // What a field without its group would show instead: the test above could tell them apart.
  const auto& self = all.devices[1].processes[0];
  EXPECT_EQ(self.host.visibility, host::PidVisibility::Visible);
  EXPECT_EQ(self.sm_util_pct, 20U);
}

TEST(FieldGroups, SelectionReadsWhatDevicesAreNamedBy) {
  gpu::SnapshotOptions only{.processes = false};
  only.values = kSelectionGroups;
  const gpu::Snapshot snap = snapshot_of("a100x4-balanced", only);
  for (const std::string id : {"GPU-1d9f9188-f314-4605-875d-0732a08a31f7", "00000000:47:00.0", "1564720005092"}) {
    auto chosen = select_devices(id, snap.devices);
    ASSERT_TRUE(chosen.ok()) << id;
    EXPECT_EQ(*chosen, std::vector<std::size_t>{2}) << id;
  }
}

TEST(FieldGroups, ValuesOfOtherGroupsAreNotRead) {
  gpu::SnapshotOptions only{.processes = false};
  only.values = {gpu::ValueGroup::Temperature};
  const gpu::Snapshot snap = snapshot_of("a100x4-balanced", only);
  ASSERT_EQ(snap.devices.size(), 4U);
  const auto& d = snap.devices[0];
  EXPECT_EQ(d.sample.temp_c, 68U);
  EXPECT_FALSE(d.id.name || d.id.uuid || d.id.pci_bus_id || d.id.mem_total_bytes);
  EXPECT_FALSE(d.sample.power_mw || d.sample.util_gpu_pct || d.sample.clock_sm_mhz || d.sample.mem_used_bytes);
  EXPECT_FALSE(d.modes.persistence_mode || d.modes.power_limit_mw);
  EXPECT_TRUE(d.errors.empty());
}

// status's table asks for the narrow groups: one value each, what the broad group reads of it.
TEST(FieldGroups, NarrowGroupsReadTheirValueAndNoMore) {
  gpu::SnapshotOptions narrow{.processes = false};
  narrow.values = {gpu::ValueGroup::TemperatureSlowdown, gpu::ValueGroup::EnforcedPowerLimit,
                   gpu::ValueGroup::EccUncorrectedVolatile};
  gpu::SnapshotOptions broad{.processes = false};
  broad.values = {gpu::ValueGroup::TemperatureThresholds, gpu::ValueGroup::PowerLimits, gpu::ValueGroup::EccErrors};
  const gpu::Snapshot some = snapshot_of("a100x4-balanced", narrow);
  const gpu::Snapshot all = snapshot_of("a100x4-balanced", broad);
  ASSERT_EQ(some.devices.size(), all.devices.size());
  for (std::size_t i = 0; i < some.devices.size(); ++i) {
    const auto& d = some.devices[i];
    const auto& b = all.devices[i];
    EXPECT_TRUE(d.id.temp_slowdown_c.has_value());
    EXPECT_EQ(d.id.temp_slowdown_c, b.id.temp_slowdown_c);
    EXPECT_TRUE(d.modes.enforced_power_limit_mw.has_value());
    EXPECT_EQ(d.modes.enforced_power_limit_mw, b.modes.enforced_power_limit_mw);
    EXPECT_TRUE(d.sample.ecc_uncorrected_volatile.has_value());
    EXPECT_EQ(d.sample.ecc_uncorrected_volatile, b.sample.ecc_uncorrected_volatile);
    EXPECT_FALSE(d.id.temp_shutdown_c || d.id.temp_gpu_max_c || d.id.power_default_limit_mw);
    EXPECT_FALSE(d.modes.power_limit_mw || d.sample.ecc_corrected_volatile || d.sample.ecc_uncorrected_aggregate);
  }
}

}  // namespace
}  // namespace tarmac::fields
