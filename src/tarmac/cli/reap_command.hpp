// `tarmac reap`: finds the processes that hold GPU memory without computing and, with --kill, ends
// them safely (docs/reap.md). Dry run by default: it lists every GPU process with its evidence and
// either "candidate" or the reason it is not one.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/reap/decide.hpp"
#include "tarmac/reap/gather.hpp"
#include "tarmac/reap/kill.hpp"
#include "tarmac/reap/pass.hpp"

namespace tarmac::cli {

void add_reap_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// The pieces of `reap`, declared for their unit tests.
namespace detail {

struct ReapFlags {
  std::string idle_for;    // --idle-for D (default reaper.idle_for)
  std::string min_memory;  // --min-memory SIZE (default reaper.min_memory)
  std::string gpus;        // --gpu 0,2
  std::string user;        // --user NAME|UID
  std::string grace;       // --grace D (default reaper.grace)
  std::string window;      // --window D (default --idle-for, at most 5 min)
  std::string db;          // --db FILE: the agent's store (default: the agent's, as history finds it)
  bool kill = false;       // --kill
};

// What a run of reap does: the rules with the flags applied, and what to gather.
struct ReapSettings {
  reap::ReaperConfig rules;
  reap::GatherOptions gather;
  bool kill = false;
};

// The flags over the configuration's [reaper]; an Invalid error naming the flag otherwise. The
// window is --window, else --idle-for capped at rules.window_cap_ms (5 min).
[[nodiscard]] Result<ReapSettings> reap_settings(const ReapFlags& flags, const reap::ReaperConfig& configured);

// One process's row and the whole pass (reap/pass.hpp).
using ReapRow = reap::Row;
using ReapReport = reap::Pass;

// The store reap reads: --db, else as root the configured agent.state_dir or the system's
// /var/lib/tarmac, never $STATE_DIRECTORY or another variable of the environment (a root pass must
// not take its evidence from wherever the environment points); a user's as `history` finds it.
// `euid` is the caller's (geteuid(); a parameter so that both rules are tested).
[[nodiscard]] std::string reap_store_path(const config::Config& config, const std::string& db_flag, uid_t euid);

// Why root's --kill must stop before it starts: without an agent store to read at `store_path`,
// every process would be watch evidence, which never lets root end one (reap/decide.cpp), so the
// watch would be time spent for nothing. nullopt for a dry run, a user's own --kill, or a store.
[[nodiscard]] std::optional<std::string> storeless_kill_refusal(const reap::Caller& caller,
                                                                const std::string& store_path);

// Why --kill must stop when the lock directory `dir` does not exist: a missing one means "no
// tarmac jobs" only outside /tmp (a private /tmp, systemd's PrivateTmp=, hides a real one there).
// nullopt when the pass may go on (a dry run always may: it says it could not read them).
[[nodiscard]] std::optional<std::string> missing_lock_dir_refusal(const std::string& dir, bool kill);

// The live leases of the scheduler's lock directory `dir`, without creating it when it is missing,
// taking its lock or removing a stale lease file (a user holding `.lock` cannot stop reap, and
// reap as root deletes nothing: N4 and N5 of its second review); `max_hold_ms` is the scheduler's
// bound on a lease without an owner process. reap tells a tarmac job's processes by them.
[[nodiscard]] Result<std::vector<reap::JobLease>> job_leases(const std::string& dir, long long max_hold_ms);

// The report as text for a terminal (every string from /proc escaped) and as JSON (docs/reap.md).
[[nodiscard]] std::string report_text(const ReapReport& report);
[[nodiscard]] nlohmann::json report_json(const ReapReport& report);

// 0: no candidate, or every one ended and its memory freed; 1: candidates left (a dry run, the
// kill switch, max_kills, a holder that survived or whose memory was not freed).
[[nodiscard]] int reap_exit_code(const ReapReport& report);

}  // namespace detail

}  // namespace tarmac::cli
