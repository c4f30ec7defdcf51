#include "tarmac/cli/agent_command.hpp"

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "tarmac/agent/agent.hpp"
#include "tarmac/agent/clock.hpp"
#include "tarmac/backfill/service.hpp"
#include "tarmac/alerts/alerter.hpp"
#include "tarmac/cli/agent_idle_jobs.hpp"
#include "tarmac/cli/agent_status.hpp"
#include "tarmac/host/job_map.hpp"
#include "tarmac/kube/kubelet_client.hpp"
#include "tarmac/kube/pod_watcher.hpp"
#include "tarmac/sched/daemon.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/sched/wire.hpp"
#include "tarmac/serve/live_wire.hpp"
#include "tarmac/serve/service.hpp"
#include "tarmac/cli/agent_reaper.hpp"
#include "tarmac/cli/app.hpp"
#include "tarmac/store/private_files.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"
#include "tarmac/util/process.hpp"

namespace tarmac::cli {

namespace {


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

// The agent's effective settings: the configuration files with the command's flags over them.
struct AgentSettings {
  config::Config cfg;
  agent::AgentOptions options;
  config::AgentClock clock_kind = config::AgentClock::Real;
  std::vector<std::string> files;  // the configuration files read, in order
  bool socket_flag = false;         // --socket named the path: it wins over $TARMAC_SOCKET too
  [[nodiscard]] bool scheduler_on() const { return cfg.scheduler.socket != "off"; }
  // The scheduler's socket: --socket as given, else $TARMAC_SOCKET, scheduler.socket, the default.
  [[nodiscard]] std::string socket() const {
    return socket_flag ? cfg.scheduler.socket : sched::socket_path(cfg.scheduler.socket);
  }
};

// Reads the configuration and applies the flags over it; nullopt (with a message) on bad usage.
std::optional<AgentSettings> resolve_settings(const GlobalOptions& global, const AgentFlags& flags) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return std::nullopt;
  AgentSettings s;
  s.cfg = loaded->config;
  s.files = loaded->files;
  s.options = s.cfg.agent;
  s.options.thresholds = s.cfg.activity;
  s.options.retention = s.cfg.retention;
  if (!apply_duration(flags.interval, "--interval", 100, s.options.interval_ms) ||
      !apply_duration(flags.process_interval, "--process-interval", 100, s.options.process_interval_ms) ||
      !apply_duration(flags.flush, "--flush", 100, s.options.flush_interval_ms) ||
      !apply_duration(flags.duration, "--duration", 1, s.options.duration_ms)) {
    return std::nullopt;
  }
  if (!flags.state_dir.empty()) s.cfg.agent.state_dir = flags.state_dir;
  if (flags.listen) {
    if (*flags.listen == "off") {
      s.cfg.http_listen.clear();
    } else if (!config::split_address(*flags.listen)) {
      fmt::print(stderr, "tarmac: --listen {}: expected host:port (like 127.0.0.1:9478) or off\n", *flags.listen);
      return std::nullopt;
    } else {
      s.cfg.http_listen = *flags.listen;
    }
  }
  if (flags.socket && !flags.socket->empty()) {  // "" as not given: the configured or default path
    s.cfg.scheduler.socket = *flags.socket;
    s.socket_flag = true;
  }
  s.options.state_dir = config::state_dir(s.cfg);
  s.clock_kind = s.cfg.agent_clock;
  if (!flags.clock.empty()) s.clock_kind = flags.clock == "sim" ? config::AgentClock::Sim : config::AgentClock::Real;
  return s;
}

// --check-config: what the agent would do, one line per part.
void print_settings(const AgentSettings& s) {
  const agent::AgentOptions& options = s.options;
  fmt::print("configuration ok: {}\n",
             s.files.empty() ? std::string("the defaults (no file)") : fmt::format("{}", fmt::join(s.files, ", ")));
  fmt::print("agent: every {} (processes every {}, slow values every {}), flush every {}, {} clock\n",
             util::format_duration_ms(options.interval_ms), util::format_duration_ms(options.process_interval_ms),
             options.slow_interval_ms ? util::format_duration_ms(options.slow_interval_ms) : std::string("never"),
             util::format_duration_ms(options.flush_interval_ms),
             s.clock_kind == config::AgentClock::Sim ? "simulator" : "real");
  fmt::print("store: {}\n", store::database_path(options.state_dir));
  fmt::print("http: {}\n", s.cfg.http_listen.empty()
                               ? std::string("off")
                               : fmt::format("http://{}/ (/metrics, /api/v1, /healthz)", s.cfg.http_listen));
  fmt::print("scheduler: {}\n", s.scheduler_on() ? fmt::format("socket {}, leases in {}", s.socket(),
                                                               sched::lock_dir(s.cfg.scheduler_lock_dir))
                                                 : std::string("off"));
  const auto& r = s.cfg.reaper;
  fmt::print("reaper: a pass every {}, warns at {} idle, {}{}\n", util::format_duration_ms(r.interval_ms),
             util::format_duration_ms(r.warn_after_ms),
             r.enabled ? fmt::format("ends at {}", util::format_duration_ms(r.idle_for_ms)) : std::string("ends nothing"),
             r.notify_tty ? ", writes to the holder's terminal" : "");
  const auto& k = s.cfg.kubernetes;
  fmt::print("kubernetes: {}\n",
             k.pod_resources_socket.empty() ? std::string("off")
             : kube::client_built()
                 ? fmt::format("pods' GPUs from {} every {}", k.pod_resources_socket, util::format_duration_ms(k.refresh_ms))
                 : std::string("off (this build has no kubelet client)"));
  const auto keep = [](long long ms) { return ms ? util::format_duration_ms(ms) : std::string("forever"); };
  fmt::print("retention: samples {}, minutes {}, hours {}, events {}\n", keep(options.retention.samples_ms),
             keep(options.retention.minutes_ms), keep(options.retention.hours_ms), keep(options.retention.events_ms));
}

// The clock the agent samples by: the real one, or the simulator's from its state directory.
Result<std::unique_ptr<agent::Clock>> open_clock(config::AgentClock kind, const char* sim_state_dir) {
  if (kind == config::AgentClock::Real) return agent::real_clock();
  return agent::sim_clock(sim_state_dir);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

// The alerts firing now, as the HTTP endpoint lists them (serve knows nothing of alerts).
std::vector<serve::FiringAlert> firing_alerts(const alerts::Alerter& alerter) {
  std::vector<serve::FiringAlert> out;
  for (const auto& a : alerter.firing()) {
    out.push_back({alerts::to_string(a.rule), alerts::to_string(a.severity), a.gpu, a.summary, a.since_ms,
                   alerts::summary_without_arguments(a)});
  }
  return out;
}

// Batches (docs/backfill.md), answered on the scheduler's socket and thread and sent to the
// configured servers by the dispatcher's threads; nullptr when the scheduler is off or their tables
// cannot be opened (logged: the queue still runs). A managed server's yield asks NVML, through a
// backend of its own, whether the server's memory is gone.
std::shared_ptr<backfill::Service> open_batches(const GlobalOptions& global, const AgentSettings& s) {
  if (!s.scheduler_on()) return nullptr;
  backfill::ServiceOptions options;
  options.db_path = store::database_path(s.options.state_dir);
  options.log = log_line;
  options.managed.server_memory = backfill::nvml_server_memory([&global] { return open_backend(global); }, log_line);
  options.quota = backfill::quota_from(s.cfg.scheduler);
  options.config = s.cfg.backfill;
  auto service = backfill::Service::open(std::move(options));
  if (!service.ok()) {
    log_line(util::LogLevel::Warning, fmt::format("backfill off: {}", service.error().message));
    return nullptr;
  }
  return std::move(*service);
}

// The scheduler's hooks for batches: their requests on its socket, their managed servers run as its
// backfill jobs (followed on its tick, let go of before a preemption).
void wire_backfill(sched::DaemonOptions& dopts, const std::shared_ptr<backfill::Service>& batches) {
  if (!batches) return;
  dopts.more_requests = [batches](const sched::Peer& peer, std::vector<util::Fd>& fds, const nlohmann::json& req,
                                  const sched::Defer& defer) { return batches->answer(peer, fds, req, defer); };
  dopts.agent_tick = [batches](sched::AgentJobs& jobs) { batches->tick(jobs); };
  dopts.before_preempt = [batches](const sched::Job& job, const sched::Job& for_job) {
    batches->before_preempt(job, for_job);
  };
  dopts.external_backfill = [batches] { return batches->external_backfill(); };
  dopts.yield_external = [batches](const std::string& name, const std::vector<std::string>& uuids,
                                   const sched::Job& for_job) { batches->yield_external(name, uuids, for_job); };
}

// The dispatcher's counters as /metrics writes them (serve knows no backfill).
serve::BackfillMetrics backfill_metrics(backfill::Service& batches) {
  const auto c = batches.counters();
  return {c.done,         c.failed,          c.retried,         c.interrupted,
          c.prompt_tokens, c.completion_tokens, c.in_flight,       c.batches_sending,
          c.yields,       static_cast<double>(c.yield_ms) / 1000.0};
}

// The host label's value: TARMAC_HOSTNAME (a pod's node, from Kubernetes' downward API), else
// http.hostname, else the machine's name; a given name that is not 1 to 253 of [0-9A-Za-z._-] is
// refused.
Result<std::string> agent_hostname(const config::HttpSettings& http) {
  const char* env = std::getenv("TARMAC_HOSTNAME");
  const bool from_env = env != nullptr && *env != '\0';
  if (!from_env && http.hostname.empty()) return util::host_name();
  std::string name = from_env ? std::string(env) : http.hostname;
  if (!host::valid_kube_name(name)) {
    return make_error(Error::Code::Invalid,
                      fmt::format("{} '{}' is not a host name (1 to 253 of 0-9, A-Z, a-z, '.', '_', '-')",
                                  from_env ? "TARMAC_HOSTNAME" : "http.hostname", util::terminal_text(name)));
  }
  return name;
}

// The backfill batches on each GPU now, as the dashboard's cards and `status` show them.
std::function<std::vector<serve::GpuBatch>()> batches_on_gpus(const std::shared_ptr<backfill::Service>& batches) {
  return [batches] {
    std::vector<serve::GpuBatch> out;
    for (auto& b : batches->on_gpus()) {
      out.push_back({std::move(b.uuid), std::move(b.model), std::move(b.server), b.answered, b.requests});
    }
    return out;
  };
}

// The HTTP endpoint on http.listen, serving `live`; nullptr when it is off. Fails (a usage error:
// the address is the user's) when it cannot listen.
Result<std::unique_ptr<serve::Service>> start_service(const AgentSettings& s, serve::LiveState& live,
                                                      const alerts::Alerter& alerter, const AgentReaper& reaper,
                                                      const std::shared_ptr<backfill::Service>& batches) {
  if (s.cfg.http_listen.empty()) return std::unique_ptr<serve::Service>();
  const auto address = config::split_address(s.cfg.http_listen);
  serve::ServiceOptions sopts;
  sopts.host = address->first;
  sopts.port = address->second;
  sopts.db_path = store::database_path(s.options.state_dir);
  TARMAC_TRY_ASSIGN(sopts.hostname, agent_hostname(s.cfg.http));
  sopts.hostname_label = s.cfg.http.hostname_label;
  sopts.insecure = s.cfg.http.insecure;
  sopts.expose_command_lines = s.cfg.http.expose_command_lines;
  sopts.trusted_files = geteuid() == 0;
  if (!s.cfg.http.web_config_file.empty()) {
    auto web = serve::load_web_config(s.cfg.http.web_config_file, sopts.trusted_files);
    if (!web.ok()) return make_error(Error::Code::Invalid, "http.web_config_file " + web.error().message);
    sopts.web = std::move(*web);
  }
  sopts.alerts = [&alerter] { return firing_alerts(alerter); };
  sopts.reaper = [&reaper] { return std::optional<serve::ReaperMetrics>(reaper.metrics()); };
  if (batches) {
    sopts.backfill = [batches] { return std::optional<serve::BackfillMetrics>(backfill_metrics(*batches)); };
    sopts.batches_on_gpus = batches_on_gpus(batches);
  }
  auto service = std::make_unique<serve::Service>(live, sopts);
  if (auto r = service->start(); !r.ok()) {
    // A library that cannot be loaded (OpenSSL) names what to install; anything else is the listener's.
    const bool library = r.error().code == Error::Code::NotFound || r.error().code == Error::Code::Unsupported;
    return make_error(Error::Code::Invalid, r.error().message + (library ? "" : " (set http.listen, or --listen off)"));
  }
  if (!service->warning().empty()) log_line(util::LogLevel::Warning, service->warning());
  log_line(util::LogLevel::Info,
           fmt::format("serving {}://{}/ (dashboard; /metrics, /api/v1/gpus, /api/v1/processes, "
                       "/api/v1/history, /healthz, /report){}",
                       service->scheme(), s.cfg.http_listen,
                       sopts.web && !sopts.web->users.empty() ? "; basic auth" : ""));
  return service;
}

// A lease left idle (or reclaimed) as the lease-idle alert's notice, for the Alerter's sinks.
alerts::Notice lease_notice(const sched::LeaseNotice& n) {
  alerts::Notice notice;
  notice.kind = n.reclaimed ? alerts::Notice::Kind::Resolved : alerts::Notice::Kind::Firing;
  notice.ts_ms = n.reclaimed ? util::wall_ms() : n.idle_since_unix_ms;
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
  return notice;
}

// The scheduler: the queue over the socket (docs/scheduler.md); nullptr when it is off. A
// scheduler that cannot start is logged; the agent still records.
std::unique_ptr<sched::Daemon> start_scheduler(const GlobalOptions& global, const AgentSettings& s,
                                               alerts::Alerter& alerter,
                                               const std::shared_ptr<backfill::Service>& batches,
                                               const serve::LiveState& live) {
  if (!s.scheduler_on()) return nullptr;
  sched::DaemonOptions dopts;
  dopts.config = s.cfg.scheduler;
  dopts.socket_path = s.socket();
  dopts.lock_dir = sched::lock_dir(s.cfg.scheduler_lock_dir);
  dopts.state_dir = s.options.state_dir;
  dopts.db_path = store::database_path(s.options.state_dir);
  dopts.open_backend = [&global] { return open_backend(global); };
  dopts.log = log_line;
  dopts.notify = [&alerter](const sched::LeaseNotice& n) { alerter.announce(lease_notice(n)); };
  wire_backfill(dopts, batches);
  wire_status(dopts, live, nvml_source(global), s.options, batches ? batches_on_gpus(batches) : nullptr);
  auto started = sched::Daemon::start(std::move(dopts));
  if (!started.ok()) {
    log_line(util::LogLevel::Warning,
             fmt::format("scheduler off: {} (set scheduler.socket, or --socket off)", started.error().message));
    return nullptr;
  }
  log_line(util::LogLevel::Info, fmt::format("scheduler: serving the queue on {}", s.socket()));
  return std::move(*started);
}

// The reaper's wiring: the agent's store and leases, its own backend, the alert sinks, the log.
AgentReaperOptions reaper_options(const GlobalOptions& global, const AgentSettings& s, alerts::Alerter& alerter) {
  AgentReaperOptions o;
  o.rules = s.cfg.reaper;
  o.db_path = store::database_path(s.options.state_dir);
  o.lease_dir = sched::lock_dir(s.cfg.scheduler_lock_dir);
  o.max_hold_ms = s.cfg.scheduler.max_hold_ms;
  o.open_backend = [&global] { return open_backend(global); };
  o.announce = [&alerter](alerts::Notice n) { alerter.announce(std::move(n)); };
  o.log = log_line;
  return o;
}

void log_stopped(const agent::AgentSummary& summary, config::AgentClock clock_kind) {
  log_line(util::LogLevel::Info,
           fmt::format("stopped: {} GPU-samples over {} of {} clock in {:.1f} s ({:.0f} GPU-samples/s, {} late)",
                       summary.gpu_samples, util::format_duration_ms(summary.clock_ms),
                       clock_kind == config::AgentClock::Sim ? "simulated" : "real", summary.real_s,
                       summary.real_s > 0 ? static_cast<double>(summary.gpu_samples) / summary.real_s : 0.0,
                       summary.late_samples));
}

// The kubelet watcher, when a socket is configured and this build has the client; else null (a
// build without the client says so once when the kubelet's socket is there).
std::unique_ptr<kube::PodWatcher> start_pod_watcher(const config::KubernetesSettings& k) {
  if (k.pod_resources_socket.empty()) return nullptr;
  if (!kube::client_built()) {
    if (::access(k.pod_resources_socket.c_str(), F_OK) == 0) {
      log_line(util::LogLevel::Warning,
               fmt::format("kubernetes: {} is here, but this tarmac was built without the kubelet client: pods are "
                           "not attributed (use the container image's build, docs/kubernetes.md)",
                           k.pod_resources_socket));
    }
    return nullptr;
  }
  kube::PodWatcherOptions o{k.pod_resources_socket, k.refresh_ms, std::min(2000LL, k.refresh_ms), log_line};
  o.stale_after_ms = std::max(60000LL, 3 * k.refresh_ms);
  return std::make_unique<kube::PodWatcher>(std::move(o));
}

// The GPUs of a snapshot as the kubelet's device ids can name them.
std::vector<host::GpuName> gpu_names(const gpu::Snapshot& snapshot) {
  std::vector<host::GpuName> out;
  for (const auto& d : snapshot.devices) out.push_back({d.id.index, d.id.uuid.value_or(""), d.id.minor_number});
  return out;
}

// Records until stopped (SIGTERM, SIGINT, --duration), with the HTTP endpoint and the scheduler
// beside the sampling loop; each sample goes to the alerts first, then to the live view and the
// scheduler.
int record_until_stopped(const GlobalOptions& global, AgentSettings& s) {
  const char* sim_state = std::getenv("TARMAC_SIM_STATE");
  if (s.clock_kind == config::AgentClock::Sim && (sim_state == nullptr || *sim_state == '\0')) {
    fmt::print(stderr, "tarmac: --clock sim needs the simulator's state directory (TARMAC_SIM_STATE): run the agent "
                       "under `tarmac sim --scenario NAME --speed X -- tarmac agent --clock sim`\n");
    return kExitUsage;
  }
  auto clock = open_clock(s.clock_kind, sim_state);
  if (!clock.ok()) {
    print_error(clock.error());
    return kExitCouldNotLook;
  }
  const auto idle_action = slurm::idle_job_action_from(s.cfg.slurm.idle_job_action);
  if (idle_action == slurm::IdleJobAction::Cancel &&
      s.cfg.slurm.idle_job_cancel_after_ms <= s.cfg.slurm.idle_job_warn_after_ms) {
    fmt::print(stderr, "tarmac: slurm.idle_job_cancel_after ({}) must be longer than slurm.idle_job_warn_after ({}): "
                       "a job is warned before it is cancelled\n",
               util::format_duration_ms(s.cfg.slurm.idle_job_cancel_after_ms),
               util::format_duration_ms(s.cfg.slurm.idle_job_warn_after_ms));
    return kExitUsage;
  }
  AgentLock lock;
  if (auto r = lock.acquire(s.options.state_dir); !r.ok()) {
    print_error(r.error());
    return kExitUsage;
  }
  auto backend = open_backend(global);
  if (!backend.ok()) return kExitCouldNotLook;
  install_stop_handlers();

  alerts::Alerter alerter(s.cfg.alerts, s.cfg.activity, log_line);
  serve::LiveState live;  // the live view for the HTTP endpoints, fed by the sampling loop
  AgentReaper reaper(reaper_options(global, s, alerter));
  const std::shared_ptr<backfill::Service> batches = open_batches(global, s);
  auto service = start_service(s, live, alerter, reaper, batches);
  if (!service.ok()) {
    print_error(service.error());
    return kExitUsage;
  }
  std::unique_ptr<sched::Daemon> scheduler = start_scheduler(global, s, alerter, batches, live);
  std::unique_ptr<AgentIdleJobs> idle_jobs;
  if (idle_action && *idle_action != slurm::IdleJobAction::Off && !s.cfg.slurm.job_map_dir.empty()) {
    AgentIdleJobsOptions o;
    o.settings = {*idle_action, s.cfg.slurm.idle_job_warn_after_ms, s.cfg.slurm.idle_job_cancel_after_ms,
                  s.cfg.slurm.idle_job_cancel_interactive};
    const char* path = std::getenv("PATH");
    const std::string search = std::string(path ? path : "") + ":/usr/sbin:/usr/bin";
    o.scontrol = util::resolve_command("scontrol", search).value_or("");
    o.scancel = util::resolve_command("scancel", search).value_or("");
    o.announce = [&alerter](alerts::Notice n) { alerter.announce(std::move(n)); };
    o.log = log_line;
    if (*idle_action == slurm::IdleJobAction::Cancel && (o.scontrol.empty() || o.scancel.empty())) {
      log_line(util::LogLevel::Warning, "slurm.idle_job_action = cancel, but scontrol or scancel is not on PATH: idle "
                                        "jobs are only warned about");
    }
    idle_jobs = std::make_unique<AgentIdleJobs>(std::move(o));
  }
  const long long start_unix_ms = util::wall_ms();
  s.options.on_sample = [&](const agent::SampleView& v) {
    serve::AgentStats stats;
    stats.gpu_samples = v.summary.gpu_samples;
    stats.nvml_errors = v.nvml_errors;
    stats.last_sample_seconds = v.sample_seconds;
    stats.start_unix_ms = start_unix_ms;
    alerter.observe(v.merged, v.classes, v.ts_ms);  // first, so the view published sees its alerts
    if (*service || scheduler) {  // the HTTP endpoints', and the scheduler socket's `status`
      std::map<unsigned, std::vector<gpu::MigActivity>> mig_classes;
      for (const auto& d : v.merged.devices) {
        for (std::size_t k = 0; k < d.mig.size(); ++k) {
          const bool leased = d.mig[k].uuid && v.leased.contains(*d.mig[k].uuid);
          mig_classes[d.id.index].push_back(gpu::classify_mig(d, k, s.cfg.activity, v.merged.timestamp_unix_ms / 1000,
                                                              leased ? gpu::Leased::Yes : gpu::Leased::No));
        }
      }
      live.publish(v.merged, v.classes, v.ts_ms, stats, v.jobs.map, v.jobs.pods, v.jobs.pods_listed, mig_classes,
                   v.since);
    }
    if (scheduler) scheduler->observe(v.merged, v.classes);
    if (idle_jobs) idle_jobs->observe(v.jobs, v.classes, v.ts_ms);
  };
  if (scheduler) s.options.leased_gpus = [&scheduler] { return scheduler->given_gpus(); };
  const std::unique_ptr<kube::PodWatcher> pods = start_pod_watcher(s.cfg.kubernetes);
  if (const std::string dir = s.cfg.slurm.job_map_dir; !dir.empty() || pods) {
    s.options.jobs = [dir, &pods](const gpu::Snapshot& snapshot) {
      agent::JobView view;
      if (!dir.empty()) view = {host::read_job_map(dir), host::read_job_infos(dir), {}};
      if (pods) {
        view.pods = host::map_pod_devices(*pods->latest(), gpu_names(snapshot)).map;
        view.pods_listed = pods->answers() > 0;
      }
      return view;
    };
  }

  auto summary = agent::run_agent(**backend, **clock, s.options, g_stop, log_line);
  if (*service) (*service)->stop();
  scheduler.reset();  // jobs keep running; the next agent re-attaches them
  if (!summary.ok()) {
    print_error(summary.error());
    return kExitCouldNotLook;
  }
  log_stopped(*summary, s.clock_kind);
  return kExitOk;
}

int run_agent_command(const GlobalOptions& global, const AgentFlags& flags) {
  auto settings = resolve_settings(global, flags);
  if (!settings) return kExitUsage;
  if (flags.check_config) {
    print_settings(*settings);
    return kExitOk;
  }
  return record_until_stopped(global, *settings);
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
