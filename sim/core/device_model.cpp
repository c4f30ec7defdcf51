#include "device_model.hpp"

#include <algorithm>

namespace tarmac::sim {

namespace {

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;

bool on_gpu(const std::vector<unsigned>& gpus, unsigned gpu) {
  return std::find(gpus.begin(), gpus.end(), gpu) != gpus.end();
}

}  // namespace

DeviceView evaluate_device(const Scenario& scenario, unsigned gpu, double t, const std::vector<LiveProcess>& live,
                           ProcessMode mode) {
  const GpuSpec& spec = scenario.gpus[gpu];
  const SegmentValues timeline = merged_values(scenario, gpu, t);

  // Scenario processes due on this GPU now, and those of them that really run.
  std::vector<unsigned> due;
  for (unsigned i = 0; i < scenario.processes.size(); ++i) {
    const ProcessSpec& p = scenario.processes[i];
    if (on_gpu(p.gpus, gpu) && p.window.contains(t)) due.push_back(i);
  }
  std::vector<std::pair<unsigned, const LiveProcess*>> running;  // (scenario index, live entry or null)
  std::vector<const LiveProcess*> loads;
  // A process of another PID namespace runs whenever it is due: nothing local starts or stops it.
  for (unsigned i : due) {
    if (mode == ProcessMode::Static || scenario.processes[i].host_pid) running.emplace_back(i, nullptr);
  }
  if (mode == ProcessMode::Live) {
    for (const LiveProcess& lp : live) {
      if (!on_gpu(lp.gpus, gpu)) continue;
      if (!lp.scenario_process) {
        loads.push_back(&lp);
      } else if (std::find(due.begin(), due.end(), *lp.scenario_process) != due.end()) {
        running.emplace_back(*lp.scenario_process, &lp);
      }
    }
  }

  Activity activity;
  activity.workload_gone = !due.empty() && running.empty();
  activity.any_process = !running.empty() || !loads.empty();
  for (const LiveProcess* lp : loads) activity.load_util += lp->sm_util;

  DeviceView view;
  view.sample = resolve_sample(spec, timeline, activity);
  view.total_bytes = spec.memory_mib * kMiB;
  view.reserved_bytes = spec.memory_reserved_bytes.value_or(spec.memory_reserved_mib * kMiB);
  unsigned long long used = spec.memory_overhead_mib * kMiB;

  const auto share = static_cast<unsigned>(running.empty() ? 0 : timeline.util_gpu.value_or(0) / running.size());
  const auto mem_share = static_cast<unsigned>(running.empty() ? 0 : timeline.util_mem.value_or(0) / running.size());
  for (const auto& [index, lp] : running) {
    const ProcessSpec& p = scenario.processes[index];
    used += p.memory_mib * kMiB;
    if (lp == nullptr && !p.host_pid) continue;
    const unsigned pid = p.host_pid ? *p.host_pid : static_cast<unsigned>(lp->pid);
    const ProcessUtil u = p.util_at(t);
    view.processes.push_back({pid, p.memory_mib * kMiB, p.type, u.sm_util.value_or(share), u.mem_util.value_or(mem_share),
                              u.sample, 0, p.mig_device});
  }
  for (const LiveProcess* lp : loads) {
    used += lp->memory_mib * kMiB;
    view.processes.push_back({static_cast<unsigned>(lp->pid), lp->memory_mib * kMiB, lp->type, lp->sm_util, lp->mem_util,
                              lp->util_sample, lp->enc_util, lp->mig_device});
  }
  // MIG devices: each one's memory is its profile's; what runs on it is its processes'. (A
  // scenario process without a live entry still uses its memory, as on the whole GPU above.)
  for (const MigInstance& m : spec.mig) {
    MigView mv;
    mv.total_bytes = m.profile->memory_mib * kMiB;
    view.mig.push_back(mv);
  }
  const auto on_mig = [&](std::optional<unsigned> mig, unsigned long long bytes, unsigned sm, unsigned mem) {
    if (!mig || *mig >= view.mig.size()) return;
    MigView& mv = view.mig[*mig];
    mv.used_bytes = std::min(mv.total_bytes, mv.used_bytes + bytes);
    mv.sm_util = std::min(100U, mv.sm_util + sm);
    mv.mem_util = std::min(100U, mv.mem_util + mem);
  };
  for (const auto& [index, lp] : running) {
    const ProcessSpec& p = scenario.processes[index];
    const ProcessUtil u = p.util_at(t);
    on_mig(p.mig_device, p.memory_mib * kMiB, u.sm_util.value_or(share), u.mem_util.value_or(mem_share));
  }
  for (const LiveProcess* lp : loads) on_mig(lp->mig_device, lp->memory_mib * kMiB, lp->sm_util, lp->mem_util);
  for (MigView& mv : view.mig) mv.free_bytes = mv.total_bytes - mv.used_bytes;
  // A GPU cannot hand out more than it has (clients such as nvtop assert on it).
  const unsigned long long usable = view.total_bytes - view.reserved_bytes;
  view.used_bytes = std::min(used, usable);
  view.free_bytes = usable - view.used_bytes;
  std::sort(view.processes.begin(), view.processes.end(),
            [](const ProcessView& a, const ProcessView& b) { return a.pid < b.pid; });
  return view;
}

}  // namespace tarmac::sim
