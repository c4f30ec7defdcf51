#include "tarmac/cli/reap_command.hpp"

#include <CLI/CLI.hpp>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <memory>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/store_access.hpp"
#include "tarmac/reap/test_device.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

namespace {

using detail::ReapFlags;
using detail::ReapReport;
using detail::ReapRow;
using detail::ReapSettings;

constexpr long long kMaxWindowMs = 60LL * 60 * 1000;  // an explicit --window: at most an hour

Result<long long> duration_flag(const std::string& text, const char* flag, long long fallback) {
  if (text.empty()) return fallback;
  const auto ms = util::parse_duration_ms(text);
  if (!ms) return make_error(Error::Code::Invalid, fmt::format("reap {} {}: expected a duration like 30s or 10m", flag, text));
  return *ms;
}

using reap::signal_name;

std::string who(const reap::ProcessEvidence& e) {
  const auto& h = e.process.host;
  return fmt::format("pid {} ({}, {})", e.process.pid, h.user.value_or("?"), h.name.value_or("?"));
}

void log_action(const ReapRow& row) {
  const auto& a = *row.action;
  fmt::print(stderr, "tarmac: reap: {} on GPU {}: {}{}{}\n", util::terminal_text(who(row.evidence)), row.evidence.gpu,
             reap::to_string(a.outcome), a.last_signal != 0 ? " after " + signal_name(a.last_signal) : std::string(),
             a.message.empty() ? std::string() : " (" + util::terminal_text(a.message) + ")");
}

int run_reap(const GlobalOptions& global, const ReapFlags& flags) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return kExitUsage;
  auto settings = detail::reap_settings(flags, loaded->config.reaper);
  if (!settings.ok()) {
    print_error(settings.error());
    return kExitUsage;
  }
  const host::ProcReader proc("/proc", reap::test_device_path());
  if (settings->kill && proc.in_host_pid_namespace() != true) {
    print_error(make_error(Error::Code::Invalid,
                           "reap --kill: tarmac runs outside the host's PID namespace (a container without --pid=host), "
                           "so the pids the driver reports are not the processes it would signal; nothing was done. "
                           "Run it on the host, or in a container started with --pid=host"));
    return kExitUsage;
  }
  auto device_file = reap::test_device_file();
  if (!device_file.ok()) {
    print_error(device_file.error());
    return kExitUsage;
  }
  settings->gather.device_file_override = *device_file;
  const std::string lock_dir = sched::lock_dir(loaded->config.scheduler_lock_dir);
  if (auto missing = detail::missing_lock_dir_refusal(lock_dir, settings->kill)) {
    print_error(make_error(Error::Code::NotFound, *missing));
    return kExitCouldNotLook;
  }
  auto leases = detail::job_leases(lock_dir, loaded->config.scheduler.max_hold_ms);
  if (!leases.ok()) {
    print_error(make_error(leases.error().code, "reap: cannot read the scheduler's leases, so tarmac jobs cannot be "
                                                "told apart: " + leases.error().message));
    if (settings->kill) return kExitCouldNotLook;
  } else {
    settings->gather.leases = std::move(*leases);
  }
  settings->gather.store_path = detail::reap_store_path(loaded->config, flags.db, ::geteuid());
  reap::Caller caller = reap::caller_of(proc);
  caller.intent = settings->kill ? reap::Intent::Kill : reap::Intent::Report;
  if (auto refusal = detail::storeless_kill_refusal(caller, *settings->gather.store_path)) {
    print_error(make_error(Error::Code::NotFound, *refusal));
    return kExitUsage;
  }
  auto backend = open_backend(global);
  if (!backend.ok()) return kExitCouldNotLook;
  const util::SystemClock clock;
  auto surveyed = reap::survey(**backend, proc, settings->gather, settings->rules, caller, clock);
  if (!surveyed.ok()) {
    print_error(surveyed.error());
    return kExitCouldNotLook;
  }
  ReapReport& report = *surveyed;
  report.kill = settings->kill;
  if (report.kill) {
    reap::kill_candidates(report, caller, proc, **backend, clock, log_action);
    if (auto recorded = reap::record_events(*settings->gather.store_path, report, caller.uid); !recorded.ok()) {
      fmt::print(stderr, "tarmac: reap: could not record the events in {}: {}\n",
                 util::terminal_text(*settings->gather.store_path), util::terminal_text(recorded.error().message));
    }
  }
  if (global.json) {
    fmt::print("{}\n", util::json_text(detail::report_json(report), 2));
  } else {
    fmt::print("{}", detail::report_text(report));
  }
  return detail::reap_exit_code(report);
}

std::string holder_facts(const reap::ProcessEvidence& e) {
  const auto& h = e.process.host;
  std::vector<std::string> facts;
  if (e.age_ms) facts.push_back("started " + util::format_age(*e.age_ms / 1000) + " ago");
  if (e.tty) facts.push_back("tty " + *e.tty);
  if (h.parent_pid) facts.push_back(fmt::format("parent {}", *h.parent_pid));
  if (!e.children.empty()) facts.push_back(fmt::format("children {}", fmt::join(e.children, " ")));
  if (h.container) facts.push_back("container " + h.container->runtime + " " + h.container->id.substr(0, 12));
  if (h.slurm_job_id) facts.push_back("Slurm job " + *h.slurm_job_id);
  if (e.tarmac_job) facts.push_back("tarmac job " + *e.tarmac_job);
  for (const auto& hidden : e.hidden) {
    facts.push_back(fmt::format("also held by {} ({}, {})", hidden.pid, hidden.name.value_or("?"),
                                reap::to_string(hidden.relation)));
  }
  std::string out;
  for (const auto& f : facts) out += (out.empty() ? "" : ", ") + f;
  return out;
}

std::string action_text(const ReapRow& row) {
  if (!row.left_because.empty()) return "not ended: " + row.left_because;
  if (!row.action) return {};
  const auto& a = *row.action;
  std::string out = reap::to_string(a.outcome);
  if (a.last_signal != 0) out += " after " + signal_name(a.last_signal);
  if (a.memory_freed == true) {
    out += fmt::format(": {} free after {}", a.freed_bytes ? util::format_bytes(*a.freed_bytes) : std::string("memory"),
                       util::format_duration_ms(a.took_ms));
  } else if (a.memory_freed == false) {
    out += ": its memory was NOT freed";
  }
  if (!a.message.empty()) out += " (" + a.message + ")";
  return out;
}

nlohmann::json optional_json(const auto& value) {
  if (!value) return nullptr;
  return *value;
}

nlohmann::json evidence_json(const reap::ProcessEvidence& e, long long time_unix_ms) {
  const auto& h = e.process.host;
  nlohmann::json j;
  j["gpu"] = e.gpu;
  j["gpu_uuid"] = optional_json(e.gpu_uuid);
  j["pid"] = e.process.pid;
  j["user"] = optional_json(h.user);
  j["uid"] = optional_json(h.uid);
  j["name"] = optional_json(h.name);
  j["command"] = optional_json(h.command_line);
  j["state"] = h.state ? nlohmann::json(std::string(1, *h.state)) : nlohmann::json(nullptr);
  j["start_time_unix"] = optional_json(h.start_time_unix);
  j["age_ms"] = optional_json(e.age_ms);
  j["tty"] = optional_json(e.tty);
  j["parent_pid"] = optional_json(h.parent_pid);
  j["children"] = e.children;
  j["container"] = h.container ? nlohmann::json{{"runtime", h.container->runtime}, {"id", h.container->id},
                                                {"pod_uid", optional_json(h.container->pod_uid)}}
                               : nlohmann::json(nullptr);
  j["slurm_job"] = optional_json(h.slurm_job_id);
  j["tarmac_job"] = optional_json(e.tarmac_job);
  j["mem_used_bytes"] = optional_json(e.process.used_mem_bytes);
  j["hidden_holders"] = nlohmann::json::array();
  for (const auto& hidden : e.hidden) {
    j["hidden_holders"].push_back({{"pid", hidden.pid}, {"name", optional_json(hidden.name)},
                                   {"relation", reap::to_string(hidden.relation)}, {"devices", hidden.devices}});
  }
  const auto& hist = e.history;
  j["sm_util_pct"] = optional_json(hist.last_util_pct);
  j["util_source"] = reap::to_string(hist.last_source);
  j["observed_ms"] = hist.empty() ? 0 : hist.observed_ms();
  j["idle_ms"] = hist.idle_ms();
  // The history's times are the watch's own clock: shown as wall time by their distance from the end.
  j["idle_since_unix_ms"] =
      hist.idle_since_ms ? nlohmann::json(time_unix_ms - (hist.observed_until_ms - *hist.idle_since_ms)) : nlohmann::json(nullptr);
  j["history"] = nlohmann::json::array();
  for (const auto& o : hist.recent) {
    j["history"].push_back({{"ago_ms", hist.observed_until_ms - o.ts_ms}, {"sm_util_pct", optional_json(o.sm_util_pct)},
                            {"source", reap::to_string(o.source)}});
  }
  return j;
}

nlohmann::json action_json(const ReapRow& row) {
  if (!row.action) return row.left_because.empty() ? nlohmann::json(nullptr) : nlohmann::json{{"outcome", "left"}, {"message", row.left_because}};
  const auto& a = *row.action;
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : a.steps) {
    steps.push_back({{"pid", s.pid}, {"role", s.role}, {"signal", signal_name(s.signal)}, {"sent", s.sent}, {"note", s.note}});
  }
  return {{"outcome", reap::to_string(a.outcome)},
          {"signal", a.last_signal != 0 ? nlohmann::json(signal_name(a.last_signal)) : nlohmann::json(nullptr)},
          {"steps", steps},
          {"memory_freed", optional_json(a.memory_freed)},
          {"freed_bytes", optional_json(a.freed_bytes)},
          {"took_ms", a.took_ms},
          {"message", a.message}};
}

}  // namespace

namespace detail {

std::string reap_store_path(const config::Config& config, const std::string& db_flag, uid_t euid) {
  if (!db_flag.empty() || euid != 0) return store_path(config, db_flag);
  return store::database_path(config.agent.state_dir.empty() ? std::string("/var/lib/tarmac") : config.agent.state_dir);
}

std::optional<std::string> storeless_kill_refusal(const reap::Caller& caller, const std::string& store_path) {
  if (caller.intent != reap::Intent::Kill || !caller.is_root()) return std::nullopt;
  if (::access(store_path.c_str(), R_OK) == 0) return std::nullopt;
  return "reap --kill as root acts on the agent's recorded evidence only, and there is no agent store at " +
         store_path + " (" + std::strerror(errno) + "); nothing was done. A watch cannot tie the driver's " +
         "listing of a pid to the process that has the pid now (docs/reap.md, \"Safety checks\"): run the " +
         "agent (`tarmac agent`, or reaper.enabled = true in it), or name its store with --db. The dry run " +
         "watches and shows what it would end";
}

std::optional<std::string> missing_lock_dir_refusal(const std::string& dir, bool kill) {
  std::error_code ec;
  if (!kill || std::filesystem::is_directory(dir, ec)) return std::nullopt;
  const bool under_tmp = dir == "/tmp" || dir.starts_with("/tmp/") || dir == "/var/tmp" || dir.starts_with("/var/tmp/");
  if (!under_tmp) return std::nullopt;
  return "reap --kill: the scheduler's lock directory " + dir + " does not exist, and under /tmp that can mean a "
         "private /tmp hides it, not that there are no tarmac jobs; nothing was done. Set scheduler.lock_dir outside "
         "/tmp (the default is /run/tarmac/locks)";
}

Result<std::vector<reap::JobLease>> job_leases(const std::string& dir, long long max_hold_ms) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return std::vector<reap::JobLease>{};
  TARMAC_TRY_ASSIGN(auto leases_dir, sched::LeaseDir::open(dir, max_hold_ms));
  TARMAC_TRY_ASSIGN(const auto leases, leases_dir.live_leases(util::wall_ms(), sched::LeaseDir::StaleFiles::Keep));
  std::vector<reap::JobLease> out;
  for (const auto& lease : leases) out.push_back({lease.job_id, static_cast<unsigned>(std::max(lease.pid, 0))});
  return out;
}

Result<ReapSettings> reap_settings(const ReapFlags& flags, const reap::ReaperConfig& configured) {
  ReapSettings s;
  s.rules = configured;
  s.kill = flags.kill;
  TARMAC_TRY_ASSIGN(s.rules.idle_for_ms, duration_flag(flags.idle_for, "--idle-for", configured.idle_for_ms));
  TARMAC_TRY_ASSIGN(s.rules.grace_ms, duration_flag(flags.grace, "--grace", configured.grace_ms));
  if (s.rules.grace_ms > kMaxWindowMs) {
    return make_error(Error::Code::Invalid, "reap --grace: at most 1h (a holder gets SIGKILL within that bound)");
  }
  TARMAC_TRY_ASSIGN(s.gather.window_ms,
                    duration_flag(flags.window, "--window", std::min(s.rules.idle_for_ms, configured.window_cap_ms)));
  if (s.gather.window_ms > kMaxWindowMs) return make_error(Error::Code::Invalid, "reap --window: at most 1h");
  if (!flags.min_memory.empty()) {
    const auto bytes = util::parse_size_bytes(flags.min_memory);
    if (!bytes) {
      return make_error(Error::Code::Invalid,
                        fmt::format("reap --min-memory {}: expected a size like 512MiB or 2GiB", flags.min_memory));
    }
    s.rules.min_memory_bytes = *bytes;
  }
  if (!flags.gpus.empty()) {
    auto gpus = parse_gpu_list(flags.gpus);
    if (!gpus.ok()) return make_error(Error::Code::Invalid, fmt::format("reap --gpu {}: expected GPU indices like 0,2", flags.gpus));
    s.gather.gpus = std::move(*gpus);
  }
  if (!flags.user.empty()) s.gather.user = flags.user;
  s.gather.idle_for_ms = s.rules.idle_for_ms;
  return s;
}

std::string report_text(const ReapReport& report) {
  std::string out;
  if (report.source == reap::EvidenceSource::Store) {
    out += fmt::format("evidence: {}\n", util::terminal_text(report.store_note));
  } else {
    out += fmt::format("evidence: watched {} ({})\n", util::format_duration_ms(report.watched_ms),
                       report.store_note.empty() ? std::string("no agent store looked for") : util::terminal_text(report.store_note));
  }
  std::size_t candidates = 0;
  for (const auto& row : report.rows) {
    const auto& e = row.evidence;
    const auto& h = e.process.host;
    const bool candidate = row.decision.reason == reap::Reason::Candidate;
    candidates += candidate ? 1 : 0;
    out += fmt::format("GPU {}  pid {}  {}  {}  {}  {}: {}\n", e.gpu, e.process.pid, util::terminal_text(h.user.value_or("?")),
                       util::terminal_text(h.command_line && !h.command_line->empty() ? *h.command_line : h.name.value_or("?")),
                       e.process.used_mem_bytes ? util::format_bytes(*e.process.used_mem_bytes) : std::string("?"),
                       candidate ? "CANDIDATE" : reap::describe(row.decision.reason),
                       util::terminal_text(row.decision.detail));
    if (const auto facts = holder_facts(e); !facts.empty()) out += "    " + util::terminal_text(facts) + "\n";
    if (const auto action = action_text(row); !action.empty()) out += "    " + util::terminal_text(action) + "\n";
  }
  if (report.rows.empty()) out += "no GPU processes\n";
  if (candidates > 0 && !report.kill) {
    out += fmt::format("{} candidate{}; dry run: nothing was signalled (add --kill to end {})\n", candidates,
                       candidates == 1 ? "" : "s", candidates == 1 ? "it" : "them");
  } else if (candidates == 0 && !report.rows.empty()) {
    out += "no candidates\n";
  }
  return out;
}

nlohmann::json report_json(const ReapReport& report) {
  nlohmann::json j;
  j["schema"] = "tarmac.reap/1";
  j["time_unix_ms"] = report.time_unix_ms;
  j["mode"] = report.kill ? "kill" : "dry-run";
  j["evidence"] = {{"source", reap::to_string(report.source)}, {"watched_ms", report.watched_ms}, {"note", report.store_note}};
  j["rules"] = {{"idle_for_ms", report.rules.idle_for_ms},
                {"min_memory_bytes", report.rules.min_memory_bytes},
                {"grace_ms", report.rules.grace_ms},
                {"min_age_ms", report.rules.min_age_ms},
                {"max_kills", report.rules.max_kills},
                {"kill_switch", report.rules.kill_switch},
                {"kill_switch_present", report.kill_switch_present}};
  j["processes"] = nlohmann::json::array();
  for (const auto& row : report.rows) {
    auto p = evidence_json(row.evidence, report.time_unix_ms);
    p["decision"] = reap::to_string(row.decision.reason);
    p["why"] = row.decision.detail;
    p["action"] = action_json(row);
    j["processes"].push_back(std::move(p));
  }
  j["candidates"] = report.candidates();
  j["reaped"] = report.reaped();
  return j;
}

int reap_exit_code(const ReapReport& report) {
  for (const auto& row : report.rows) {
    if (row.decision.reason != reap::Reason::Candidate) continue;
    if (!row.action) return kExitProblems;
    const auto outcome = row.action->outcome;
    const bool done = outcome == reap::Outcome::Gone || row.action->memory_freed == true;
    if (!done) return kExitProblems;
  }
  return kExitOk;
}

}  // namespace detail

void add_reap_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "reap", "Find the processes that hold GPU memory without computing and, with --kill, end them safely "
              "(dry run by default; docs/reap.md). Exit 0: no candidate (or all ended and freed), 1: candidates left");
  auto flags = std::make_shared<ReapFlags>();
  cmd->add_option("--idle-for", flags->idle_for, "How long a process must hold memory at 0 % (default reaper.idle_for, 10m)");
  cmd->add_option("--min-memory", flags->min_memory, "The least memory a candidate holds, like 1GiB (default reaper.min_memory)");
  cmd->add_option("--gpu", flags->gpus, "Only these GPUs, like 0,2");
  cmd->add_option("--user", flags->user, "Only this user's processes (a name or a uid)");
  cmd->add_flag("--kill", flags->kill,
                "End the candidates: SIGTERM to each holder and its tree, SIGKILL after --grace, then wait for the "
                "driver to free the memory");
  cmd->add_option("--grace", flags->grace, "Time between SIGTERM and SIGKILL (default reaper.grace, 30s)");
  cmd->add_option("--window", flags->window,
                  "Without an agent's store: how long to watch (default --idle-for, at most 5m); reap never claims "
                  "more idle time than it saw");
  cmd->add_option("--db", flags->db, "The agent's store to take the history from (default: the agent's, docs/recorder.md)");
  cmd->callback([&global, &exit_code, flags] { exit_code = run_reap(global, *flags); });
}

}  // namespace tarmac::cli
