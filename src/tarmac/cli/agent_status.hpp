// The agent's answers to `status` and `window` on the scheduler's socket (docs/recorder.md
// "Commands through the agent"): its live view for `tarmac status`, `watch` and `top`, and the
// views of its last seconds for `tarmac doctor`, so that these need not open NVML.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tarmac/agent/agent.hpp"
#include "tarmac/sched/daemon.hpp"
#include "tarmac/serve/live.hpp"
#include "tarmac/serve/metrics.hpp"

namespace tarmac::cli {

// Adds the two requests to `dopts` (others go to the handler it had). `nvml`: which NVML the agent
// reads (nvml_source); `sampling`: its intervals, told to doctor; `batches`: the backfill batches
// on each GPU now (none when the agent runs no backfill), which `status` names.
void wire_status(sched::DaemonOptions& dopts, const serve::LiveState& live, std::string nvml,
                 const agent::AgentOptions& sampling, std::function<std::vector<serve::GpuBatch>()> batches = {});

}  // namespace tarmac::cli
