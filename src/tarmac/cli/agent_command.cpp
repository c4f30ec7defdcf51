#include "tarmac/cli/agent_command.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <memory>

#include "tarmac/agent/agent.hpp"
#include "tarmac/agent/clock.hpp"
#include "tarmac/alerts/alerter.hpp"
#include "tarmac/sched/daemon.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/sched/wire.hpp"
#include "tarmac/serve/service.hpp"
#include "tarmac/cli/app.hpp"
#include "tarmac/store/private_files.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

namespace {

std::string agent_scheduler_socket(const config::Config& cfg) { return sched::socket_path(cfg.scheduler.socket); }

struct AgentFlags {
  std::string interval;
  std::string process_interval;
  std::string flush;
  std::string duration;
  std::string state_dir;
  std::string clock;
  std::optional<std::string> listen;
  std::optional<std::string> socket;
  bool check_config = false;
};

std::atomic<bool> g_stop{false};  // set by SIGTERM/SIGINT; the only global, as a signal handler needs

extern "C" void on_stop_signal(int) { g_stop.store(true); }

// Log lines: under systemd (JOURNAL_STREAM) with the kernel-style priority prefix journald reads,
// elsewhere with the time. Messages carry process and job names: control characters are shown
// escaped, so that a newline in a command line cannot forge a log line (with its own priority)
// and an escape sequence cannot reach the terminal of whoever reads the log.
void log_line(util::LogLevel level, const std::string& raw_message) {
  const std::string message = util::terminal_text(raw_message);
  const char* word = level == util::LogLevel::Info ? "info" : level == util::LogLevel::Warning ? "warning" : "error";
  if (std::getenv("JOURNAL_STREAM") != nullptr) {
    const int prio = level == util::LogLevel::Info ? 6 : level == util::LogLevel::Warning ? 4 : 3;
    fmt::print(stderr, "<{}>{}\n", prio, message);
  } else {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S%z", &tm);
    fmt::print(stderr, "{} tarmac agent: {}: {}\n", stamp, word, message);
  }
  std::fflush(stderr);
}

// Applies a duration flag over the configured value; false (with a message) when it is not one.
bool apply_duration(const std::string& text, const char* flag, long long min_ms, long long& target) {
  if (text.empty()) return true;
  auto ms = util::parse_duration_ms(text);
  if (!ms || *ms < min_ms) {
    fmt::print(stderr, "tarmac: {} {}: expected a duration of at least {}\n", flag, text,
               util::format_duration_ms(min_ms));
    return false;
  }
  target = *ms;
  return true;
}

// Holds an exclusive lock on <state_dir>/agent.lock for the process's lifetime: one agent per store.
class AgentLock {
 public:
  ~AgentLock() {
    if (fd_ >= 0) close(fd_);
  }
  // Fails when another agent holds it; a directory that cannot be written is not an error here
  // (the recorder warns and retries).
  Result<void> acquire(const std::string& dir) {
    // The directory and the store's file are made private before anything (the scheduler's job
    // table, the recorder) opens the store; failing here is the recorder's to report.
    (void)store::prepare_private_store(store::database_path(dir));
    const std::string path = dir + "/agent.lock";
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return {};
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const auto holder = util::read_file(path).value_or("");
      const auto pid = util::trim(holder);
      return make_error(Error::Code::Invalid, fmt::format("another tarmac agent{} already records to {}",
                                                          pid.empty() ? "" : fmt::format(" (pid {})", pid), dir));
    }
    if (ftruncate(fd_, 0) == 0) {
      const std::string pid = std::to_string(getpid()) + "\n";
      (void)!write(fd_, pid.data(), pid.size());
    }
    return {};
  }

 private:
  int fd_ = -1;
};

int run_agent_command(const GlobalOptions& global, const AgentFlags& flags) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return kExitUsage;
  config::Config cfg = loaded->config;
  agent::AgentOptions options = cfg.agent;
  options.thresholds = cfg.activity;
  options.retention = cfg.retention;
  if (!apply_duration(flags.interval, "--interval", 100, options.interval_ms) ||
      !apply_duration(flags.process_interval, "--process-interval", 100, options.process_interval_ms) ||
      !apply_duration(flags.flush, "--flush", 100, options.flush_interval_ms) ||
      !apply_duration(flags.duration, "--duration", 1, options.duration_ms)) {
    return kExitUsage;
  }
  if (!flags.state_dir.empty()) cfg.agent.state_dir = flags.state_dir;
  if (flags.listen) {
    if (*flags.listen == "off") {
      cfg.http_listen.clear();
    } else if (!config::split_address(*flags.listen)) {
      fmt::print(stderr, "tarmac: --listen {}: expected host:port (like 127.0.0.1:9478) or off\n", *flags.listen);
      return kExitUsage;
    } else {
      cfg.http_listen = *flags.listen;
    }
  }
  if (flags.socket) cfg.scheduler.socket = *flags.socket;
  const bool scheduler_on = cfg.scheduler.socket != "off";
  options.state_dir = config::state_dir(cfg);
  config::AgentClock clock_kind = cfg.agent_clock;
  if (!flags.clock.empty()) clock_kind = flags.clock == "sim" ? config::AgentClock::Sim : config::AgentClock::Real;

  if (flags.check_config) {
    fmt::print("configuration ok: {}\n", loaded->files.empty() ? std::string("the defaults (no file)")
                                                               : fmt::format("{}", fmt::join(loaded->files, ", ")));
    fmt::print("agent: every {} (processes every {}, slow values every {}), flush every {}, {} clock\n",
               util::format_duration_ms(options.interval_ms), util::format_duration_ms(options.process_interval_ms),
               options.slow_interval_ms ? util::format_duration_ms(options.slow_interval_ms) : std::string("never"),
               util::format_duration_ms(options.flush_interval_ms),
               clock_kind == config::AgentClock::Sim ? "simulator" : "real");
    fmt::print("store: {}\n", store::database_path(options.state_dir));
    fmt::print("http: {}\n", cfg.http_listen.empty() ? std::string("off")
                                                    : fmt::format("http://{}/ (/metrics, /api/v1, /healthz)",
                                                                  cfg.http_listen));
    fmt::print("scheduler: {}\n", scheduler_on ? fmt::format("socket {}, leases in {}", agent_scheduler_socket(cfg),
                                                                 sched::lock_dir(cfg.scheduler_lock_dir))
                                               : std::string("off"));
    const auto keep = [](long long ms) { return ms ? util::format_duration_ms(ms) : std::string("forever"); };
    fmt::print("retention: samples {}, minutes {}, hours {}, events {}\n", keep(options.retention.samples_ms),
               keep(options.retention.minutes_ms), keep(options.retention.hours_ms), keep(options.retention.events_ms));
    return kExitOk;
  }

  std::unique_ptr<agent::Clock> clock;
  if (clock_kind == config::AgentClock::Sim) {
    const char* state = std::getenv("TARMAC_SIM_STATE");
    if (state == nullptr || *state == '\0') {
      fmt::print(stderr, "tarmac: --clock sim needs the simulator's state directory (TARMAC_SIM_STATE): run the agent "
                         "under `tarmac sim --scenario NAME --speed X -- tarmac agent --clock sim`\n");
      return kExitUsage;
    }
    auto c = agent::sim_clock(state);
    if (!c.ok()) {
      print_error(c.error());
      return kExitCouldNotLook;
    }
    clock = std::move(*c);
  } else {
    clock = agent::real_clock();
  }

  AgentLock lock;
  if (auto r = lock.acquire(options.state_dir); !r.ok()) {
    print_error(r.error());
    return kExitUsage;
  }
  auto backend = open_backend(global);
  if (!backend.ok()) return kExitCouldNotLook;

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  // The live view for the HTTP endpoints and the alerts, fed by the sampling loop.
  alerts::Alerter alerter(cfg.alerts, cfg.activity, log_line);
  serve::LiveState live;
  std::unique_ptr<serve::Service> service;
  if (!cfg.http_listen.empty()) {
    const auto address = config::split_address(cfg.http_listen);
    serve::ServiceOptions sopts;
    sopts.host = address->first;
    sopts.port = address->second;
    sopts.db_path = store::database_path(options.state_dir);
    sopts.hostname = serve::host_name();
    sopts.alerts = [&alerter] {
      std::vector<serve::FiringAlert> out;
      for (const auto& a : alerter.firing()) {
        out.push_back({alerts::to_string(a.rule), alerts::to_string(a.severity), a.gpu, a.summary, a.since_ms});
      }
      return out;
    };
    service = std::make_unique<serve::Service>(live, sopts);
    if (auto r = service->start(); !r.ok()) {
      print_error(make_error(Error::Code::Invalid, r.error().message + " (set http.listen, or --listen off)"));
      return kExitUsage;
    }
    log_line(util::LogLevel::Info,
             fmt::format("serving http://{}/ (dashboard; /metrics, /api/v1/gpus, /api/v1/processes, "
                         "/api/v1/history, /healthz, /report)",
                         cfg.http_listen));
  }
  // The scheduler: the queue over the socket (docs/scheduler.md). A scheduler that cannot start is
  // logged; the agent still records.
  std::unique_ptr<sched::Daemon> scheduler;
  if (scheduler_on) {
    sched::DaemonOptions dopts;
    dopts.config = cfg.scheduler;
    dopts.socket_path = agent_scheduler_socket(cfg);
    dopts.lock_dir = sched::lock_dir(cfg.scheduler_lock_dir);
    dopts.state_dir = options.state_dir;
    dopts.db_path = store::database_path(options.state_dir);
    dopts.open_backend = [&global] { return open_backend(global); };
    dopts.log = log_line;
    dopts.notify = [&alerter](const sched::LeaseNotice& n) {
      alerts::Notice notice;
      notice.kind = n.reclaimed ? alerts::Notice::Kind::Resolved : alerts::Notice::Kind::Firing;
      notice.ts_ms = n.reclaimed ? std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count()
                                 : n.idle_since_unix_ms;
      notice.alert.rule = alerts::Rule::LeaseIdle;
      notice.alert.severity = alerts::Severity::Warning;
      notice.alert.key = fmt::format("lease:{}", n.id);
      if (!n.gpus.empty()) notice.alert.gpu = n.gpus.front();
      notice.alert.uuid = n.uuids.empty() ? "" : n.uuids.front();
      notice.alert.gpus = n.gpus;
      notice.alert.user = n.user;
      notice.alert.job = std::to_string(n.id);
      notice.alert.since_ms = n.idle_since_unix_ms;
      notice.alert.summary = n.summary;
      alerter.announce(std::move(notice));
    };
    auto started = sched::Daemon::start(std::move(dopts));
    if (started.ok()) {
      scheduler = std::move(*started);
      log_line(util::LogLevel::Info, fmt::format("scheduler: serving the queue on {}", agent_scheduler_socket(cfg)));
    } else {
      log_line(util::LogLevel::Warning,
               fmt::format("scheduler off: {} (set scheduler.socket, or --socket off)", started.error().message));
    }
  }
  const auto start_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  options.on_sample = [&](const agent::SampleView& s) {
    serve::AgentStats stats;
    stats.gpu_samples = s.summary.gpu_samples;
    stats.nvml_errors = s.nvml_errors;
    stats.last_sample_seconds = s.sample_seconds;
    stats.start_unix_ms = start_unix_ms;
    alerter.observe(s.merged, s.classes, s.ts_ms);  // first, so the view published sees its alerts
    if (service) live.publish(s.merged, s.classes, s.ts_ms, stats);
    if (scheduler) scheduler->observe(s.merged, s.classes);
  };

  if (scheduler) options.leased_gpus = [&scheduler] { return scheduler->given_gpus(); };
  auto summary = agent::run_agent(**backend, *clock, options, g_stop, log_line);
  if (service) service->stop();
  scheduler.reset();  // jobs keep running; the next agent re-attaches them
  if (!summary.ok()) {
    print_error(summary.error());
    return kExitCouldNotLook;
  }
  log_line(util::LogLevel::Info,
           fmt::format("stopped: {} GPU-samples over {} of {} clock in {:.1f} s ({:.0f} GPU-samples/s, {} late)",
                       summary->gpu_samples, util::format_duration_ms(summary->clock_ms),
                       clock_kind == config::AgentClock::Sim ? "simulated" : "real", summary->real_s,
                       summary->real_s > 0 ? static_cast<double>(summary->gpu_samples) / summary->real_s : 0.0,
                       summary->late_samples));
  return kExitOk;
}

}  // namespace

void add_agent_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand("agent",
                                 "Record every GPU and process into the store (docs/recorder.md) until stopped "
                                 "(SIGTERM, Ctrl-C)");
  auto flags = std::make_shared<AgentFlags>();
  cmd->add_option("--interval", flags->interval, "Time between samples (default agent.interval, 1s; at least 100ms)");
  cmd->add_option("--process-interval", flags->process_interval, "Time between process reads (default 5s)");
  cmd->add_option("--flush", flags->flush, "Real time between writes to the store (default 5s)");
  cmd->add_option("--duration", flags->duration, "Stop after this much clock time (default: run until stopped)");
  cmd->add_option("--state-dir", flags->state_dir, "Directory of the store, tarmac.db (default agent.state_dir)");
  cmd->add_option("--listen", flags->listen,
                  "Serve /metrics, the API and the dashboard on host:port, or off (default http.listen, "
                  "127.0.0.1:9478)");
  cmd->add_option("--socket", flags->socket,
                  "The scheduler's Unix socket, or off (default scheduler.socket, /run/tarmac/agent.sock)");
  cmd->add_option("--clock", flags->clock, "real, or sim: stamp samples with the NVML simulator's clock")
      ->check(CLI::IsMember({"real", "sim"}));
  cmd->add_flag("--check-config", flags->check_config,
                "Validate the configuration, print the agent's effective settings and exit (2 on an error)");
  cmd->callback([&global, &exit_code, flags] { exit_code = run_agent_command(global, *flags); });
}

}  // namespace tarmac::cli
