// Where `tarmac status` and `tarmac watch` get the GPUs from (docs/recorder.md "Commands through
// the agent"): the agent's live view over its socket when an agent runs on this machine (a socket round
// trip instead of NVML's initialisation, and classes measured over time), else NVML directly.
// `--direct` (or `--holding-after`, a class the caller defines) always reads NVML.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/cli/status.hpp"
#include "tarmac/gpu/backend.hpp"
#include "tarmac/host/process_cache.hpp"
#include "tarmac/sched/leases.hpp"

namespace tarmac::cli {

// What asking the agent came to: its view (processes' host facts read here, as this user may),
// or none, with `problem` saying why when that is news ("" when simply no agent runs, or it is
// an agent of other GPUs, or one older than `status`).
struct AgentViewAnswer {
  std::optional<StatusView> view;
  std::string problem;
};

// Asks the agent on `socket` for its live view (one request, one 2 s deadline). `nvml`: the
// command's nvml_source; an agent reading another NVML is not asked further.
[[nodiscard]] AgentViewAnswer agent_view(const std::string& socket, const std::string& nvml, host::ProcessCache& processes);

// The agent's samples over a window (docs/doctor.md "Through the agent"), oldest first, each with
// its processes described here, the topology with each (read once at the agent's start).
struct AgentWindow {
  std::vector<gpu::Snapshot> samples;
  long long interval_ms = 0;          // the agent's sampling interval
  long long process_interval_ms = 0;  // and how often it lists processes
  long long newest_age_ms = 0;        // how old the newest sample was when the agent answered
};

struct AgentWindowAnswer {
  std::optional<AgentWindow> window;
  std::string problem;  // as AgentViewAnswer's
};

// Asks the agent on `socket` for its samples of the last `window_ms` (at most serve::LiveState::kRecentMs).
[[nodiscard]] AgentWindowAnswer agent_window(const std::string& socket, const std::string& nvml, long long window_ms,
                                             host::ProcessCache& processes);

// A lease as people name it: "job 12 alice", or "lease alice" for one taken without a job.
[[nodiscard]] std::string lease_label(const sched::Lease& lease);

// The agent's job that `tarmac cancel` takes for `lease` ("12"), or "" where none may be named: a
// file not written by root (the agent) may name anyone's job.
[[nodiscard]] std::string cancel_id(const sched::Lease& lease);

// The live leases in `files` by GPU UUID, as lease_label names them, with the agent job
// `tarmac cancel` takes where there is one (read without the scheduler's lock: nothing is removed,
// nor a missing directory made); none when the directory cannot be read.
[[nodiscard]] std::map<std::string, diagnose::GpuLease> lease_labels(const LeaseFiles& files);

// What status's table, its classes and its verdicts read of each GPU. Nothing else is read for the
// table: on a real H200 the rest (the NUMA node and CPUs, maximum and applications clocks, energy,
// the PCIe link, modes, BAR1, fans) took more than half of a direct status's time, 35 of 64 ms
// (TARMAC_NVML_PROFILE). --json reads every value.
inline constexpr gpu::ValueGroups kTableValues{
    gpu::ValueGroup::Name,        gpu::ValueGroup::Uuid,         gpu::ValueGroup::Pci,
    gpu::ValueGroup::ComputeCapability,  // CUDA's FASTEST_FIRST order (the cuda:k line)
    gpu::ValueGroup::Memory,      gpu::ValueGroup::EnforcedPowerLimit, gpu::ValueGroup::TemperatureSlowdown,
    gpu::ValueGroup::ClockEvents, gpu::ValueGroup::MigMode,      gpu::ValueGroup::Utilization,
    gpu::ValueGroup::Temperature, gpu::ValueGroup::Power,        gpu::ValueGroup::ClockSm,
    gpu::ValueGroup::PerformanceState, gpu::ValueGroup::EccUncorrectedVolatile, gpu::ValueGroup::RetiredPages,
    gpu::ValueGroup::RemappedRows, gpu::ValueGroup::ProcessUtilization, gpu::ValueGroup::ProcessHost};

class StatusSource {
 public:
  // `socket`: the agent's (agent_socket); "" reads NVML only.
  // `leases`: where the scheduler's leases are (none read when its dir is empty).
  // `values`: what a direct read asks NVML for (status's table: kTableValues; --json and query:
  // their own).
  StatusSource(const GlobalOptions& global, gpu::ActivityThresholds thresholds, std::string socket,
               LeaseFiles leases = {}, gpu::ValueGroups values = gpu::ValueGroups::all());

  // The GPUs now: from the agent when it answers, else from NVML (opened on first need). nullopt
  // when neither can be read, the reason printed. An agent that stops answering is left for NVML
  // for good, with a warning unless it simply is not there (no socket, an agent without `status`).
  [[nodiscard]] std::optional<StatusView> read();

 private:
  [[nodiscard]] std::optional<StatusView> from_agent();

  const GlobalOptions& global_;
  gpu::ActivityThresholds thresholds_;
  std::string socket_;
  LeaseFiles leases_;
  gpu::ValueGroups values_;
  std::unique_ptr<gpu::Backend> backend_;
  host::ProcessCache processes_;
};

}  // namespace tarmac::cli
