// The opt-in policy for Slurm jobs whose GPUs sit idle (docs/slurm.md, "Jobs that hold GPUs idle"):
// `slurm.idle_job_action = "notify"` warns once a job has held every one of its GPUs idle
// (idle, reserved-idle or holding: nothing ran on them, or processes kept memory at 0 %) for
// `slurm.idle_job_warn_after`; "cancel" also cancels it after `slurm.idle_job_cancel_after`,
// unless it is interactive (salloc, srun --pty: its user may be at the keyboard) and
// `slurm.idle_job_cancel_interactive` is off. Pure: the agent feeds it every sample and carries out
// what it says (scancel, the alert sinks).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/host/job_map.hpp"

namespace tarmac::slurm {

enum class IdleJobAction { Off, Notify, Cancel };

[[nodiscard]] std::optional<IdleJobAction> idle_job_action_from(std::string_view text);
[[nodiscard]] const char* to_string(IdleJobAction action);

struct IdleJobSettings {
  IdleJobAction action = IdleJobAction::Off;
  long long warn_after_ms = 60LL * 60 * 1000;
  long long cancel_after_ms = 4LL * 60 * 60 * 1000;
  bool cancel_interactive = false;
};

// What to do about one job now.
struct IdleJobDecision {
  enum class Kind {
    Warn,       // held idle for warn_after: tell its user and the admins
    Cancel,     // held idle for cancel_after: cancel it (if it is not interactive, unless allowed)
    Resolved,   // a warned job used its GPUs again, or left the node
  };
  Kind kind = Kind::Warn;
  std::string job;
  std::vector<unsigned> gpus;
  long long idle_since_ms = 0;
  host::JobInfo info;  // user and partition, as the prolog recorded them
  bool gone = false;   // Resolved: it left the mapping (ended), rather than went back to work
};

class IdleJobs {
 public:
  explicit IdleJobs(IdleJobSettings settings) : settings_(settings) {}

  // One sample: the jobs on the GPUs and each GPU's class, at `now_ms`. A job is held idle when
  // every GPU the mapping gives it is idle, reserved-idle or holding; a GPU without a class yet
  // (not sampled) is not idle. Each decision is made once per stretch of idleness.
  [[nodiscard]] std::vector<IdleJobDecision> observe(const host::JobMap& map, const host::JobInfos& infos,
                                                     const std::map<unsigned, gpu::Activity>& classes, long long now_ms);

  [[nodiscard]] const IdleJobSettings& settings() const { return settings_; }

 private:
  struct State {
    long long idle_since_ms = 0;
    bool idle = false;
    bool warned = false;
    bool cancel_asked = false;
    std::vector<unsigned> gpus;
    host::JobInfo info;
  };
  IdleJobSettings settings_;
  std::map<std::string, State> jobs_;
};

// Whether `scontrol show job -o JOBID` output describes an interactive job (BatchFlag=0: salloc or
// srun without a batch script); nullopt when it does not say.
[[nodiscard]] std::optional<bool> interactive_from_scontrol(std::string_view text);

}  // namespace tarmac::slurm
