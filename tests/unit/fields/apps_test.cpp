#include "tarmac/fields/apps.hpp"

#include <gtest/gtest.h>

#include "tarmac/fields/format.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::fields {
namespace {

using util::kMiB;

gpu::Snapshot two_gpus_three_processes() {
  gpu::Snapshot s;
  s.timestamp_unix_ms = 1'700'000'000'123;
  for (unsigned i = 0; i < 2; ++i) {
    gpu::Device d;
    d.id.index = i;
    d.id.name = "NVIDIA A100-SXM4-40GB";
    d.id.uuid = i == 0 ? "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd" : "GPU-11111111-aaaa-bbbb-cccc-dddddddddddd";
    d.id.pci_bus_id = i == 0 ? "00000000:07:00.0" : "00000000:0F:00.0";
    d.id.serial = i == 0 ? "1320221000001" : "1320221000002";
    s.devices.push_back(d);
  }
  gpu::GpuProcess a;
  a.pid = 4242;
  a.used_mem_bytes = 38500 * kMiB + 4096;
  a.sm_util_pct = 93;
  a.host.pid = 4242;
  a.host.visibility = host::PidVisibility::Visible;
  a.host.user = "alice";
  a.host.name = "python";
  a.host.command_line = "/usr/bin/python3 train.py --local-rank 0";
  a.host.start_time_unix = 1'700'000'000;
  a.host.slurm_job_id = "81234";
  a.host.container = host::ContainerRef{"docker", std::string(64, 'a'), std::nullopt};
  gpu::GpuProcess hidden;
  hidden.pid = 999'999;
  hidden.used_mem_bytes = 1024 * kMiB;
  hidden.host.pid = 999'999;  // visibility stays NotInNamespace
  gpu::GpuProcess graphics;
  graphics.pid = 77;
  graphics.type = gpu::ProcessType::Graphics;
  s.devices[0].processes = {graphics, a};
  s.devices[1].processes = {hidden};
  return s;
}

std::string cell(std::string_view field, const gpu::Snapshot& s, std::size_t device, std::size_t process,
                 bool units = true) {
  const FieldSpec* f = find_app_field(field);
  EXPECT_NE(f, nullptr) << field;
  if (f == nullptr) return {};
  const ReadContext ctx{s, s.devices.at(device), s.devices.size(), &s.devices.at(device).processes.at(process)};
  return read_field(*f, ctx).to_csv(units ? f->unit : "");
}

TEST(AppFields, NvidiaSmiNamesAndAliasesInItsOrder) {
  const std::vector<std::string_view> nvidia = {"timestamp", "gpu_name", "gpu_bus_id", "gpu_serial",
                                                "gpu_uuid",  "pid",      "process_name", "used_gpu_memory"};
  ASSERT_GE(all_app_fields().size(), nvidia.size());
  for (std::size_t i = 0; i < nvidia.size(); ++i) EXPECT_EQ(all_app_fields()[i].name, nvidia[i]);
  EXPECT_EQ(find_app_field("name"), find_app_field("process_name"));
  EXPECT_EQ(find_app_field("used_memory"), find_app_field("used_gpu_memory"));
  for (const auto* own : {"user", "container", "job", "command", "sm_util", "start_time"}) {
    EXPECT_NE(find_app_field(own), nullptr) << own;
  }
  // --query-gpu's names are not compute-apps fields, and the reverse.
  EXPECT_EQ(find_app_field("memory.used"), nullptr);
  EXPECT_EQ(find_app_field("uuid"), nullptr);
  EXPECT_EQ(find_field("used_gpu_memory"), nullptr);
  for (const auto& f : all_app_fields()) {
    EXPECT_FALSE(f.description.empty()) << f.name;
    EXPECT_NE(f.read, nullptr) << f.name;
  }
}

TEST(AppFields, ParseListSkipsEmptyNamesAndReportsTheFirstUnknownAsTyped) {
  auto ok = parse_app_field_list("pid,,name,used_memory");
  ASSERT_TRUE(ok.ok());
  ASSERT_EQ(ok->size(), 3U);
  EXPECT_EQ((*ok)[1]->name, "process_name");
  EXPECT_EQ(csv_header(*ok), "pid, process_name, used_gpu_memory [MiB]");
  auto bad = parse_app_field_list("pid,Memory,foo");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "Memory");
}

TEST(AppFields, ComputeAppsInGpuOrderWithoutGraphicsProcesses) {
  const auto s = two_gpus_three_processes();
  const std::vector<std::size_t> all = {0, 1};
  const auto apps = compute_apps(s, all);
  ASSERT_EQ(apps.size(), 2U);
  EXPECT_EQ(apps[0].device, 0U);
  EXPECT_EQ(apps[0].process, 1U);
  EXPECT_EQ(apps[1].device, 1U);
  const std::vector<std::size_t> second = {1};
  ASSERT_EQ(compute_apps(s, second).size(), 1U);
  EXPECT_EQ(s.devices[compute_apps(s, second)[0].device].processes[0].pid, 999'999U);
}

TEST(AppFields, VisibleProcessValuesAsNvidiaSmiWritesThem) {
  const auto s = two_gpus_three_processes();
  EXPECT_EQ(cell("pid", s, 0, 1), "4242");
  EXPECT_EQ(cell("process_name", s, 0, 1), "/usr/bin/python3");
  EXPECT_EQ(cell("used_gpu_memory", s, 0, 1), "38500 MiB");
  EXPECT_EQ(cell("used_memory", s, 0, 1, false), "38500");
  EXPECT_EQ(cell("gpu_bus_id", s, 0, 1), "00000000:07:00.0");
  EXPECT_EQ(cell("gpu_uuid", s, 0, 1), "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd");
  EXPECT_EQ(cell("gpu_serial", s, 0, 1), "1320221000001");
  EXPECT_EQ(cell("user", s, 0, 1), "alice");
  EXPECT_EQ(cell("job", s, 0, 1), "81234");
  EXPECT_EQ(cell("command", s, 0, 1), "/usr/bin/python3 train.py --local-rank 0");
  EXPECT_EQ(cell("container", s, 0, 1), "docker:" + std::string(64, 'a'));
  EXPECT_EQ(cell("sm_util", s, 0, 1), "93 %");
  EXPECT_EQ(cell("start_time", s, 0, 1).size(), 19U);  // "YYYY/MM/DD HH:MM:SS", local time
}

TEST(AppFields, HiddenPidShowsNotFoundForHostFieldsOnly) {
  const auto s = two_gpus_three_processes();
  EXPECT_EQ(cell("pid", s, 1, 0), "999999");
  EXPECT_EQ(cell("used_gpu_memory", s, 1, 0), "1024 MiB");
  EXPECT_EQ(cell("gpu_bus_id", s, 1, 0), "00000000:0F:00.0");
  for (const auto* f : {"process_name", "user", "container", "job", "command", "start_time"}) {
    EXPECT_EQ(cell(f, s, 1, 0), "[Not Found]") << f;
  }
  EXPECT_EQ(cell("sm_util", s, 1, 0), "[N/A]");
}

TEST(AppFields, MissingHostFactsAreNotAvailable) {
  auto s = two_gpus_three_processes();
  auto& p = s.devices[0].processes[1];
  p.host.container.reset();
  p.host.slurm_job_id.reset();
  p.host.command_line = "";
  p.used_mem_bytes.reset();
  EXPECT_EQ(cell("container", s, 0, 1), "[N/A]");
  EXPECT_EQ(cell("job", s, 0, 1), "[N/A]");
  EXPECT_EQ(cell("process_name", s, 0, 1), "python");  // comm when argv is empty
  EXPECT_EQ(cell("used_gpu_memory", s, 0, 1), "[N/A]");
  p.host.container = host::ContainerRef{"kubernetes", "", std::string("1f2e3d4c")};
  EXPECT_EQ(cell("container", s, 0, 1), "pod:1f2e3d4c");
}

TEST(AppFields, LostGpuMarksGpuFieldsButKeepsProcessFields) {
  auto s = two_gpus_three_processes();
  s.devices[0].lost = "fallen off the bus";
  EXPECT_EQ(cell("gpu_name", s, 0, 1), "[GPU is lost]");
  EXPECT_EQ(cell("pid", s, 0, 1), "4242");
}

TEST(AppFields, JsonIsTyped) {
  const auto s = two_gpus_three_processes();
  auto wanted = parse_app_field_list("pid,process_name,used_gpu_memory,job,sm_util");
  ASSERT_TRUE(wanted.ok());
  std::vector<Value> values;
  const ReadContext ctx{s, s.devices[1], s.devices.size(), &s.devices[1].processes[0]};
  for (const auto* f : *wanted) values.push_back(read_field(*f, ctx));
  const auto j = json_object(values, *wanted);
  EXPECT_EQ(j["pid"], 999999);
  EXPECT_TRUE(j["process_name"].is_null());
  EXPECT_EQ(j["used_gpu_memory"], 1024);
  EXPECT_TRUE(j["job"].is_null());
  EXPECT_TRUE(j["sm_util"].is_null());
}

}  // namespace
}  // namespace tarmac::fields
