#include "tarmac/host/process_info.hpp"

namespace tarmac::host {

std::string workload_label(const ProcessInfo& info) {
  std::string out;
  if (info.container) {
    if (info.container->pod_uid) {
      out = "pod " + info.container->pod_uid->substr(0, 8);
    } else {
      out = info.container->runtime + " " + info.container->id.substr(0, 12);
    }
  }
  if (info.slurm_job_id) out += (out.empty() ? "" : " ") + ("slurm " + *info.slurm_job_id);
  return out;
}

std::string program_name(const std::optional<std::string>& command_line) {
  if (!command_line || command_line->empty()) return {};
  const std::string_view argv0 = std::string_view(*command_line).substr(0, command_line->find(' '));
  const std::size_t slash = argv0.rfind('/');
  return std::string(slash == std::string_view::npos ? argv0 : argv0.substr(slash + 1));
}

}  // namespace tarmac::host
