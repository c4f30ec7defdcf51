// `tarmac pick [-n N] [--min-free SIZE] [--max-util PCT] [--format index|uuid|env] [--hold D]`:
// the best free GPUs for a new job, race-free against concurrent picks and runs
// (docs/scheduler.md). Also the pieces `tarmac run` shares with it.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tarmac/cli/context.hpp"
#include "tarmac/config/config.hpp"
#include "tarmac/sched/acquire.hpp"

namespace tarmac::cli {

void add_pick_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// The request flags pick and run share, as typed.
struct RequestFlags {
  unsigned n = 1;
  std::string min_free;  // a size; "" for none
  unsigned max_util = 100;
  std::optional<std::string> mig;  // --mig PROFILE or any: a MIG device (docs/mig.md)
};

void add_request_flags(CLI::App& cmd, RequestFlags& flags);

// The request, or an Invalid error naming the bad flag.
[[nodiscard]] Result<sched::PickRequest> parse_request(const RequestFlags& flags);

// The lock directory (TARMAC_LOCK_DIR, scheduler.lock_dir, /run/tarmac/locks), opened; prints errors.
[[nodiscard]] Result<sched::LeaseDir> open_lease_dir(const GlobalOptions& global);
// The same with the configuration already loaded (its lock_dir and max_hold).
[[nodiscard]] Result<sched::LeaseDir> open_lease_dir(const config::Config& config);

// "0,2" (indices) or "GPU-...,GPU-..." (UUIDs) of what was chosen.
[[nodiscard]] std::string visible_devices(const sched::Acquired& acquired, bool uuids);

// "tarmac: no 2 free GPUs: 1 free of 4\n  GPU 0: process: 1 process (pid 12)\n...": why not; each
// GPU's detail shown escaped (it quotes the lease files of a shared directory).
[[nodiscard]] std::string not_enough_message(const sched::Acquired& acquired, unsigned n);

// The current user's name (or uid), and the time now in ms since the epoch.
[[nodiscard]] std::string current_user();
[[nodiscard]] long long now_unix_ms();

// The pieces of `pick`, declared for their unit tests.
namespace detail {

struct PickFlags {
  RequestFlags request;
  std::string format = "index";
  std::string hold;
};

struct PickPlan {
  sched::PickRequest request;
  std::optional<long long> hold_ms;  // --hold
};

// The request, the --format (index, uuid or env) checked, and --hold as a duration of more than 0
// and at most `max_hold_ms` (scheduler.max_hold; 0: any); an Invalid error naming the flag otherwise.
[[nodiscard]] Result<PickPlan> parse_pick(const PickFlags& flags, long long max_hold_ms = 0);

// `pick --json`: the chosen GPUs, every free one, and why each other one is not free.
[[nodiscard]] nlohmann::json pick_json(const sched::Acquired& acquired, std::optional<long long> held_until);

// What pick prints for `format`: "0,2", "GPU-...,GPU-...", or the environment assignments.
[[nodiscard]] std::string pick_line(const sched::Acquired& acquired, const std::string& format);

}  // namespace detail

}  // namespace tarmac::cli
