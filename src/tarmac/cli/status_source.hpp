// Where `tarmac status` and `tarmac watch` get the GPUs from (docs/recorder.md "Commands through
// the agent"): the agent's live view over its socket when an agent runs on this machine (a socket round
// trip instead of NVML's initialisation, and classes measured over time), else NVML directly.
// `--direct` (or `--holding-after`, a class the caller defines) always reads NVML.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/cli/status.hpp"
#include "tarmac/gpu/backend.hpp"
#include "tarmac/host/process_cache.hpp"

namespace tarmac::cli {

class StatusSource {
 public:
  // `socket`: the agent's (agent_socket); "" reads NVML only.
  StatusSource(const GlobalOptions& global, gpu::ActivityThresholds thresholds, std::string socket);

  // The GPUs now: from the agent when it answers, else from NVML (opened on first need). nullopt
  // when neither can be read, the reason printed. An agent that stops answering is left for NVML
  // for good, with a warning unless it simply is not there (no socket, an agent without `status`).
  [[nodiscard]] std::optional<StatusView> read();

 private:
  [[nodiscard]] std::optional<StatusView> from_agent();

  const GlobalOptions& global_;
  gpu::ActivityThresholds thresholds_;
  std::string socket_;
  std::unique_ptr<gpu::Backend> backend_;
  host::ProcessCache processes_;
};

}  // namespace tarmac::cli
