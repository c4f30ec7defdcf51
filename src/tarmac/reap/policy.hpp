// The agent's reaper policy (docs/reap.md "As a service"), the pure part: given each pass's
// survey, which holders to warn now and which to end now. A holder is warned once per process
// identity (pid + start time + boot) and GPU, when it has sat at a known 0 % for
// reaper.warn_after; it is ended only in a later pass than its warning, once the decision makes
// it a candidate (reaper.idle_for and every safety rule), so an owner is always told first.
// A holder that left the GPU or got busy is forgotten: idle again later, it is warned again.
// One the kill acted on (Row::action, fed back by after_kill) and that is still there
// (uninterruptible, survived SIGKILL) is not tried again while it stays: its action and notice
// were already given. One the kill left without acting (the kill switch, reaper.max_kills, decided
// again before its signal) is asked for again in the next pass while it stays idle.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tarmac/reap/pass.hpp"
#include "tarmac/reap/rules.hpp"

namespace tarmac::reap {

// Whether this agent may end holders: reaper.enabled and the --kill gate both say so.
enum class Killing { Off, On };

// What the policy asks for after one pass; indices into Pass::rows.
struct Plan {
  std::vector<std::size_t> warn;  // tell the owner now (first time seen idle past warn_after)
  std::vector<std::size_t> reap;  // end now (candidates warned in an earlier pass)
  // Per GPU index: processes holding memory at a known 0 % for at least warn_after (any decision).
  std::map<unsigned, unsigned> holding;
};

// Whether `row` holds GPU memory at a known 0 % for at least `warn_after_ms` by its history.
[[nodiscard]] bool holds_idle(const Row& row, long long warn_after_ms);

// Whether the decision leaves `row` to the reaper's timing alone: a candidate, or idle all along
// but not yet for idle_for. Protected, other users', busy, unknown and too-young rows are not.
[[nodiscard]] bool reapable_later(const Row& row);

class Policy {
 public:
  explicit Policy(ReaperConfig config) : config_(std::move(config)) {}

  // Moves the state on by one pass (rows in any order) and says what to do now.
  [[nodiscard]] Plan step(const Pass& pass, Killing killing);

  // Feeds back what the kill did with `row`, one the last plan asked to end: acted on (Row::action
  // set) it is never asked for again while it stays; left (Row::left_because) it stays due.
  void after_kill(const Row& row);

  // How many holders are remembered as warned (for tests and the benchmark).
  [[nodiscard]] std::size_t warned_count() const { return warned_.size(); }

 private:
  // (GPU, pid, start ticks, boot id): a reused pid or a second GPU is another holder.
  using Key = std::tuple<unsigned, unsigned, unsigned long long, std::string>;
  [[nodiscard]] static std::optional<Key> key_of(const Row& row);

  struct Warned {
    long long at_unix_ms = 0;  // the pass that warned its owner
    bool acted = false;        // the kill acted on it once (after_kill): never again
  };
  ReaperConfig config_;
  std::map<Key, Warned> warned_;
};

// The warning's one line: "pid 4242 (alice, python3 -m ipykernel) holds 38 GiB on GPU 3 at 0 % for
// 6m; reaped at 10m" (or why it will not be). Raw text: escape it for where it goes.
[[nodiscard]] std::string warning_text(const Row& row, const ReaperConfig& config, Killing killing);

// The notice after an action: "reaped pid 4242 (alice, jupyter kernel) on GPU 3: 38 GiB free after 12 s",
// or what happened instead ("pid 4242 ... on GPU 3: survived after SIGKILL: its memory was NOT freed").
[[nodiscard]] std::string action_summary(const Row& row);

// The store event of a warning (kind "hold"): who, what, how long idle, how much memory.
[[nodiscard]] nlohmann::json hold_detail(const Row& row);

}  // namespace tarmac::reap
