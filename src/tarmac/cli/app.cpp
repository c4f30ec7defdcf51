#include "tarmac/cli/app.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <exception>
#include <fmt/format.h>
#include <string_view>
#include <vector>

#include "tarmac/cli/agent_command.hpp"
#include "tarmac/cli/backfill_command.hpp"
#include "tarmac/cli/alerts_command.hpp"
#include "tarmac/cli/config_command.hpp"
#include "tarmac/cli/docs_command.hpp"
#include "tarmac/cli/context.hpp"
#include "tarmac/cli/doctor.hpp"
#include "tarmac/cli/history.hpp"
#include "tarmac/cli/pick_command.hpp"
#include "tarmac/cli/reap_command.hpp"
#include "tarmac/cli/slurm_command.hpp"
#include "tarmac/cli/fleet_command.hpp"
#include "tarmac/cli/report_command.hpp"
#include "tarmac/cli/jobs_command.hpp"
#include "tarmac/cli/run_command.hpp"
#include "tarmac/cli/shim_command.hpp"
#include "tarmac/cli/query.hpp"
#include "tarmac/cli/sim_capture.hpp"
#include "tarmac/cli/sim_command.hpp"
#include "tarmac/cli/status.hpp"
#include "tarmac/cli/topo.hpp"
#include "tarmac/cli/top_command.hpp"
#include "tarmac/cli/watch.hpp"

#ifndef TARMAC_VERSION
#define TARMAC_VERSION "0.0.0"
#endif

namespace tarmac::cli {

namespace detail {

void add_global_options(CLI::App& app, GlobalOptions& global) {
  app.add_option("--nvml-lib", global.nvml_lib, "Path of libnvidia-ml.so.1 to load")->envname("TARMAC_NVML_LIB");
  app.add_flag("--json", global.json, "Machine-readable JSON output");
  app.add_flag("--no-color", global.no_color, "No colour (also: NO_COLOR in the environment)");
  app.add_option("--config", global.config, "Configuration file (TOML)");
}

int find_command_word(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") return 0;
    if (std::find(kGlobalOptionsWithValues.begin(), kGlobalOptionsWithValues.end(), a) != kGlobalOptionsWithValues.end()) {
      ++i;  // skip the option's value
      continue;
    }
    if (!a.starts_with("-")) return i;
  }
  return 0;
}

int find_sim_word(int argc, char** argv) {
  const int at = find_command_word(argc, argv);
  return at > 0 && std::string_view(argv[at]) == "sim" ? at : 0;
}

const std::vector<CommandGroup>& command_groups() {
  static const std::vector<CommandGroup> groups{
      {{"status"}, add_status_command},
      {{"topo"}, add_topo_command},
      {{"watch"}, add_watch_command},
      {{"top"}, add_top_command},
      {{"query"}, add_query_command},
      {{"doctor"}, add_doctor_command},
      {{"config"}, add_config_command},
      {{"agent"}, add_agent_command},
      {{"history", "export"}, add_history_commands},
      {{"report"}, add_report_command},
      {{"fleet"}, add_fleet_command},
      {{"alerts"}, add_alerts_command},
      {{"reap"}, add_reap_command},
      {{"slurm"}, add_slurm_commands},
      {{"pick"}, add_pick_command},
      {{"run"}, add_run_command},
      {{"jobs", "cancel", "release", "reserve", "extend"}, add_jobs_commands},
      {{"backfill"}, add_backfill_commands},
      {{"job-shim"}, [](CLI::App& app, const GlobalOptions&, int& exit_code) { add_shim_command(app, exit_code); }},
      {{"completion", "man"}, [](CLI::App& app, const GlobalOptions&, int& exit_code) { add_docs_commands(app, exit_code); },
       true},
      {{"sim"},
       [](CLI::App& app, const GlobalOptions& global, int& exit_code) {
         auto* sim = app.add_subcommand("sim", "Run a command against the simulated NVML: sim --scenario NAME|FILE "
                                               "[--speed X] -- CMD (sim list names the bundled scenarios; sim capture "
                                               "writes this machine as one)");
         add_sim_capture_command(*sim, global, exit_code);
       }},
  };
  return groups;
}

std::vector<const CommandGroup*> groups_for(int argc, char** argv) {
  const auto& groups = command_groups();
  std::vector<const CommandGroup*> all;
  for (const auto& g : groups) all.push_back(&g);
  const int at = find_command_word(argc, argv);
  if (at == 0) {
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (a == "--") break;
      if (a == "--help" || a == "-h") return all;
    }
    return {&groups.front()};  // plain `tarmac [global options]` is status
  }
  const std::string_view word = argv[at];
  for (const auto& g : groups) {
    if (std::find(g.words.begin(), g.words.end(), word) == g.words.end()) continue;
    if (g.needs_all) return all;
    return {&g};
  }
  return all;
}

}  // namespace detail

namespace {

int run_app(int argc, char** argv) {
  // `sim capture` is tarmac's own (it reads the real NVML); every other `sim` is the launcher's.
  if (int at = detail::find_sim_word(argc, argv); at > 0 && !(at + 1 < argc && std::string_view(argv[at + 1]) == "capture")) {
    return exec_sim(std::vector<std::string>(argv + at + 1, argv + argc));
  }
  CLI::App app{"tarmac: see what every NVIDIA GPU is really doing, and keep the fleet flying"};
  app.set_version_flag("--version", fmt::format("tarmac {} (git {})", TARMAC_VERSION, git_commit()));
  app.require_subcommand(0, 1);
  app.fallthrough();
  GlobalOptions global;
  detail::add_global_options(app, global);

  int exit_code = kExitOk;
  for (const auto* group : detail::groups_for(argc, argv)) group->add(app, global, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  if (app.get_subcommands().empty()) return run_status(global);
  return exit_code;
}

}  // namespace

int run(int argc, char** argv) {
  try {
    // slurm.conf's Prolog= and Epilog= name a program and take no arguments: a link to tarmac named
    // tarmac-slurm-prolog (or -epilog) is `tarmac slurm prolog` (docs/slurm.md).
    const std::string_view self = argc > 0 ? std::string_view(argv[0]) : std::string_view();
    const std::string_view name = self.substr(self.rfind('/') == std::string_view::npos ? 0 : self.rfind('/') + 1);
    if (name == "tarmac-slurm-prolog" || name == "tarmac-slurm-epilog") {
      std::vector<char*> args{argv[0], const_cast<char*>("slurm"),
                              const_cast<char*>(name.ends_with("prolog") ? "prolog" : "epilog")};
      for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
      return run_app(static_cast<int>(args.size()), args.data());
    }
    return run_app(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "tarmac: internal error: {}\n", e.what());
    return kExitCouldNotLook;
  }
}

}  // namespace tarmac::cli
