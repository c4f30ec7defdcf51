// Hand-built snapshots for the alert tests.
#pragma once

#include <map>
#include <string>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::alerts::testing {

inline gpu::Device device(unsigned index, unsigned util, std::uint64_t used_mib, unsigned temp_c = 60,
                          std::uint64_t total_mib = 40960) {
  gpu::Device d;
  d.id.index = index;
  d.id.uuid = "GPU-0000000" + std::to_string(index) + "-aaaa";
  d.id.mem_total_bytes = total_mib * util::kMiB;
  d.sample.util_gpu_pct = util;
  d.sample.mem_used_bytes = used_mib * util::kMiB;
  d.sample.temp_c = temp_c;
  return d;
}

inline gpu::GpuProcess process(unsigned pid, std::uint64_t mem_mib, const std::string& user, const std::string& cmd,
                               const std::string& slurm_job = "") {
  gpu::GpuProcess p;
  p.pid = pid;
  p.used_mem_bytes = mem_mib * util::kMiB;
  p.host.pid = pid;
  p.host.user = user;
  p.host.command_line = cmd;
  if (!slurm_job.empty()) p.host.slurm_job_id = slurm_job;
  return p;
}

// Four busy, balanced GPUs running one job (a100x4-balanced).
inline gpu::Snapshot balanced() {
  gpu::Snapshot s;
  for (unsigned i = 0; i < 4; ++i) {
    auto d = device(i, 93 + i, 38900, 68);
    d.processes.push_back(process(1000 + i, 38500, "alice", "python train.py --local-rank " + std::to_string(i)));
    s.devices.push_back(d);
  }
  return s;
}

inline std::map<unsigned, gpu::Activity> classes(const gpu::Snapshot& s, gpu::Activity a = gpu::Activity::Busy) {
  std::map<unsigned, gpu::Activity> out;
  for (const auto& d : s.devices) out[d.id.index] = a;
  return out;
}

// GPUs 0-2 train, GPU 3 is held by a forgotten notebook kernel at 0 % (holding-zombie).
inline gpu::Snapshot zombie() {
  gpu::Snapshot s = balanced();
  s.devices[3] = device(3, 0, 20780, 36);
  s.devices[3].processes.push_back(process(1234, 20480, "bob", "python -m ipykernel_launcher -f /home/bob/kernel.json"));
  return s;
}

}  // namespace tarmac::alerts::testing
