#include "tarmac/reap/kill.hpp"

#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fmt/format.h>

#include "tarmac/reap/gather.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::reap {
namespace {

constexpr long long kAfterKillWaitMs = 5000;  // SIGKILL ends a process at once unless the kernel holds it
constexpr long long kFreePollMs = 200;

struct Opened {
  Target target;
  util::Fd pidfd;
  bool ended = false;
};

// A pidfd for `target`, checked after it was opened: only then does a matching identity prove that
// the pidfd's process is the one chosen (pidfd_open takes whoever has the pid at that moment).
std::optional<util::Fd> open_checked(const Target& target, const host::ProcReader& proc, std::string& why) {
  auto pidfd = util::open_pidfd(static_cast<pid_t>(target.identity.pid));
  if (!pidfd.ok()) {
    why = pidfd.error().code == Error::Code::NotFound ? "it had already ended" : pidfd.error().message;
    return std::nullopt;
  }
  if (proc.identity(target.identity.pid) != target.identity) {
    why = "its pid names another process now";
    return std::nullopt;
  }
  return std::move(*pidfd);
}

// Sends `sig` to `o` unless it has ended or is no longer the process chosen. False when a signal
// that should have gone out could not be sent.
bool send_checked(Opened& o, int sig, const host::ProcReader& proc, KillResult& result) {
  Step step{o.target.identity.pid, o.target.role, sig, false, {}};
  bool ok = true;
  if (util::pidfd_ended(o.pidfd, 0)) {
    o.ended = true;
    step.note = "it had already ended";
  } else if (proc.identity(o.target.identity.pid) != o.target.identity) {
    step.note = "its identity changed: not signalled";  // cannot happen with a live pidfd: kept as a guard
  } else if (auto sent = util::signal_pidfd(o.pidfd, sig); !sent.ok()) {
    ok = sent.error().code == Error::Code::NotFound;
    step.note = ok ? "it had already ended" : sent.error().message;
  } else {
    step.sent = true;
    // The strongest sent: SIGKILL once it went out (its number is the smaller one).
    if (result.last_signal != SIGKILL) result.last_signal = sig;
  }
  result.steps.push_back(std::move(step));
  return ok;
}

// Waits up to `timeout_ms` for every target not yet ended; true when all have.
bool wait_all(std::vector<Opened>& opened, long long timeout_ms) {
  const long long deadline = util::monotonic_ms() + std::max(0LL, timeout_ms);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Opened*> waiting;
    for (auto& o : opened) {
      if (o.ended) continue;
      fds.push_back({o.pidfd.get(), POLLIN, 0});
      waiting.push_back(&o);
    }
    if (fds.empty()) return true;
    const long long left = deadline - util::monotonic_ms();
    if (left <= 0) return false;
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::min(left, 60'000LL))) < 0 && errno != EINTR) return false;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) waiting[i]->ended = true;
    }
  }
}

bool never_target(unsigned pid, const Caller& caller) {
  if (pid <= 1 || pid == static_cast<unsigned>(caller.pid)) return true;
  return std::find(caller.ancestors.begin(), caller.ancestors.end(), pid) != caller.ancestors.end();
}

// The process to end for `holder` and its identity: itself, or for a defunct holder its parent,
// which must pass the rules the holder passed. nullopt with `why` when there is none.
std::optional<Target> root_target(const ProcessEvidence& e, const host::ProcessInfo& now, const ReaperConfig& config,
                                  const Caller& caller, const host::ProcReader& proc, std::string& why) {
  if (now.state != 'Z') return Target{*e.identity, "holder"};
  const unsigned parent = now.parent_pid.value_or(0);
  const auto info = proc.read(parent);
  if (parent <= 1 || never_target(parent, caller)) {
    why = fmt::format("defunct, and its parent is {} (init or reap's own): only a reboot or the driver frees it",
                      parent);
  } else if (auto rule = protected_by(info, config)) {
    why = "defunct, and its parent " + std::to_string(parent) + " is protected: " + *rule;
  } else if (!info.uid || !now.uid || *info.uid != *now.uid) {
    why = "defunct, and its parent " + std::to_string(parent) + " belongs to another user";
  } else if (auto identity = proc.identity(parent)) {
    return Target{*identity, "parent"};
  } else {
    why = "defunct, and its parent " + std::to_string(parent) + " has ended";
  }
  return std::nullopt;
}

// The root and its descendants of the same user (a child that changed user is not the holder's to
// lose), each identified now.
std::vector<Target> tree_of(const Target& root, const Caller& caller, const host::ProcReader& proc) {
  std::vector<Target> out{root};
  const auto owner = proc.read(root.identity.pid).uid;
  for (const unsigned pid : proc.descendants(root.identity.pid)) {
    if (never_target(pid, caller) || proc.read(pid).uid != owner || !owner) continue;
    if (auto identity = proc.identity(pid)) out.push_back({*identity, "descendant"});
  }
  return out;
}

// Whether the driver still lists `pid` on GPU `gpu`; nullopt when it cannot be asked.
std::optional<bool> still_listed(gpu::Backend& backend, unsigned gpu, unsigned pid) {
  auto snapshot = backend.snapshot(reap_snapshot_options());
  if (!snapshot.ok()) return std::nullopt;
  for (const auto& device : snapshot->devices) {
    if (device.id.index != gpu) continue;
    return std::any_of(device.processes.begin(), device.processes.end(), [&](const auto& p) { return p.pid == pid; });
  }
  return false;
}

// Asks the driver until `pid` no longer holds GPU `gpu`, for at most `wait_ms`.
bool wait_memory_freed(gpu::Backend& backend, unsigned gpu, unsigned pid, long long wait_ms, const util::Clock& clock) {
  const long long deadline = clock.monotonic_ms() + wait_ms;
  const std::atomic<bool> never{false};
  for (;;) {
    if (still_listed(backend, gpu, pid) == false) return true;
    if (clock.monotonic_ms() >= deadline) return false;
    clock.sleep_until(std::min(deadline, clock.monotonic_ms() + kFreePollMs), never);
  }
}

Outcome outcome_of(const KillResult& result, bool all_ended) {
  const bool any_sent = std::any_of(result.steps.begin(), result.steps.end(), [](const Step& s) { return s.sent; });
  if (!any_sent) {
    const bool failed = std::any_of(result.steps.begin(), result.steps.end(),
                                    [](const Step& s) { return !s.note.empty() && s.note != "it had already ended"; });
    return failed ? Outcome::Failed : Outcome::Gone;
  }
  if (!all_ended) return Outcome::Survived;
  return result.last_signal == SIGKILL ? Outcome::Killed : Outcome::Ended;
}

}  // namespace

bool end_targets(const std::vector<Target>& targets, const host::ProcReader& proc, long long grace_ms,
                 KillResult& result) {
  std::vector<Opened> opened;
  for (const auto& target : targets) {
    std::string why;
    auto pidfd = open_checked(target, proc, why);
    if (!pidfd) {
      result.steps.push_back({target.identity.pid, target.role, SIGTERM, false, why});
      continue;
    }
    opened.push_back({target, std::move(*pidfd), false});
  }
  bool ok = true;
  for (auto& o : opened) ok = send_checked(o, SIGTERM, proc, result) && ok;
  if (wait_all(opened, grace_ms)) return ok;
  for (auto& o : opened) {
    if (!o.ended) ok = send_checked(o, SIGKILL, proc, result) && ok;
  }
  return wait_all(opened, kAfterKillWaitMs) && ok;
}

KillResult reap_process(const ProcessEvidence& e, const ReaperConfig& config, const Caller& caller,
                        const host::ProcReader& proc, gpu::Backend& backend, const util::Clock& clock) {
  KillResult result;
  const unsigned pid = e.process.pid;
  const auto identity = e.identity ? proc.identity(pid) : std::nullopt;
  if (!e.identity || !identity) {
    result.outcome = Outcome::Gone;
    result.message = "it had ended before the first signal";
    return result;
  }
  if (*identity != *e.identity) {
    result.outcome = Outcome::IdentityChanged;
    result.message = fmt::format("pid {} names another process now: nothing sent", pid);
    return result;
  }
  const auto now = proc.read(pid);
  if (now.state == 'D') {
    result.outcome = Outcome::Uninterruptible;
    result.message = "in uninterruptible sleep (D): left alone, a signal would not reach it";
    return result;
  }
  std::string why;
  const auto root = root_target(e, now, config, caller, proc, why);
  if (!root) {
    result.outcome = Outcome::Refused;
    result.message = why;
    return result;
  }
  const long long start = clock.monotonic_ms();
  // A defunct holder's parent is ended alone: its other children are not the holder's (they may be
  // the rest of a user's session), and once the parent is gone init reaps the holder.
  const auto targets = root->role == "parent" ? std::vector<Target>{*root} : tree_of(*root, caller, proc);
  const bool all_ended = end_targets(targets, proc, config.grace_ms, result);
  result.outcome = outcome_of(result, all_ended);
  if (result.outcome == Outcome::Ended || result.outcome == Outcome::Killed || result.outcome == Outcome::Survived) {
    result.memory_freed = wait_memory_freed(backend, e.gpu, pid, config.free_wait_ms, clock);
    if (*result.memory_freed) result.freed_bytes = e.process.used_mem_bytes;
  }
  result.took_ms = clock.monotonic_ms() - start;
  if (result.message.empty() && result.memory_freed == false) {
    result.message = fmt::format("the driver still lists pid {} after {}", pid, util::format_duration_ms(config.free_wait_ms));
  }
  return result;
}

const char* to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::Ended: return "ended";
    case Outcome::Killed: return "killed";
    case Outcome::Gone: return "gone";
    case Outcome::IdentityChanged: return "identity-changed";
    case Outcome::Uninterruptible: return "uninterruptible";
    case Outcome::Refused: return "refused";
    case Outcome::Survived: return "survived";
    case Outcome::Failed: return "failed";
  }
  return "failed";
}

}  // namespace tarmac::reap
