// Fixed snapshots for the tui tests: four A100s where GPU 0 works, and a torchrun job of four ranks.
#pragma once

#include <string>

#include "tarmac/tui/model.hpp"

namespace tarmac::tui::test {

inline constexpr unsigned long long kGiB = 1ULL << 30;

inline gpu::GpuProcess process(unsigned pid, const std::string& user, unsigned uid, const std::string& command,
                               std::uint64_t mem, std::optional<unsigned> sm, long long start = 1000) {
  gpu::GpuProcess p;
  p.pid = pid;
  p.used_mem_bytes = mem;
  p.sm_util_pct = sm;
  p.host.pid = pid;
  p.host.visibility = host::PidVisibility::Visible;
  p.host.user = user;
  p.host.uid = uid;
  p.host.command_line = command;
  p.host.name = command.substr(0, command.find(' '));
  p.host.start_time_unix = start;
  return p;
}

inline gpu::Device device(unsigned index, unsigned util, std::uint64_t used) {
  gpu::Device d;
  d.id.index = index;
  d.id.name = "NVIDIA A100-SXM4-40GB";
  d.id.uuid = "GPU-" + std::to_string(index);
  d.id.mem_total_bytes = 40 * kGiB;
  d.sample.util_gpu_pct = util;
  d.sample.util_mem_pct = util / 2;
  d.sample.mem_used_bytes = used;
  d.sample.temp_c = 40 + util / 4;
  d.sample.power_mw = 60000 + util * 2000;
  d.modes.enforced_power_limit_mw = 400000;
  d.sample.clock_sm_mhz = 1410;
  d.sample.pstate = 0;
  d.sample.clock_event_reasons = 0;
  return d;
}

// GPU 0 busy with alice's training; GPUs 1-3 idle.
inline HostData gpu0_only() {
  HostData h;
  gpu::Snapshot s;
  s.timestamp_unix_ms = 2'000'000;
  s.devices.push_back(device(0, 98, 38 * kGiB));
  s.devices[0].processes.push_back(process(4242, "alice", 1000, "python train.py --epochs 90", 37 * kGiB, 98));
  for (unsigned i = 1; i < 4; ++i) s.devices.push_back(device(i, 0, kGiB / 2));
  h.snapshot = s;
  h.classes = {gpu::Activity::Busy, gpu::Activity::Idle, gpu::Activity::Idle, gpu::Activity::Idle};
  h.received_ms = 1;
  return h;
}

// torchrun (pid 100) with four ranks (101-104), one per GPU, and bob's notebook (200) on GPU 3,
// started by its own shell (pid 150).
inline HostData torchrun_job() {
  HostData h;
  gpu::Snapshot s;
  s.timestamp_unix_ms = 2'000'000;
  for (unsigned i = 0; i < 4; ++i) {
    s.devices.push_back(device(i, 90, 20 * kGiB));
    s.devices[i].processes.push_back(process(101 + i, "alice", 1000, "python -u train.py --local-rank=" + std::to_string(i),
                                             (10 + i) * kGiB, 90));
    h.ancestors[101 + i] = Ancestor{100, "python", "python -u train.py", std::string("alice"), 1000};
  }
  s.devices[3].processes.push_back(process(200, "bob", 1001, "python notebook.py", 2 * kGiB, 0));
  h.ancestors[200] = Ancestor{150, "bash", "-bash", std::string("bob"), 900};
  h.ancestors[150] = Ancestor{1, "bash", "-bash", std::string("bob"), 900};
  h.ancestors[100] = Ancestor{50, "torchrun", "/usr/bin/python3 /usr/local/bin/torchrun --nproc-per-node 4 train.py",
                              std::string("alice"), 999};
  h.ancestors[50] = Ancestor{1, "bash", "bash", std::string("alice"), 900};
  h.snapshot = s;
  h.classes.assign(4, gpu::Activity::Busy);
  h.received_ms = 1;
  return h;
}

}  // namespace tarmac::tui::test
