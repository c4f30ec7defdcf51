// A running simulation as one process sees it: the scenario, the shared clock, the registry of
// live processes and the fault book. Used by the library (one per nvmlInit) and the load program.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "clock.hpp"
#include "device_model.hpp"
#include "faults.hpp"
#include "registry.hpp"
#include "scenario.hpp"
#include "state_dir.hpp"

namespace tarmac::sim {

class Simulation {
 public:
  // The simulation the environment names: TARMAC_SIM_STATE (a state directory) or, without it,
  // TARMAC_SIM_SCENARIO (a bundled name or a file) with the clock starting at `start_real_ns`.
  // `anchor` is the calling binary's directory (to find bundled scenarios).
  [[nodiscard]] static Result<std::unique_ptr<Simulation>> from_environment(long long start_real_ns,
                                                                            const std::filesystem::path& anchor);
  [[nodiscard]] static Result<std::unique_ptr<Simulation>> from_state_dir(const std::filesystem::path& dir);
  [[nodiscard]] static std::unique_ptr<Simulation> from_scenario(Scenario scenario, ClockSpec clock);

  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  [[nodiscard]] const Scenario& scenario() const { return scenario_; }
  [[nodiscard]] const SimClock& clock() const { return clock_; }
  [[nodiscard]] double now() const { return clock_.seconds(); }
  [[nodiscard]] const std::optional<StateDir>& state() const { return state_; }
  [[nodiscard]] FaultBook& faults() { return *faults_; }
  [[nodiscard]] std::size_t gpu_count() const { return scenario_.gpus.size(); }

  // Registered processes that are alive, re-read at most every 20 ms (real time).
  [[nodiscard]] const std::vector<LiveProcess>& live_processes();

  [[nodiscard]] DeviceView device(unsigned gpu, double t);
  [[nodiscard]] bool is_lost(unsigned gpu, double t) const;
  // Energy used since simulated time 0, in joules (the timeline's power, integrated).
  [[nodiscard]] double energy_j(unsigned gpu, double t);

 private:
  Simulation(Scenario scenario, ClockSpec clock, std::optional<StateDir> state);

  Scenario scenario_;
  SimClock clock_;
  std::optional<StateDir> state_;
  std::unique_ptr<FaultBook> faults_;
  std::vector<LiveProcess> live_;
  long long live_read_mono_ns_ = -1;
  struct EnergyMemo {
    double t = 0;
    double joules = 0;
  };
  std::vector<EnergyMemo> energy_;
};

}  // namespace tarmac::sim
