#include "simulation.hpp"

#include <time.h>

#include <cstdlib>
#include <fmt/format.h>

#include "scenario_parser.hpp"
#include "scenario_paths.hpp"

namespace tarmac::sim {

namespace {

long long monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

constexpr long long kRegistryTtlNs = 20'000'000;

}  // namespace

Simulation::Simulation(Scenario scenario, ClockSpec clock, std::optional<StateDir> state)
    : scenario_(std::move(scenario)), clock_(clock), state_(std::move(state)),
      faults_(std::make_unique<FaultBook>(scenario_, state_)), energy_(scenario_.gpus.size()) {}

Result<std::unique_ptr<Simulation>> Simulation::from_environment(long long start_real_ns,
                                                                 const std::filesystem::path& anchor) {
  if (const char* dir = std::getenv("TARMAC_SIM_STATE"); dir != nullptr && *dir != '\0') return from_state_dir(dir);
  const char* name = std::getenv("TARMAC_SIM_SCENARIO");
  if (name == nullptr || *name == '\0') {
    return make_error(Error::Code::NotFound,
                      "no simulation: set TARMAC_SIM_STATE (run under tarmac-sim) or TARMAC_SIM_SCENARIO");
  }
  TARMAC_TRY_ASSIGN(auto file, resolve_scenario(name, anchor));
  TARMAC_TRY_ASSIGN(Scenario scenario, load_scenario_file(file.string()));
  ClockSpec clock{start_real_ns, 1.0, scenario.epoch_ns.value_or(start_real_ns)};
  if (const char* speed = std::getenv("TARMAC_SIM_SPEED"); speed != nullptr) {
    if (double s = std::atof(speed); s > 0) clock.speed = s;
  }
  return from_scenario(std::move(scenario), clock);
}

Result<std::unique_ptr<Simulation>> Simulation::from_state_dir(const std::filesystem::path& dir) {
  StateDir state(dir);
  TARMAC_TRY_ASSIGN(Scenario scenario, load_scenario_file(state.scenario().string()));
  TARMAC_TRY_ASSIGN(ClockSpec clock, read_clock_file(state.clock()));
  return std::unique_ptr<Simulation>(new Simulation(std::move(scenario), clock, state));
}

std::unique_ptr<Simulation> Simulation::from_scenario(Scenario scenario, ClockSpec clock) {
  return std::unique_ptr<Simulation>(new Simulation(std::move(scenario), clock, std::nullopt));
}

const std::vector<LiveProcess>& Simulation::live_processes() {
  if (!state_) return live_;
  const long long now = monotonic_ns();
  if (live_read_mono_ns_ < 0 || now - live_read_mono_ns_ > kRegistryTtlNs) {
    live_ = read_live_processes(state_->procs());
    live_read_mono_ns_ = now;
  }
  return live_;
}

DeviceView Simulation::device(unsigned gpu, double t) {
  return evaluate_device(scenario_, gpu, t, live_processes(), state_ ? ProcessMode::Live : ProcessMode::Static);
}

bool Simulation::is_lost(unsigned gpu, double t) const {
  const auto at = faults_->lost_at(gpu);
  return at && t >= *at;
}

double Simulation::energy_j(unsigned gpu, double t) {
  EnergyMemo& memo = energy_[gpu];
  if (t < memo.t) memo = {};  // the real clock went back: integrate afresh
  memo.joules += timeline_energy_j(scenario_, gpu, memo.t, t);
  memo.t = t;
  return memo.joules;
}

}  // namespace tarmac::sim
