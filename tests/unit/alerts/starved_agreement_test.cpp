// One definition of starved (issue 14 §1): the GPU's class (status, the dashboard, the store), the
// starvation alert and doctor's "starved" finding agree on every GPU, with the thresholds
// configured once in [activity]. Before, the alert had thresholds of its own and measured the
// processes' memory, doctor its own way: each case below is one where two of them disagreed.
#include <gtest/gtest.h>

#include <algorithm>

#include "tarmac/alerts/rules.hpp"
#include "tarmac/diagnose/doctor.hpp"
#include "tarmac/gpu/activity.hpp"
#include "test_support.hpp"

namespace tarmac::alerts {
namespace {

using namespace testing;  // NOLINT

struct Case {
  const char* what;
  gpu::Device device;
  bool starved;
};

gpu::Device with_process(gpu::Device d, std::uint64_t process_mib) {
  d.processes.push_back(process(4242, process_mib, "carol", "python serve.py"));
  return d;
}

// [activity] busy_util_pct = 50, starved_mem_pct = 60 (not the defaults, 30 and 50).
gpu::ActivityThresholds thresholds() {
  gpu::ActivityThresholds t;
  t.busy_util_pct = 50;
  t.starved_mem_pct = 60;
  return t;
}

std::vector<Case> cases() {
  return {
      // The alert's own 30 % said "not starved" while the class, at busy 50 %, said starved.
      {"40 % with 90 % of memory", with_process(device(0, 40, 36864), 36864), true},
      // The alert summed the processes' memory (NVML reports 4 GiB) where the class reads what the
      // GPU has in use (36 GiB, 90 %).
      {"10 % with memory the processes under-report", with_process(device(0, 10, 36864), 4096), true},
      // The alert's own 50 % said starved while the class, at 60 %, said idle.
      {"10 % with 55 % of memory", with_process(device(0, 10, 22528), 22528), false},
      {"busy", with_process(device(0, 70, 36864), 36864), false},
      {"no processes", device(0, 5, 36864), false},
      {"unknown total memory", [] {
         auto d = with_process(device(0, 10, 36864), 36864);
         d.id.mem_total_bytes.reset();
         return d;
       }(), false},
  };
}

bool alert_fires(const gpu::Device& d, gpu::Activity cls) {
  AlertConfig config;
  config.starvation_for_ms = 0;
  for (Rule r : kRules) {
    if (r != Rule::Starvation) config.disabled.push_back(r);
  }
  Evaluator e(config, thresholds());
  gpu::Snapshot s;
  s.devices.push_back(d);
  const auto notices = e.observe(s, {{d.id.index, cls}}, 0);
  return std::any_of(notices.begin(), notices.end(),
                     [](const Notice& n) { return n.kind == Notice::Kind::Firing && n.alert.rule == Rule::Starvation; });
}

bool doctor_finds(const gpu::Device& d) {
  diagnose::DoctorInput in;
  in.activity = thresholds();
  for (long long i = 0; i < 6; ++i) {
    gpu::Snapshot s;
    s.timestamp_unix_ms = 1736154000000 + i * 500;
    s.devices.push_back(d);
    in.samples.push_back(s);
  }
  const auto diagnosis = diagnose::diagnose(in);
  return std::any_of(diagnosis.findings.begin(), diagnosis.findings.end(),
                     [](const diagnose::Finding& f) { return f.code == "starved"; });
}

TEST(Starved, TheClassTheAlertAndDoctorAgree) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(gpu::is_starved(c.device, thresholds()), c.starved);
    const gpu::Activity cls = gpu::classify_with_history(c.device, thresholds(), 0);
    EXPECT_EQ(cls == gpu::Activity::Starved, c.starved) << gpu::to_string(cls);
    EXPECT_EQ(alert_fires(c.device, cls), c.starved);
    EXPECT_EQ(doctor_finds(c.device), c.starved);
  }
}

}  // namespace
}  // namespace tarmac::alerts
