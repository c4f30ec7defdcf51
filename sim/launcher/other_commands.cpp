// `tarmac-sim list`, `fault`, `status` and `check`.
#include <cstdio>
#include <fmt/format.h>

#include "commands.hpp"
#include "fault_rule.hpp"
#include "faults.hpp"
#include "scenario_parser.hpp"
#include "scenario_paths.hpp"
#include "simulation.hpp"

namespace tarmac::sim::launcher {

namespace fs = std::filesystem;

fs::path exe_dir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(".") : self.parent_path();
}

namespace {

// Takes "--state DIR" (or --state=DIR) out of args.
std::optional<fs::path> take_state(Args& args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--state" && i + 1 < args.size()) {
      fs::path dir = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      return dir;
    }
    if (args[i].starts_with("--state=")) {
      fs::path dir = args[i].substr(8);
      args.erase(args.begin() + static_cast<long>(i));
      return dir;
    }
  }
  return std::nullopt;
}

}  // namespace

int list_command(const Args& args) {
  if (!args.empty()) {
    std::fputs("usage: tarmac-sim list\n", stderr);
    return kExitUsage;
  }
  const auto bundled = bundled_scenarios(exe_dir());
  if (bundled.empty()) {
    std::fputs("tarmac-sim: no bundled scenarios found (set TARMAC_SIM_SCENARIOS)\n", stderr);
    return 1;
  }
  std::size_t width = 0;
  for (const auto& b : bundled) width = std::max(width, b.name.size());
  for (const auto& b : bundled) {
    auto scenario = load_scenario_file(b.file.string());
    const std::string description = scenario ? scenario->description : "(invalid: " + scenario.error().message + ")";
    std::printf("%s\n", fmt::format("{:<{}}  {}", b.name, width, description).c_str());
  }
  return 0;
}

int fault_command(const Args& raw) {
  Args args = raw;
  const auto dir = take_state(args);
  if (!dir || args.empty()) {
    std::fputs("usage: tarmac-sim fault --state DIR (SPEC... | --clear)\n", stderr);
    return kExitUsage;
  }
  auto simulation = Simulation::from_state_dir(*dir);
  if (!simulation) {
    std::fprintf(stderr, "tarmac-sim fault: %s\n", simulation.error().message.c_str());
    return kExitUsage;
  }
  const StateDir state(*dir);
  if (args.size() == 1 && args[0] == "--clear") {
    if (auto r = clear_runtime_faults(state); !r) {
      std::fprintf(stderr, "tarmac-sim fault: %s\n", r.error().message.c_str());
      return 1;
    }
    return 0;
  }
  // Validate every spec before adding any, so that a typo adds nothing.
  std::vector<FaultRule> rules;
  for (const std::string& spec : args) {
    auto rule = parse_fault_spec(spec, (*simulation)->gpu_count(), (*simulation)->now());
    if (!rule) {
      std::fprintf(stderr, "tarmac-sim fault: %s\n", rule.error().message.c_str());
      return kExitUsage;
    }
    rules.push_back(std::move(*rule));
  }
  for (const FaultRule& rule : rules) {
    if (auto r = append_runtime_fault(state, rule); !r) {
      std::fprintf(stderr, "tarmac-sim fault: %s\n", r.error().message.c_str());
      return 1;
    }
  }
  return 0;
}

int status_command(const Args& raw) {
  Args args = raw;
  const auto dir = take_state(args);
  if (!dir || !args.empty()) {
    std::fputs("usage: tarmac-sim status --state DIR\n", stderr);
    return kExitUsage;
  }
  auto simulation = Simulation::from_state_dir(*dir);
  if (!simulation) {
    std::fprintf(stderr, "tarmac-sim status: %s\n", simulation.error().message.c_str());
    return kExitUsage;
  }
  Simulation& s = **simulation;
  std::printf("scenario %s, %zu GPUs, simulated time %.1f s (speed %g)\n", s.scenario().name.c_str(), s.gpu_count(),
              s.now(), s.clock().spec().speed);
  for (const LiveProcess& p : s.live_processes()) {
    std::string gpus;
    for (unsigned g : p.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
    if (p.scenario_process) {
      std::printf("pid %d on GPU %s: %llu MiB (scenario process %u)\n", p.pid, gpus.c_str(), p.memory_mib,
                  *p.scenario_process);
    } else {
      std::printf("pid %d on GPU %s: %llu MiB, %u %% SM (load)\n", p.pid, gpus.c_str(), p.memory_mib, p.sm_util);
    }
  }
  return 0;
}

int check_command(const Args& args) {
  if (args.empty()) {
    std::fputs("usage: tarmac-sim check NAME|FILE...\n", stderr);
    return kExitUsage;
  }
  int status = 0;
  for (const std::string& name : args) {
    auto file = resolve_scenario(name, exe_dir());
    auto scenario = file ? load_scenario_file(file->string()) : Result<Scenario>(file.error());
    if (scenario) {
      std::printf("%s: ok (%zu GPUs, %zu processes)\n", file->c_str(), scenario->gpus.size(),
                  scenario->processes.size());
    } else {
      std::fprintf(stderr, "%s\n", scenario.error().message.c_str());
      status = 1;
    }
  }
  return status;
}

}  // namespace tarmac::sim::launcher
