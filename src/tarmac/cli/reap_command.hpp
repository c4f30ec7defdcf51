// `tarmac reap`: finds the processes that hold GPU memory without computing and, with --kill, ends
// them safely (docs/reap.md). Dry run by default: it lists every GPU process with its evidence and
// either "candidate" or the reason it is not one.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/reap/decide.hpp"
#include "tarmac/reap/gather.hpp"
#include "tarmac/reap/kill.hpp"

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

// What happened to one process in this run.
struct ReapRow {
  reap::ProcessEvidence evidence;
  reap::Decision decision;
  std::optional<reap::KillResult> action;  // set for a candidate that --kill went for
  std::string left_because;                // a candidate --kill did not go for: why (kill switch, max_kills)
};

struct ReapReport {
  std::vector<ReapRow> rows;
  reap::EvidenceSource source = reap::EvidenceSource::Watch;
  long long watched_ms = 0;
  std::string store_note;
  long long time_unix_ms = 0;
  bool kill = false;
  bool kill_switch_present = false;
  reap::ReaperConfig rules;
};

// The report as text for a terminal (every string from /proc escaped) and as JSON (docs/reap.md).
[[nodiscard]] std::string report_text(const ReapReport& report);
[[nodiscard]] nlohmann::json report_json(const ReapReport& report);

// 0: no candidate, or every one ended and its memory freed; 1: candidates left (a dry run, the
// kill switch, max_kills, a holder that survived or whose memory was not freed).
[[nodiscard]] int reap_exit_code(const ReapReport& report);

// --kill's pass over the candidates, in order: none while the kill switch (rules.kill_switch)
// exists, at most rules.max_kills ended; each one logged on stderr.
void kill_candidates(ReapReport& report, const reap::Caller& caller, const host::ProcReader& proc,
                     gpu::Backend& backend, const util::Clock& clock);

// The store event for one action (kind "reap"): who, what, the evidence, the signal, the result.
[[nodiscard]] nlohmann::json event_detail(const ReapRow& row, uid_t caller_uid);

}  // namespace detail

}  // namespace tarmac::cli
