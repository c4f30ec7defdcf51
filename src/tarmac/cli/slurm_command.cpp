#include "tarmac/cli/slurm_command.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>

#include "tarmac/cli/app.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/slurm/hooks.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/process.hpp"

namespace tarmac::cli {

namespace {

enum class Hook { Prolog, Epilog };

std::map<std::string, std::string> environment() {
  std::map<std::string, std::string> env;
  for (const auto& kv : util::own_environment()) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

int run_hook(const GlobalOptions& global, Hook hook) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return kExitUsage;
  const config::Config& cfg = loaded->config;
  auto job = slurm::read_job_env(environment());
  if (!job.ok()) {
    print_error(job.error());
    return kExitUsage;
  }
  slurm::HookOptions options;
  options.job_map_dir = cfg.slurm.job_map_dir;
  options.lock_dir = sched::lock_dir(cfg.scheduler_lock_dir);
  options.grace_ms = cfg.slurm.epilog_grace_ms;
  options.max_hold_ms = cfg.scheduler.max_hold_ms;
  slurm::HookResult result;
  if (job->gpus.empty()) {
    result.lines.push_back(fmt::format("job {} has no GPUs on this node", job->job_id));
  } else {
    auto backend = open_backend(global);
    if (!backend.ok()) {
      fmt::print(stderr, "tarmac {}: cannot read the GPUs: {}\n", hook == Hook::Prolog ? "prolog" : "epilog",
                 backend.error().message);
      return 1;
    }
    const host::ProcReader proc;
    result = hook == Hook::Prolog ? slurm::run_prolog(**backend, *job, options)
                                  : slurm::run_epilog(**backend, proc, *job, options);
  }
  if (global.json) {
    fmt::print("{}\n", util::json_text(nlohmann::json{{"job", job->job_id},
                                                      {"gpus", job->gpus},
                                                      {"exit_code", result.exit_code},
                                                      {"lines", result.lines}}));
  } else {
    // slurmd logs what a failed Prolog or Epilog wrote; the first line says why.
    for (std::size_t i = 0; i < result.lines.size(); ++i) {
      fmt::print(result.exit_code != 0 && i == 0 ? stderr : stdout, "{}\n", util::terminal_text(result.lines[i]));
    }
  }
  return result.exit_code;
}

}  // namespace

void add_slurm_commands(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* top = app.add_subcommand("slurm", "slurmd's Prolog and Epilog for GPU nodes (docs/slurm.md)");
  top->require_subcommand(1);
  top->add_subcommand("prolog",
                      "Refuse the job a lost, faulty or occupied GPU (exit 1: Slurm drains the node), map the job to "
                      "its GPUs for hpc_job labels, lease them to it")
      ->callback([&global, &exit_code] { exit_code = run_hook(global, Hook::Prolog); });
  top->add_subcommand("epilog",
                      "End what the job's user left on its GPUs, check that the memory is free (exit 1 when not), "
                      "remove the job's mapping and leases")
      ->callback([&global, &exit_code] { exit_code = run_hook(global, Hook::Epilog); });
}

}  // namespace tarmac::cli
