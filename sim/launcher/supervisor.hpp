// The scenario's processes as real processes: started when their window opens (as the
// scenario's user when running as root and that user exists), registered in the state
// directory, stopped when the window closes or the simulation ends. A process killed from
// outside is not restarted before its next period.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <vector>

#include "scenario.hpp"
#include "state_dir.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sim::launcher {

class Supervisor {
 public:
  Supervisor(const Scenario& scenario, StateDir state, std::filesystem::path load_program);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts the processes due at simulated time t and stops those whose window has closed.
  [[nodiscard]] Result<void> tick(double t);
  // A child exited: forget it and unregister it. False if it was not a scenario process.
  bool on_exit(pid_t pid);
  // SIGTERM to every scenario process, SIGKILL to those still there after `grace_ms`.
  void stop_all(int grace_ms);

 private:
  struct Slot {
    std::optional<pid_t> pid;
    std::optional<long long> occurrence;  // the period it was last started in
    bool stopping = false;
  };
  [[nodiscard]] Result<pid_t> start(unsigned index);

  const Scenario& scenario_;
  StateDir state_;
  std::filesystem::path load_program_;
  std::vector<Slot> slots_;
};

}  // namespace tarmac::sim::launcher
