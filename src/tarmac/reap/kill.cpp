#include "tarmac/reap/kill.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string_view>
#include <fmt/format.h>
#include <functional>
#include <set>

#include "tarmac/reap/gather.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::reap {
namespace {

constexpr long long kAfterKillWaitMs = 5000;  // SIGKILL ends a process at once unless the kernel holds it
constexpr long long kFreePollMs = 200;
constexpr std::size_t kMaxTree = 4096;  // a holder with more descendants is refused, not half-ended
constexpr const char* kAlreadyEnded = "it had already ended";
constexpr const char* kOtherProcess = "its pid names another process now";
constexpr const char* kChangedHands = "its pid changed hands while its facts were read";

// A process of the tree that is to be signalled, fixed when it was chosen.
struct Target {
  host::ProcessIdentity identity;
  std::string role;
};

// A process held through a pidfd, with the facts read while its identity held still.
struct Held {
  Target target;
  util::Fd pidfd;
  host::ProcessInfo facts;
  bool ended = false;
};

// C2 of the review: the identity first (a pidfd, then the identity read after it: only then is a
// match about the pidfd's process), then the facts, then the identity again, so that no fact read
// belongs to a process that took the pid meanwhile. `expected`: the identity it must have.
std::optional<Held> hold(unsigned pid, const std::optional<host::ProcessIdentity>& expected, std::string role,
                         const host::ProcReader& proc, std::string& why) {
  auto pidfd = util::open_pidfd(static_cast<pid_t>(pid));
  if (!pidfd.ok()) {
    why = pidfd.error().code == Error::Code::NotFound ? kAlreadyEnded : pidfd.error().message;
    return std::nullopt;
  }
  const auto before = proc.identity(pid);
  if (!before) {
    // Gone, or its stat unreadable (out of descriptors, say) while it lives: the pidfd tells which.
    why = util::pidfd_ended(*pidfd, 0) ? kAlreadyEnded : "its identity could not be read";
    return std::nullopt;
  }
  if (expected && *before != *expected) {
    why = kOtherProcess;
    return std::nullopt;
  }
  auto facts = proc.read(pid);
  if (proc.identity(pid) != before) {
    why = kChangedHands;
    return std::nullopt;
  }
  return Held{Target{*before, std::move(role)}, std::move(*pidfd), std::move(facts), false};
}

// Whether `h` is still the process chosen: its pidfd says it lives (so its pid cannot have been
// reused) and the pid's identity is the one fixed.
bool still_same(const Held& h, const host::ProcReader& proc) {
  return !util::pidfd_ended(h.pidfd, 0) && proc.identity(h.target.identity.pid) == h.target.identity;
}

// Sends `sig` to `h` unless it has ended or is no longer the process chosen. False when a signal
// that should have gone out could not be sent.
bool send_checked(Held& h, int sig, const host::ProcReader& proc, KillResult& result) {
  Step step{h.target.identity.pid, h.target.role, sig, false, {}};
  bool ok = true;
  if (util::pidfd_ended(h.pidfd, 0)) {
    h.ended = true;
    step.note = kAlreadyEnded;
  } else if (proc.identity(h.target.identity.pid) != h.target.identity) {
    step.note = "its identity changed: not signalled";  // cannot happen with a live pidfd: kept as a guard
  } else if (auto sent = util::signal_pidfd(h.pidfd, sig); !sent.ok()) {
    ok = sent.error().code == Error::Code::NotFound;
    step.note = ok ? kAlreadyEnded : sent.error().message;
  } else {
    step.sent = true;
    // The strongest sent: SIGKILL once it went out (its number is the smaller one).
    if (result.last_signal != SIGKILL) result.last_signal = sig;
  }
  result.steps.push_back(std::move(step));
  return ok;
}

// Waits up to `timeout_ms` for every target not yet ended; true when all have.
bool wait_all(std::vector<Held>& held, long long timeout_ms) {
  const long long deadline = util::monotonic_ms() + std::max(0LL, timeout_ms);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Held*> waiting;
    for (auto& h : held) {
      if (h.ended) continue;
      fds.push_back({h.pidfd.get(), POLLIN, 0});
      waiting.push_back(&h);
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

enum class Ending { AllEnded, SomeLeft, Stopped };

// SIGTERM to every one of `held`, the grace, SIGKILL to what is left unless `stop_before_kill` says
// otherwise (the kill switch appeared during the grace). `ok` turns false when a signal failed.
Ending signal_all(std::vector<Held>& held, const host::ProcReader& proc, long long grace_ms, KillResult& result,
                  const std::function<bool()>& stop_before_kill, bool& ok) {
  for (auto& h : held) ok = send_checked(h, SIGTERM, proc, result) && ok;
  if (wait_all(held, grace_ms)) return Ending::AllEnded;
  if (stop_before_kill && stop_before_kill()) {
    for (const auto& h : held) {
      if (!h.ended) result.steps.push_back({h.target.identity.pid, h.target.role, SIGKILL, false, "the kill switch appeared: not sent"});
    }
    return Ending::Stopped;
  }
  for (auto& h : held) {
    if (!h.ended) ok = send_checked(h, SIGKILL, proc, result) && ok;
  }
  return wait_all(held, kAfterKillWaitMs) ? Ending::AllEnded : Ending::SomeLeft;
}

bool never_target(unsigned pid, const Caller& caller) {
  if (pid <= 1 || pid == static_cast<unsigned>(caller.pid)) return true;
  return std::find(caller.ancestors.begin(), caller.ancestors.end(), pid) != caller.ancestors.end();
}

// Why descendant `d` must not be ended, which refuses the whole candidate (never half a tree): the
// rules that protect a holder protect its descendants too. nullopt when it may be ended.
std::optional<std::string> forbidden(const Held& d, const ReaperConfig& config, const Caller& caller,
                                     const std::vector<JobLease>& leases, const host::ProcReader& proc) {
  const unsigned pid = d.target.identity.pid;
  const std::string who = fmt::format("its descendant {} ({})", pid, d.facts.name.value_or("?"));
  if (never_target(pid, caller)) return who + " is reap itself or runs it";
  if (auto rule = protected_by(d.facts, config)) return who + " is protected: " + *rule;
  const auto job = tarmac_job_of(proc, pid, leases);
  if (!job.ok()) return who + ": " + job.error().message;
  if (*job) return who + " is in tarmac job " + **job;
  if (caller.slurm_manages_node && d.facts.slurm_job_id) return who + " is in Slurm job " + *d.facts.slurm_job_id;
  return std::nullopt;
}

// The tree to end: `root` and its descendants of the same user (a child that changed user is not
// the holder's to lose: left out, with a step that says so), each held (C2) and still a
// descendant when held. `refused` says why nothing may be sent; the root's pidfd and identity are
// checked again after the scan.
std::vector<Held> tree_of(Held root, const ReaperConfig& config, const Caller& caller,
                          const std::vector<JobLease>& leases, const host::ProcReader& proc, KillResult& result,
                          std::string& refused) {
  std::vector<Held> out;
  const auto owner = root.facts.uid;
  std::set<unsigned> members{root.target.identity.pid};
  out.push_back(std::move(root));
  const auto descendants = proc.descendants(out[0].target.identity.pid);
  if (descendants.size() > kMaxTree) {
    refused = fmt::format("it has {} descendants, more than the {} a pass ends", descendants.size(), kMaxTree);
    return {};
  }
  for (const unsigned pid : descendants) {
    std::string why;
    auto d = hold(pid, std::nullopt, "descendant", proc, why);
    if (!d) {
      if (why == kAlreadyEnded) continue;
      // L1 of the third review: one that cannot be held (pidfd_open out of descriptors in a large
      // tree, say) never meets forbidden(), so the tree is not ended around it.
      refused = fmt::format("its descendant {} cannot be held ({})", pid, why);
      return {};
    }
    // Its parent, read after its pidfd: a process that left the tree meanwhile is not the holder's.
    if (!d->facts.parent_pid || members.count(*d->facts.parent_pid) == 0) continue;
    if (!owner || d->facts.uid != owner) {
      result.steps.push_back({pid, "descendant", SIGTERM, false, "another user's: not the holder's to end"});
      continue;
    }
    if (auto no = forbidden(*d, config, caller, leases, proc)) {
      refused = *no;
      return {};
    }
    members.insert(pid);
    out.push_back(std::move(*d));
  }
  // A descendant that ended or changed during the scan is not signalled (the root is checked last).
  for (std::size_t i = out.size(); i-- > 1;) {
    if (!still_same(out[i], proc)) out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return out;
}

// "the holder 123", "its descendant 456".
std::string who_is(const Held& member) {
  return fmt::format("{} {}", member.target.role == "holder" ? "the holder" : "its descendant", member.target.identity.pid);
}

// Why `member` (listed by the driver) refuses its tree by the survey's decision: N2 of
// the second review, a member the survey found busy, unknown, protected... is not ended because
// a fresh reading happens to say 0 %.
std::optional<std::string> surveyed_refusal(const Held& member, const SurveyDecisions& surveyed) {
  const std::string who = who_is(member);
  const auto decision = surveyed.find(member.target.identity.pid);
  if (decision == surveyed.end()) return who + " is listed by the driver but was not in the survey";
  if (decision->second != Reason::Candidate) return fmt::format("{} was {} in the survey", who, to_string(decision->second));
  return std::nullopt;
}

// Why the tree must not be ended because one of its processes is busy on a GPU, by one fresh
// snapshot: listed anywhere with a reading above 0 % or an unknown one, or with a survey decision
// other than "candidate" (or none), refuses the whole candidate. A member the survey decided
// otherwise refuses it too, listed now or not.
std::optional<std::string> busy_member(const std::vector<Held>& tree, gpu::Backend& backend, const SurveyDecisions& surveyed) {
  for (const auto& member : tree) {
    const auto decision = surveyed.find(member.target.identity.pid);
    if (decision != surveyed.end() && decision->second != Reason::Candidate) return surveyed_refusal(member, surveyed);
  }
  auto snapshot = backend.snapshot(reap_snapshot_options());
  if (!snapshot.ok()) return "the driver could not say whether its tree is busy: " + snapshot.error().message;
  for (const auto& device : snapshot->devices) {
    if (device.lost) continue;
    for (const auto& p : device.processes) {
      const auto member = std::find_if(tree.begin(), tree.end(), [&](const Held& h) { return h.target.identity.pid == p.pid; });
      if (member == tree.end()) continue;
      if (auto refusal = surveyed_refusal(*member, surveyed)) return refusal;
      const auto reading = observe(device, p, 0).sm_util_pct;
      if (reading == 0U) continue;
      const std::string who = who_is(*member);
      return reading ? fmt::format("{} is busy on GPU {} ({} %)", who, device.id.index, *reading)
                     : fmt::format("{} is listed on GPU {} with an unknown utilization", who, device.id.index);
    }
  }
  return std::nullopt;
}

// C1 of the review, right before the first signal: the holder has this GPU's device file open now.
std::optional<std::string> not_holding_now(const ProcessEvidence& e, const host::ProcReader& proc) {
  if (!e.device_file) return std::string("the GPU's device file cannot be told (MIG mode, or no minor number)");
  const auto holding = proc.holds_device(e.process.pid, *e.device_file);
  if (holding == host::Holding::Holds) return std::nullopt;
  return fmt::format("pid {} {} the GPU's device file ({}:{}) open now", e.process.pid,
                     holding == host::Holding::NotHeld ? "does not have" : "could not be proven to have",
                     e.device_file->major, e.device_file->minor);
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

Outcome outcome_of(const KillResult& result, Ending ending) {
  const bool any_sent = std::any_of(result.steps.begin(), result.steps.end(), [](const Step& s) { return s.sent; });
  if (!any_sent) {
    const bool failed = std::any_of(result.steps.begin(), result.steps.end(),
                                    [](const Step& s) { return !s.note.empty() && s.note != kAlreadyEnded; });
    return failed ? Outcome::Failed : Outcome::Gone;
  }
  if (ending == Ending::Stopped) return Outcome::Stopped;
  if (ending == Ending::SomeLeft) return Outcome::Survived;
  return result.last_signal == SIGKILL ? Outcome::Killed : Outcome::Ended;
}

KillResult stop_with(Outcome outcome, std::string message) {
  KillResult result;
  result.outcome = outcome;
  result.message = std::move(message);
  return result;
}

// The holder, held (C2), or the result that ends the attempt before any signal.
std::optional<Held> hold_holder(const ProcessEvidence& e, const host::ProcReader& proc, KillResult& stopped) {
  const unsigned pid = e.process.pid;
  std::string why;
  auto root = e.identity ? hold(pid, e.identity, "holder", proc, why) : std::nullopt;
  if (!root) {
    if (why == kOtherProcess || why == kChangedHands) {
      stopped = stop_with(Outcome::IdentityChanged, fmt::format("pid {} names another process now: nothing sent", pid));
    } else if (why == kAlreadyEnded || !e.identity) {
      stopped = stop_with(Outcome::Gone, "it had ended before the first signal");
    } else {
      stopped = stop_with(Outcome::Failed, "it could not be held: " + why);  // nothing was sent
    }
    return std::nullopt;
  }
  if (root->facts.state == 'D') {
    stopped = stop_with(Outcome::Uninterruptible, "in uninterruptible sleep (D): left alone, a signal would not reach it");
    return std::nullopt;
  }
  if (root->facts.state == 'Z' && proc.live_threads(pid).value_or(0) == 0) {
    // H3 of the review: a true zombie holds no GPU memory; whatever holds it is another process
    // (a child that inherited the device file), and the zombie's parent is nobody's to end.
    stopped = stop_with(Outcome::Refused, "defunct (Z) with no live thread: a zombie holds no GPU memory; look for the "
                                          "real holder by its device files (hidden holders, `fuser -v /dev/nvidia*`)");
    return std::nullopt;
  }
  if (util::pidfd_ended(root->pidfd, 0)) {
    stopped = stop_with(Outcome::Gone, "it had ended before the first signal");
    return std::nullopt;
  }
  return root;
}

// The checks after the tree is held and right before the first signal; why nothing may be sent.
std::optional<std::string> last_checks(const ProcessEvidence& e, const std::vector<Held>& tree, const ReaperConfig& config,
                                       const host::ProcReader& proc, gpu::Backend& backend,
                                       const SurveyDecisions& surveyed) {
  if (auto busy = busy_member(tree, backend, surveyed)) return busy;
  if (auto not_holding = not_holding_now(e, proc)) return not_holding;
  if (!still_same(tree.front(), proc)) return std::string("the holder ended or changed while its tree was read");
  if (kill_switch_on(config.kill_switch)) return "the kill switch " + config.kill_switch + " appeared";
  return std::nullopt;
}

}  // namespace

bool kill_switch_on(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::lstat(path.c_str(), &st) == 0;
}

bool wait_memory_freed(gpu::Backend& backend, unsigned gpu, unsigned pid, long long wait_ms, const util::Clock& clock) {
  const long long deadline = clock.monotonic_ms() + wait_ms;
  const std::atomic<bool> never{false};
  for (;;) {
    if (still_listed(backend, gpu, pid) == false) return true;
    if (clock.monotonic_ms() >= deadline) return false;
    clock.sleep_until(std::min(deadline, clock.monotonic_ms() + kFreePollMs), never);
  }
}

KillResult reap_process(const ProcessEvidence& e, const ReaperConfig& config, const Caller& caller,
                        const host::ProcReader& proc, gpu::Backend& backend, const util::Clock& clock,
                        const SurveyDecisions& surveyed, const std::vector<JobLease>& leases) {
  KillResult result;
  auto root = hold_holder(e, proc, result);
  if (!root) return result;
  std::string refused;
  auto tree = tree_of(std::move(*root), config, caller, leases, proc, result, refused);
  if (refused.empty() && tree.empty()) refused = "the holder could not be held";
  if (refused.empty()) refused = last_checks(e, tree, config, proc, backend, surveyed).value_or("");
  if (!refused.empty()) {
    result.outcome = Outcome::Refused;
    result.message = refused + ": nothing sent";
    return result;
  }
  const long long start = clock.monotonic_ms();
  bool ok = true;
  const Ending ending = signal_all(tree, proc, config.grace_ms, result,
                                   [&] { return kill_switch_on(config.kill_switch); }, ok);
  // A signal that failed leaves a process that may still run: reported as surviving.
  result.outcome = outcome_of(result, ending == Ending::AllEnded && !ok ? Ending::SomeLeft : ending);
  if (ending == Ending::Stopped) {
    result.message = "the kill switch " + config.kill_switch + " appeared during the grace: no SIGKILL sent";
  }
  if (result.outcome == Outcome::Ended || result.outcome == Outcome::Killed || result.outcome == Outcome::Survived) {
    result.memory_freed = wait_memory_freed(backend, e.gpu, e.process.pid, config.free_wait_ms, clock);
    if (*result.memory_freed) result.freed_bytes = e.process.used_mem_bytes;
  }
  result.took_ms = clock.monotonic_ms() - start;
  if (result.message.empty() && result.memory_freed == false) {
    result.message = fmt::format("the driver still lists pid {} after {}", e.process.pid,
                                 util::format_duration_ms(config.free_wait_ms));
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
    case Outcome::Stopped: return "stopped";
  }
  return "failed";
}

}  // namespace tarmac::reap
