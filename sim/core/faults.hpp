// The fault book of a simulation: the scenario's [[fault]] rules plus the runtime ones of the
// state directory's `faults` file (re-read whenever it changes), answering per call whether to
// delay, which code to return, whether a GPU is lost, and which events have happened.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fault_rule.hpp"
#include "scenario.hpp"
#include "state_dir.hpp"

namespace tarmac::sim {

struct FaultDecision {
  unsigned delay_ms = 0;
  std::optional<int> rc;
};

class FaultBook {
 public:
  // `state` is absent when the simulation runs without a state directory (then counted faults
  // count per process and there are no runtime faults).
  FaultBook(const Scenario& scenario, std::optional<StateDir> state);

  // Re-reads the runtime faults file if it changed since the last look (one stat otherwise).
  void refresh();

  // What a call of `function` on `gpu` (nullopt: a call that names no GPU) at time t must do.
  // Counted rules are used up here, shared by every process of the simulation.
  [[nodiscard]] FaultDecision on_call(std::string_view function, std::optional<unsigned> gpu, double t);

  // When `gpu` falls off the bus, if ever.
  [[nodiscard]] std::optional<double> lost_at(unsigned gpu) const;

  // Every event (scenario, runtime, and XID 79 for each lost GPU) sorted by time.
  [[nodiscard]] const std::vector<EventSpec>& events() const { return events_; }

  // ECC errors of a kind (nvmlEventType*) counted on `gpu` up to time t, from the events.
  [[nodiscard]] unsigned long long ecc_events(unsigned gpu, unsigned long long type, double t) const;

  [[nodiscard]] const std::vector<FaultRule>& rules() const { return rules_; }

 private:
  bool consume(const FaultRule& rule);
  void rebuild();

  const Scenario& scenario_;
  std::optional<StateDir> state_;
  std::vector<FaultRule> runtime_;
  std::vector<FaultRule> rules_;
  std::vector<EventSpec> events_;
  std::map<std::string, unsigned> local_uses_;
  struct FileId {
    ino_t ino = 0;
    long long mtime_ns = 0;
    long long size = -1;
    bool operator==(const FileId&) const = default;
  } seen_;
};

// Appends a rule to the state directory's faults file (what `tarmac-sim fault` does).
[[nodiscard]] Result<void> append_runtime_fault(const StateDir& state, const FaultRule& rule);
// Removes every runtime fault.
[[nodiscard]] Result<void> clear_runtime_faults(const StateDir& state);

}  // namespace tarmac::sim
