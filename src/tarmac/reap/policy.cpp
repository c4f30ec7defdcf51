#include "tarmac/reap/policy.hpp"

#include <fmt/format.h>

#include <set>

#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::reap {
namespace {

// The program's base name and the next two words of the command line (enough to recognise it in
// one line: "python3 -m ipykernel_launcher"), else the process's name.
std::string policy_command(const host::ProcessInfo& h) {
  if (h.command_line && !h.command_line->empty()) {
    std::vector<std::string> words;
    for (auto& w : util::split(*h.command_line, ' ')) {
      if (w.empty()) continue;
      if (words.empty() && w.find('/') != std::string::npos) w = w.substr(w.rfind('/') + 1);
      words.push_back(std::move(w));
      if (words.size() == 3) break;
    }
    return fmt::format("{}", fmt::join(words, " "));
  }
  return h.name.value_or("?");
}

// "pid 4242 (alice, python3 -m ipykernel)".
std::string holder_label(const Row& row) {
  const auto& p = row.evidence.process;
  return fmt::format("pid {} ({}, {})", p.pid, p.host.user.value_or("?"), policy_command(p.host));
}

std::string held_text(const Row& row) {
  const auto bytes = row.evidence.process.used_mem_bytes;
  return bytes ? util::format_bytes(*bytes) : std::string("memory");
}

nlohmann::json optional_value(const auto& value) {
  if (!value) return nullptr;
  return *value;
}

}  // namespace

bool holds_idle(const Row& row, long long warn_after_ms) {
  const auto& e = row.evidence;
  const auto& h = e.history;
  return e.process.used_mem_bytes.value_or(0) > 0 && h.last_util_pct == 0u && h.idle_ms() >= warn_after_ms;
}

bool reapable_later(const Row& row) {
  switch (row.decision.reason) {
    case Reason::Candidate:
    case Reason::ObservedTooShort:
    case Reason::RecentlyBusy: return true;
    default: return false;
  }
}

std::optional<Policy::Key> Policy::key_of(const Row& row) {
  const auto& id = row.evidence.identity;
  if (!id) return std::nullopt;  // not visible here: nothing to warn or end
  return Key{row.evidence.gpu, id->pid, id->starttime_ticks, id->boot_id};
}

Plan Policy::step(const Pass& pass, Killing killing) {
  Plan plan;
  std::set<Key> idle_now;
  for (std::size_t i = 0; i < pass.rows.size(); ++i) {
    const Row& row = pass.rows[i];
    if (!holds_idle(row, config_.warn_after_ms)) continue;
    ++plan.holding[row.evidence.gpu];
    const auto key = key_of(row);
    if (!key || !reapable_later(row)) continue;
    idle_now.insert(*key);
    const auto warned = warned_.find(*key);
    if (warned == warned_.end()) {
      plan.warn.push_back(i);
      warned_.emplace(*key, Warned{pass.time_unix_ms, false});
    } else if (killing == Killing::On && row.decision.reason == Reason::Candidate && !warned->second.acted) {
      plan.reap.push_back(i);  // marked acted only by after_kill: a candidate the kill left is retried
    }
  }
  // Gone, busy again, or newly protected: forgotten, so that idling again means a new warning.
  std::erase_if(warned_, [&](const auto& entry) { return !idle_now.contains(entry.first); });
  return plan;
}

void Policy::after_kill(const Row& row) {
  if (!row.action) return;
  const auto key = key_of(row);
  if (!key) return;
  if (auto warned = warned_.find(*key); warned != warned_.end()) warned->second.acted = true;
}

std::string warning_text(const Row& row, const ReaperConfig& config, Killing killing) {
  const auto& e = row.evidence;
  const std::string fate = killing == Killing::On
                               ? fmt::format("reaped at {}", util::format_duration_ms(config.idle_for_ms))
                               : std::string("the agent does not reap (reaper.enabled is false, or its log says why it cannot here)");
  return fmt::format("{} holds {} on GPU {} at 0 % for {}; {}", holder_label(row), held_text(row), e.gpu,
                     util::format_duration_ms(e.history.idle_ms() / 1000 * 1000), fate);  // whole seconds
}

std::string action_summary(const Row& row) {
  const auto& a = *row.action;
  const std::string who = fmt::format("{} on GPU {}", holder_label(row), row.evidence.gpu);
  if (a.memory_freed == true) {
    return fmt::format("reaped {}: {} free after {}", who,
                       a.freed_bytes ? util::format_bytes(*a.freed_bytes) : held_text(row),
                       util::format_duration_ms(a.took_ms));
  }
  std::string out = fmt::format("{}: {}", who, to_string(a.outcome));
  if (a.last_signal != 0) out += " after " + signal_name(a.last_signal);
  if (a.memory_freed == false) out += ": its memory was NOT freed";
  if (!a.message.empty()) out += " (" + a.message + ")";
  return out;
}

nlohmann::json hold_detail(const Row& row) {
  const auto& e = row.evidence;
  return {{"pid", e.process.pid},
          {"user", optional_value(e.process.host.user)},
          {"command", optional_value(e.process.host.command_line)},
          {"gpu_uuid", optional_value(e.gpu_uuid)},
          {"idle_ms", e.history.idle_ms()},
          {"mem_used_bytes", optional_value(e.process.used_mem_bytes)},
          {"decision", to_string(row.decision.reason)}};
}

}  // namespace tarmac::reap
