#include "tarmac/cli/fleet_command.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fmt/format.h>
#include <memory>

#include "tarmac/cli/app.hpp"
#include "tarmac/fleet/fleet.hpp"
#include "tarmac/fleet/sources.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

namespace {

struct FleetFlags {
  std::string prometheus;
  std::vector<std::string> hosts;
  std::string timeout = "10s";
};

int run_fleet(const GlobalOptions& global, const FleetFlags& flags) {
  if (flags.prometheus.empty() == flags.hosts.empty()) {
    print_error(make_error(Error::Code::Invalid,
                           "tarmac fleet reads one source: --prometheus URL, or --host ADDRESS (repeated) for agents"));
    return kExitUsage;
  }
  const auto timeout = util::parse_duration_ms(flags.timeout);
  if (!timeout || *timeout < 100 || *timeout > 10 * 60 * 1000) {
    print_error(make_error(Error::Code::Invalid, fmt::format("--timeout {}: expected a duration from 100ms to 10m",
                                                             util::terminal_text(flags.timeout))));
    return kExitUsage;
  }
  auto fleet = flags.prometheus.empty() ? fleet::read_agents(flags.hosts, *timeout)
                                        : fleet::read_prometheus(flags.prometheus, *timeout);
  if (!fleet.ok()) {
    print_error(fleet.error());
    return kExitCouldNotLook;
  }
  if (global.json) {
    std::fputs(fleet::render_json(*fleet).c_str(), stdout);
    for (const auto& p : fleet->problems) fmt::print(stderr, "tarmac: warning: {}\n", util::terminal_text(p));
  } else {
    std::fputs(fleet::render_text(*fleet).c_str(), stdout);
  }
  return fleet->problems.empty() ? kExitOk : kExitProblems;
}

}  // namespace

void add_fleet_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "fleet",
      "Every GPU of a fleet, grounded first (holding, reserved-idle, idle, the longest idle first), from a "
      "Prometheus that scrapes the agents or from the agents themselves (docs/fleet.md)");
  auto flags = std::make_shared<FleetFlags>();
  cmd->add_option("--prometheus", flags->prometheus, "The Prometheus that scrapes the agents (its root URL)");
  cmd->add_option("--host", flags->hosts,
                  "An agent's address (host:port, or its URL), repeated for each: without Prometheus");
  cmd->add_option("--timeout", flags->timeout, "How long to wait for each answer (default 10s)");
  cmd->callback([&global, &exit_code, flags] { exit_code = run_fleet(global, *flags); });
}

}  // namespace tarmac::cli
