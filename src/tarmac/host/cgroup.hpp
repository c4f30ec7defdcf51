// Parsers of /proc/<pid>/cgroup: which container or Slurm job confines a process.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tarmac/host/process_info.hpp"

namespace tarmac::host {

// The container named by a /proc/<pid>/cgroup text (v1 or v2 layout); nullopt for a host process.
[[nodiscard]] std::optional<ContainerRef> parse_cgroup(std::string_view cgroup_file_text);

// The Slurm job id ("12345") from a job_NNN component under a slurm cgroup; nullopt otherwise.
[[nodiscard]] std::optional<std::string> parse_slurm_job_from_cgroup(std::string_view cgroup_file_text);

}  // namespace tarmac::host
