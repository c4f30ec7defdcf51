#include "tarmac/cli/run_command.hpp"

#include <CLI/CLI.hpp>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/jobs_command.hpp"
#include "tarmac/cli/pick_command.hpp"
#include "tarmac/sched/acquire.hpp"
#include "tarmac/sched/job.hpp"
#include "tarmac/sched/supervise.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

namespace {

constexpr int kCommandNotFound = 127;
constexpr long long kPollMs = 500;
constexpr int kLineMs = 5000;  // the rest of an event line, once its start has arrived
constexpr long long kForever = std::numeric_limits<long long>::max();  // no --wait

struct RunFlags {
  RequestFlags request;
  std::string time;
  std::string grace = "10s";
  std::string wait;
  std::string name;
  bool uuids = false;
  bool backfill = false;
  bool detach = false;
  std::vector<std::string> command;
};

using detail::RunLimits;
using nlohmann::json;
using sched::is_stop_signal;
using sched::monotonic_ms;
using sched::wait_signal;

std::string make_job_id() {
  return fmt::format("{}-{}-{}", util::host_name(), ::getpid(), now_unix_ms());
}

// The agentless run: lease N GPUs in the lock directory, run CMD here, supervise it.
int run_alone(const GlobalOptions& global, const RunFlags& flags, const sched::PickRequest& request,
              const RunLimits& limits, const std::string& path, const sigset_t& handled, const sigset_t& original) {
  auto dir = open_lease_dir(global);
  if (!dir.ok()) return dir.error().code == Error::Code::Invalid ? kExitUsage : kExitCouldNotLook;
  auto backend = open_backend(global);
  if (!backend.ok()) return kExitCouldNotLook;

  const std::string job_id = make_job_id();
  const auto self_start = sched::process_starttime(::getpid());
  const sched::Lease lease{.uuid = {}, .pid = ::getpid(), .starttime = self_start.value_or(0), .expires_unix_ms = 0,
                           .job_id = job_id, .user = current_user()};
  const long long wait_until = limits.wait_ms ? monotonic_ms() + *limits.wait_ms : kForever;
  bool announced = false;
  sched::Acquired acquired;
  for (;;) {
    auto got = sched::acquire(*dir, **backend, request, lease, now_unix_ms());
    if (!got.ok()) {
      print_error(got.error());
      return kExitCouldNotLook;
    }
    if (!request.mig && got->snapshot.devices.size() < request.n) {
      fmt::print(stderr, "tarmac run: -n {} asks for more GPUs than there are ({})\n", request.n,
                 got->snapshot.devices.size());
      return kExitUsage;
    }
    if (got->pick.ok()) {
      acquired = std::move(*got);
      break;
    }
    const long long now = monotonic_ms();
    if (now >= wait_until) {
      fmt::print(stderr, "tarmac: gave up waiting after {}: {}", util::format_duration_ms(*limits.wait_ms),
                 not_enough_message(*got, request.n));
      return kExitProblems;
    }
    if (!announced) {
      fmt::print(stderr, "tarmac: waiting for {}…\n", sched::wanted_text(request));
      announced = true;
    }
    const long long pause = std::min(kPollMs, wait_until - now);
    if (const int sig = wait_signal(handled, pause); is_stop_signal(sig)) return 128 + sig;
  }
  backend->reset();  // NVML is not needed while the job runs

  util::ProcessSpec spec;
  spec.path = path;
  spec.argv = flags.command;
  // A MIG device is named by its UUID, which PCI order does not order: no CUDA_DEVICE_ORDER then.
  spec.env = sched::job_environment(util::own_environment(), visible_devices(acquired, flags.uuids),
                                    flags.uuids || acquired.pick.mig_uuid.has_value(), job_id, flags.name);
  spec.take_terminal = sched::owns_terminal();
  const auto child = sched::spawn(spec, original);
  int status = 0;
  if (!child.ok()) {
    fmt::print(stderr, "tarmac: {}\n", child.error().message);
    status = sched::not_started_code(child.error()) << 8;
  } else {
    status = sched::supervise(child->pid, flags.command.front(), limits.job, handled);
  }
  if (spec.take_terminal) sched::give_terminal(::getpgrp());
  if (auto held = dir->lock(); held.ok()) dir->remove(acquired.uuids, job_id);
  // Otherwise the leases go stale with this process a moment later.
  return sched::shell_status(status);
}

// Waits for the agent's events about job `id` on `conn` (reconnecting with a "wait" request when
// the agent goes away) and returns the job's status. Stop signals cancel the job.
int follow_job(const std::string& socket, sched::Connection conn, long long id, const RunLimits& limits,
               const sigset_t& handled) {
  bool cancel_sent = false;
  bool lost_said = false;
  bool started = false;
  const long long wait_until = limits.wait_ms ? monotonic_ms() + *limits.wait_ms : kForever;
  const auto cancel = [&](const char* why) {
    if (cancel_sent) return;
    fmt::print(stderr, "tarmac: {}: cancelling job {}\n", why, id);
    auto answer = ask_agent(socket, json{{"op", "cancel"}, {"id", id}});
    cancel_sent = answer.ok() && answer->body.value("ok", false);
  };
  const auto ended = [id](const json& job) { return detail::ended_status(job, id, stderr); };
  for (;;) {
    if (const int sig = wait_signal(handled, 0); is_stop_signal(sig)) {
      if (cancel_sent) return 128 + sig;  // a second Ctrl-C: stop waiting (the job is being cancelled)
      cancel(strsignal(sig));
    }
    if (!started && monotonic_ms() >= wait_until) {
      cancel(fmt::format("not started after {}", util::format_duration_ms(*limits.wait_ms)).c_str());
    }
    if (conn.fd() < 0) {
      auto again = ask_agent(socket, json{{"op", "wait"}, {"id", id}});
      if (!again.ok()) {
        if (!lost_said) {
          fmt::print(stderr, "tarmac: lost the agent; waiting for it to come back (job {} keeps running)\n", id);
          lost_said = true;
        }
        (void)wait_signal(handled, 250);
        continue;
      }
      if (!again->body.value("ok", false)) {
        const std::string words = failure_text(again->body);
        fmt::print(stderr, "tarmac: {}\n", words.empty() ? std::string("the agent refused") : words);
        return kExitCouldNotLook;
      }
      const json& job = again->body["job"];
      const auto state = sched::job_state_from(job.value("state", std::string()));
      if (state && sched::has_ended(*state)) return ended(job);
      started = state == sched::JobState::Running || state == sched::JobState::Stopping;
      conn = std::move(again->conn);
      continue;
    }
    if (!conn.wait_readable(200)) continue;  // nothing yet: look at signals and --wait again
    auto line = conn.read_line(kLineMs);
    if (!line.ok()) {  // the agent went away (or sent half a line and stopped): reconnect
      conn = sched::Connection();
      continue;
    }
    const json event = json::parse(*line, nullptr, false);
    if (!event.is_object()) continue;
    const std::string kind = event.value("event", std::string());
    const json& job = event.contains("job") ? event["job"] : json::object();
    if (kind == "started") {
      started = true;
    } else if (kind == "requeued") {
      started = false;
      const auto reason = job.find("reason");
      const std::string why = reason != job.end() && reason->is_string() ? util::terminal_lines(reason->get<std::string>()) : "";
      fmt::print(stderr, "tarmac: job {}: {}\n", id, why.empty() ? "preempted; queued again" : why);
    } else if (kind == "ended") {
      return ended(job);
    }
  }
}

// The run through the agent: submit, then follow the job (or print its id with --detach).
int run_through_agent(const GlobalOptions& global, const std::string& socket, sched::Connection conn,
                      const RunFlags& flags, const sched::PickRequest& request, const RunLimits& limits,
                      const std::string& path, const sigset_t& handled) {
  char cwd[4096] = {};
  if (::getcwd(cwd, sizeof cwd - 1) == nullptr) std::strcpy(cwd, "/");
  // The queue carries a job as JSON text, and argv and environment must reach the job exactly:
  // bytes that are not UTF-8 (legal on Linux) are refused by name rather than replaced.
  const auto environment = util::own_environment();
  if (const auto bad = detail::first_non_utf8(flags.command, environment, cwd)) {
    fmt::print(stderr,
               "tarmac run: {} is not valid UTF-8 (shown escaped: {}); the agent's queue carries jobs as "
               "JSON text: pass such bytes through a script, or unset the variable\n",
               bad->first, util::terminal_text(bad->second));
    return kExitUsage;
  }
  json req = {{"op", "submit"},
              {"path", path},
              {"argv", flags.command},
              {"env", environment},
              {"cwd", cwd},
              {"n", request.n},
              {"min_free", request.min_free_bytes},
              {"max_util", request.max_util_pct},
              {"mig", request.mig ? json(*request.mig) : json(nullptr)},
              {"time_ms", limits.job.time_ms ? json(*limits.job.time_ms) : json(nullptr)},
              {"grace_ms", limits.job.grace_ms},
              {"name", flags.name},
              {"backfill", flags.backfill},
              {"uuids", flags.uuids},
              {"detach", flags.detach}};
  std::vector<int> fds;
  if (!flags.detach) fds = {STDOUT_FILENO, STDERR_FILENO};
  // Not util::json_text: a request carries argv and environment that must reach the job exactly,
  // so invalid UTF-8 in them is refused (nlohmann throws) rather than replaced. An agent that
  // refuses the connection (a cap) says why and closes, maybe before the request is sent: its line
  // is read even when sending failed.
  const auto sent = conn.send_line(req.dump(), fds);
  auto line = conn.read_line(sent.ok() ? 30000 : 0);
  if (!line.ok()) {
    fmt::print(stderr, "tarmac run: {}\n", (sent.ok() ? line.error() : sent.error()).message);
    return kExitCouldNotLook;
  }
  const json answer = json::parse(*line, nullptr, false);
  if (!answer.is_object() || !answer.value("ok", false)) {
    fmt::print(stderr, "tarmac run: {}\n", detail::refusal_text(answer, *line));
    return answer.is_object() ? exit_code_for(answer) : kExitCouldNotLook;
  }
  const json& job = answer["job"];
  const long long id = job.value("id", 0LL);
  if (flags.detach) {
    if (global.json) fmt::print("{}\n", util::json_text(job, 2));
    else fmt::print("{}\n", id);
    fmt::print(stderr, "tarmac: job {} queued; its output goes to {}\n", id, job.value("log", std::string("its log")));
    return kExitOk;
  }
  return follow_job(socket, std::move(conn), id, limits, handled);
}

int run_job(const GlobalOptions& global, const RunFlags& flags, const sigset_t& handled, const sigset_t& original) {
  auto request = parse_request(flags.request);
  if (!request.ok()) {
    fmt::print(stderr, "tarmac run: {}\n", request.error().message);
    return kExitUsage;
  }
  if (flags.backfill && request->mig) {
    fmt::print(stderr, "tarmac run: --backfill runs on whole idle GPUs, not on MIG devices: leave out one of them\n");
    return kExitUsage;
  }
  auto limits = detail::parse_limits(flags.time, flags.grace, flags.wait);
  if (!limits.ok()) {
    fmt::print(stderr, "tarmac run: {}\n", limits.error().message);
    return kExitUsage;
  }
  if (flags.command.empty()) {
    fmt::print(stderr, "tarmac run: no command: tarmac run [OPTIONS] -- CMD [ARGS...]\n");
    return kExitUsage;
  }
  const char* path_env = std::getenv("PATH");
  const auto path =
      util::resolve_command(flags.command.front(), path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin");
  if (!path) {
    fmt::print(stderr, "tarmac: {}: command not found\n", flags.command.front());
    return kCommandNotFound;
  }
  // execve needs the path as the agent's wrapper will see it: absolute.
  std::string absolute = *path;
  if (absolute.front() != '/') {
    char cwd[4096] = {};
    if (::getcwd(cwd, sizeof cwd - 1) != nullptr) absolute = std::string(cwd) + "/" + absolute;
  }
  const std::string socket = agent_socket(global);
  auto conn = sched::Connection::connect(socket);
  if (conn.ok()) return run_through_agent(global, socket, std::move(*conn), flags, *request, *limits, absolute, handled);
  if (flags.backfill || flags.detach) {
    fmt::print(stderr, "tarmac run: {} needs the agent, which owns the queue: {}\n",
               flags.backfill ? "--backfill" : "--detach", conn.error().message);
    return kExitCouldNotLook;
  }
  return run_alone(global, flags, *request, *limits, *path, handled, original);
}

}  // namespace

namespace detail {

Result<RunLimits> parse_limits(const std::string& time, const std::string& grace, const std::string& wait) {
  RunLimits limits;
  const auto duration = [](const std::string& flag, const std::string& text, bool allow_zero) -> Result<long long> {
    const auto ms = util::parse_duration_ms(text);
    if (!ms || *ms < 0 || (*ms == 0 && !allow_zero)) {
      return make_error(Error::Code::Invalid, fmt::format("{}: '{}' is not a duration (like 30s, 10m, 2h)", flag, text));
    }
    return *ms;
  };
  if (!time.empty()) {
    TARMAC_TRY_ASSIGN(limits.job.time_ms, duration("--time", time, false));
  }
  TARMAC_TRY_ASSIGN(limits.job.grace_ms, duration("--grace", grace, true));
  if (!wait.empty()) {
    TARMAC_TRY_ASSIGN(limits.wait_ms, duration("--wait", wait, true));
  }
  return limits;
}

std::optional<std::pair<std::string, std::string>> first_non_utf8(const std::vector<std::string>& argv,
                                                                  const std::vector<std::string>& env,
                                                                  const std::string& cwd) {
  const auto valid = [](const std::string& s) { return util::valid_utf8(s) == s; };
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (!valid(argv[i])) return std::pair{i == 0 ? std::string("the command") : fmt::format("argument {}", i), argv[i]};
  }
  for (const auto& entry : env) {
    if (!valid(entry)) {
      return std::pair{fmt::format("the environment variable {}", util::terminal_text(entry.substr(0, entry.find('=')))),
                       entry};
    }
  }
  if (!valid(cwd)) return std::pair{std::string("the working directory"), cwd};
  return std::nullopt;
}

std::string refusal_text(const json& answer, const std::string& line) {
  if (!answer.is_object()) return util::terminal_text(line);
  const std::string words = failure_text(answer);
  return words.empty() ? std::string("refused") : words;
}

int ended_status(const json& job, long long id, std::FILE* err) {
  const auto text = [&job](const char* key) {
    const auto it = job.find(key);
    return it != job.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const auto started = job.find("started_unix_ms");
  const bool never_started = started == job.end() || started->is_null();
  if (text("state") == "cancelled" && never_started) {
    fmt::print(err, "tarmac: job {} was cancelled before it started\n", id);
    return kExitProblems;
  }
  if (text("state") == "lost") {
    // The agent's reason may quote the job's own words.
    fmt::print(err, "tarmac: job {} was lost: {}\n", id, util::terminal_text(text("reason")));
    return kExitCouldNotLook;
  }
  return job_exit_status(job);
}

}  // namespace detail

void add_run_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<RunFlags>();
  auto* cmd = app.add_subcommand("run", "Run a command on N free GPUs: through the agent's queue when it runs, else "
                                        "alone with per-GPU leases: run [OPTIONS] -- CMD ARGS...");
  add_request_flags(*cmd, flags->request);
  cmd->add_option("--time", flags->time, "Wall-clock limit (like 2h): then SIGTERM, and SIGKILL after --grace");
  cmd->add_option("--grace", flags->grace, "Time between SIGTERM and SIGKILL (default 10s)");
  cmd->add_option("--name", flags->name, "A name for the job (TARMAC_JOB_NAME)");
  cmd->add_flag("--uuids", flags->uuids, "CUDA_VISIBLE_DEVICES as full GPU- UUIDs instead of PCI-ordered indices");
  cmd->add_flag("--backfill", flags->backfill,
                "Low priority: run only on GPUs idle for scheduler.backfill_idle, and give them back (SIGTERM, "
                "requeued) when a normal job needs them (needs the agent)");
  cmd->add_flag("--detach", flags->detach,
                "Queue the job, print its id and return; its output goes to a log file (needs the agent)");
  cmd->add_option("--wait", flags->wait,
                  "Give up (exit 1) when the job has not started after this long (default: wait forever)");
  cmd->add_option("command", flags->command, "The command and its arguments, after --");
  cmd->callback([&global, &exit_code, flags] {
    const sigset_t handled = sched::handled_signals();
    sigset_t original;
    ::sigprocmask(SIG_BLOCK, &handled, &original);
    // Descendants the command leaves behind come to run, so they can be waited for and reaped.
    (void)::prctl(PR_SET_CHILD_SUBREAPER, 1);
    exit_code = run_job(global, *flags, handled, original);
    ::sigprocmask(SIG_SETMASK, &original, nullptr);
  });
}

}  // namespace tarmac::cli
