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

}  // namespace tarmac::host
